"""Numeric check: figures computed by hand, near-zero references, top-1, mismatches, tolerances."""

import json
import math

import pytest
import torch

from contract.tolerances import DEFAULT_TOLERANCES, tolerances_for
from tools.checks.numeric import TINY, compare_outputs

FP32 = DEFAULT_TOLERANCES["fp32"]


def t(values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype)


def test_hand_computed_figures_one_batch():
    # reference RMS = sqrt((9 + 16 + 0 + 0) / 4) = 2.5; |diff| = .5, 0, .25, 0
    rep = compare_outputs([[t([3.0, 4.0, 0.0, 0.0])]], [[t([3.5, 4.0, -0.25, 0.0])]], "fp32", FP32)
    (d,) = rep.outputs
    assert d.name == "output0"
    assert d.shape == [4]
    assert d.max_abs == 0.5
    assert d.mean_abs == 0.1875
    assert d.scale == 2.5
    assert d.max_rel == 0.2
    assert d.mean_rel == 0.075
    assert d.top1_agreement is None
    assert rep.batches == 1 and rep.samples == 4
    assert not rep.passed
    assert rep.reasons == [
        "numeric check: output0 differs from the framework by 2.0e-01 of its RMS (limit 1.0e-03 at fp32)",
        "numeric check: output0 differs from the framework by 7.5e-02 of its RMS on average (limit 1.0e-04 at fp32)",
    ]


def test_aggregation_over_batches_pools_scale_and_means():
    ref = [[t([1.0, 1.0])], [t([3.0, 3.0])]]
    act = [[t([1.0, 1.5])], [t([2.0, 3.0])]]
    rep = compare_outputs(ref, act, "fp32", FP32)
    (d,) = rep.outputs
    assert d.max_abs == 1.0  # max of the batch maxima (0.5, 1.0)
    assert d.mean_abs == 0.375  # (0 + .5 + 1 + 0) / 4
    assert d.scale == pytest.approx(math.sqrt(5.0), rel=1e-15)  # sqrt((1+1+9+9)/4)
    assert d.max_rel == pytest.approx(1 / math.sqrt(5.0), rel=1e-15)
    assert rep.batches == 2 and rep.samples == 4


def test_near_zero_reference_does_not_explode():
    ref = torch.linspace(-1e-9, 1e-9, 101, dtype=torch.float64)
    ref[50] = 0.0
    err = 1e-14
    act = ref + err
    rep = compare_outputs([[ref]], [[act]], "fp32", FP32)
    (d,) = rep.outputs
    rms = math.sqrt(sum(v * v for v in ref.tolist()) / 101)
    assert d.scale == pytest.approx(rms, rel=1e-12)
    assert d.max_rel == pytest.approx(err / rms, rel=1e-3)
    assert d.max_rel < 1e-4
    assert rep.passed, rep.reasons
    # ByteMLPerf's element-wise relative difference on the same data is unbounded.
    elementwise = ((act - ref).abs() / ref.abs()).max().item()
    assert elementwise > 1e6


def test_all_zero_reference():
    zeros = torch.zeros(3, 5)
    same = compare_outputs([[zeros]], [[zeros.clone()]], "fp32", FP32)
    assert same.passed
    assert same.outputs[0].max_rel == 0.0 and same.outputs[0].mean_rel == 0.0
    assert same.outputs[0].scale == TINY
    off = zeros.clone()
    off[1, 2] = 1e-6
    rep = compare_outputs([[zeros]], [[off]], "fp32", FP32)
    assert not rep.passed
    assert rep.reasons == [
        "numeric check: output0 of the framework is all zeros but the engine's differs by up to 1.0e-06"
    ]


def test_top1_agreement_exact_fraction_pooled():
    ref1 = t([[1.0, 2.0, 0.0], [3.0, 0.0, 1.0], [0.0, 0.0, 5.0], [1.0, 9.0, 2.0]])
    act1 = ref1.clone()
    act1[2] = t([6.0, 0.0, 5.0])  # row 2 now predicts class 0: disagrees
    ref2 = t([[0.0, 1.0, 0.0], [2.0, 1.0, 0.0]])
    rep = compare_outputs([[ref1], [ref2]], [[act1], [ref2.clone()]], "fp32", FP32)
    assert rep.outputs[0].top1_agreement == 5 / 6
    assert rep.samples == 6
    assert (
        "numeric check: output0's top-1 class agrees with the framework on 83.3% of samples (limit 99.0% at fp32)"
        in rep.reasons
    )
    single = compare_outputs([[ref1]], [[act1]], "fp32", FP32)
    assert single.outputs[0].top1_agreement == 0.75


@pytest.mark.parametrize(
    "ref",
    [torch.ones(2, 3, 4), torch.ones(6), torch.ones(4, 1), torch.ones(4, 3, dtype=torch.int64)],
    ids=["3d", "1d", "one-class", "integer"],
)
def test_top1_is_none_for_non_classifier_outputs(ref):
    rep = compare_outputs([[ref]], [[ref.clone()]], "fp32", FP32)
    assert rep.outputs[0].top1_agreement is None
    assert rep.passed


def test_shape_mismatch_is_a_failed_report():
    ref = [[torch.ones(2, 10)], [torch.ones(2, 10)]]
    act = [[torch.ones(2, 1000)], [torch.ones(2, 1000)]]
    rep = compare_outputs(ref, act, "fp32", FP32)
    assert not rep.passed
    assert rep.outputs == []
    assert rep.reasons == [
        "numeric check: output0 has shape [2, 1000] but the framework's has [2, 10] (in 2 of 2 batches)"
    ]


def test_output_count_mismatch_is_a_failed_report_and_compares_the_rest():
    ref = [[torch.ones(3), torch.zeros(2)]]
    act = [[torch.ones(3)]]
    rep = compare_outputs(ref, act, "fp32", FP32)
    assert not rep.passed
    assert rep.reasons == ["numeric check: the engine returned 1 outputs, the framework 2"]
    assert [d.name for d in rep.outputs] == ["output0"]
    assert rep.outputs[0].max_abs == 0.0


def test_batch_count_mismatch_is_a_failed_report():
    rep = compare_outputs([[torch.ones(2)], [torch.ones(2)]], [[torch.ones(2)]], "fp32", FP32)
    assert not rep.passed
    assert rep.batches == 1
    assert rep.reasons == ["numeric check: the framework gave 2 batches of outputs, the engine 1"]


def test_nan_in_actual_fails_and_nan_in_both_is_ignored():
    ref = t([1.0, 2.0, 3.0, 4.0])
    act = ref.clone()
    act[1] = float("nan")
    rep = compare_outputs([[ref]], [[act]], "fp32", FP32)
    assert not rep.passed
    assert rep.reasons == ["numeric check: output0 has NaN or infinite values where the framework's are finite"]
    assert rep.outputs[0].max_abs == 0.0  # the finite positions agree
    inf = ref.clone()
    inf[0] = float("inf")
    assert not compare_outputs([[ref]], [[inf]], "fp32", FP32).passed
    ref_nan = ref.clone()
    ref_nan[2] = float("nan")
    both = compare_outputs([[ref_nan]], [[ref_nan.clone()]], "fp32", FP32)
    assert both.passed
    assert both.outputs[0].scale == pytest.approx(math.sqrt((1 + 4 + 16) / 3))


def test_compares_in_float64_and_fp16_outputs():
    ref = t([1.0, 2.0], torch.float16)
    act = t([1.0, 2.001953125], torch.float16)  # one fp16 ulp at 2
    rep = compare_outputs([[ref]], [[act]], "fp16", DEFAULT_TOLERANCES["fp16"])
    assert rep.outputs[0].max_abs == 0.001953125
    assert rep.outputs[0].scale == math.sqrt(2.5)
    assert rep.passed


def test_report_to_dict_is_json():
    rep = compare_outputs([[torch.ones(2, 3)]], [[torch.ones(2, 3)]], "fp32", FP32)
    data = json.loads(json.dumps(rep.to_dict()))
    assert data["passed"] is True
    assert data["outputs"][0]["top1_agreement"] == 1.0
    assert data["outputs"][0]["shape"] == [2, 3]
    assert data["tolerances"] == FP32


def test_no_batches_fails():
    rep = compare_outputs([], [], "fp32", FP32)
    assert not rep.passed and rep.reasons == ["numeric check: there were no outputs to compare"]


def test_tolerance_defaults_and_ordering():
    assert tolerances_for("fp32") == {"max_rel": 1e-3, "mean_rel": 1e-4, "top1_agreement": 0.99}
    assert tolerances_for("FP16") == DEFAULT_TOLERANCES["fp16"]
    assert set(DEFAULT_TOLERANCES) == {"fp32", "tf32", "fp16", "bf16", "int8", "fp8"}
    order = ["fp32", "tf32", "fp16", "bf16", "int8", "fp8"]
    for tighter, looser in zip(order, order[1:]):
        a, b = DEFAULT_TOLERANCES[tighter], DEFAULT_TOLERANCES[looser]
        assert b["max_rel"] >= a["max_rel"] and b["mean_rel"] >= a["mean_rel"]
        assert b["top1_agreement"] <= a["top1_agreement"]
    assert DEFAULT_TOLERANCES["fp16"]["max_rel"] > DEFAULT_TOLERANCES["fp32"]["max_rel"]
    tolerances_for("fp32")["max_rel"] = 1.0  # a copy: the defaults stay
    assert DEFAULT_TOLERANCES["fp32"]["max_rel"] == 1e-3


def test_tolerance_overrides():
    assert tolerances_for("fp32", {"max_rel": 0.5}) == {"max_rel": 0.5, "mean_rel": 1e-4, "top1_agreement": 0.99}
    nested = {"fp16": {"mean_rel": 0.25}, "fp32": {"top1_agreement": 0.5}}
    assert tolerances_for("fp16", nested) == {"max_rel": 2e-2, "mean_rel": 0.25, "top1_agreement": 0.98}
    assert tolerances_for("fp32", nested) == {"max_rel": 1e-3, "mean_rel": 1e-4, "top1_agreement": 0.5}
    assert tolerances_for("bf16", nested) == DEFAULT_TOLERANCES["bf16"]
    loose = tolerances_for("fp32", {"max_rel": 0.3, "mean_rel": 0.1})
    assert compare_outputs([[t([3.0, 4.0, 0.0, 0.0])]], [[t([3.5, 4.0, -0.25, 0.0])]], "fp32", loose).passed


@pytest.mark.parametrize(
    "overrides, names",
    [
        ({"max_abs": 1e-3}, "numeric_tolerance.max_abs"),
        ({"max_rel": 0}, "numeric_tolerance.max_rel"),
        ({"mean_rel": -1e-3}, "numeric_tolerance.mean_rel"),
        ({"max_rel": "big"}, "numeric_tolerance.max_rel"),
        ({"max_rel": True}, "numeric_tolerance.max_rel"),
        ({"top1_agreement": 1.5}, "numeric_tolerance.top1_agreement"),
        ({"fp64": {"max_rel": 1.0}}, "numeric_tolerance.fp64"),
        ({"fp16": {"maxrel": 1.0}}, "numeric_tolerance.fp16.maxrel"),
        ({"fp16": {"max_rel": -2}}, "numeric_tolerance.fp16.max_rel"),
        ({"fp16": 0.1}, "numeric_tolerance.fp16"),
        ({"max_rel": 0.1, "fp16": {"max_rel": 0.1}}, "numeric_tolerance.max_rel"),
    ],
)
def test_bad_overrides_raise_naming_the_key(overrides, names):
    with pytest.raises(ValueError, match=names.replace(".", r"\.")):
        tolerances_for("fp32", overrides)


def test_unknown_precision_raises():
    with pytest.raises(ValueError, match="fp64"):
        tolerances_for("fp64")
