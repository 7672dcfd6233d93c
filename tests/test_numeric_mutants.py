"""tools.checks.numeric at its edges (mutation testing, docs/testing.md): every message in full,
limits met exactly, float64 arithmetic, nothing finite to compare, several reasons of a kind."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from contract.tolerances import DEFAULT_TOLERANCES, tolerances_for
from tools.checks.numeric import TINY, compare_outputs

FP32 = DEFAULT_TOLERANCES["fp32"]


def t(values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype)


# ---- tolerances ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "precision, overrides, message",
    [
        ("fp64", None, "precision 'fp64': no numeric tolerance known (known: fp32, tf32, fp16, bf16, int8, fp8)"),
        ("fp32", [1], "numeric_tolerance must be a mapping, got [1]"),
        (
            "fp32",
            {"fp16": {"maxrel": 1}},
            "numeric_tolerance.fp16.maxrel: unknown tolerance (known: max_rel, mean_rel, top1_agreement)",
        ),
        (
            "fp32",
            {"fp16": 0.5},
            "numeric_tolerance.fp16 must be a mapping of max_rel, mean_rel, top1_agreement, got 0.5",
        ),
        (
            "fp32",
            {"fp99": {}},
            "numeric_tolerance.fp99: unknown key (use max_rel, mean_rel, top1_agreement or a precision: fp32, "
            "tf32, fp16, bf16, int8, fp8)",
        ),
        (
            "fp32",
            {"top1_agreement": 1.01},
            "numeric_tolerance.top1_agreement is a fraction and must be at most 1, got 1.01",
        ),
        ("fp32", {"max_rel": float("inf")}, "numeric_tolerance.max_rel must be a positive number, got inf"),
    ],
)
def test_tolerance_messages(precision, overrides, message):
    with pytest.raises(ValueError) as info:
        tolerances_for(precision, overrides)
    assert str(info.value) == message


def test_top1_agreement_of_exactly_one_and_integer_limits():
    assert tolerances_for("int8", {"top1_agreement": 1, "max_rel": 2}) == {
        "max_rel": 2.0,
        "mean_rel": 5e-2,
        "top1_agreement": 1.0,
    }


# ---- the figures ------------------------------------------------------------------------
def test_limits_met_exactly_pass():
    ref = t([[1.0, 1.0], [1.0, 1.0]])  # RMS 1
    act = t([[1.5, 1.0], [1.0, 1.0]])  # max_rel 0.5, mean_rel 0.125; rows agree
    limits = {"max_rel": 0.5, "mean_rel": 0.125, "top1_agreement": 1.0}
    rep = compare_outputs([[ref]], [[act]], "fp16", limits)
    assert rep.passed, rep.reasons
    assert rep.precision == "fp16" and rep.tolerances == limits and rep.tolerances is not limits
    wrong = t([[1.0, 1.5], [1.0, 1.0]])  # row 0 now picks class 1: agreement 0.5
    rep = compare_outputs([[ref]], [[wrong]], "fp16", {"top1_agreement": 0.5})
    assert rep.passed and rep.outputs[0].top1_agreement == 0.5


def test_differences_are_taken_in_float64():
    ref = t([1e8, 0.0])
    act = t([1.0, 0.0])  # 1e8 - 1 is not a float32
    (d,) = compare_outputs([[ref]], [[act]], "fp32", FP32).outputs
    assert d.max_abs == 99_999_999.0 and d.mean_abs == 99_999_999.0 / 2
    big = t([3e20, 4e20])  # squares overflow float32
    (d,) = compare_outputs([[big]], [[big.clone()]], "fp32", FP32).outputs
    assert d.scale == pytest.approx(math.sqrt((9e40 + 16e40) / 2), rel=1e-6)


def test_argmax_in_float64_and_nan_is_never_the_top_class():
    # 16777217 and 16777216 are equal in float32 only: float64 sees two classes
    ref = torch.tensor([[16777216.0, 16777217.0]], dtype=torch.float64)
    act = torch.tensor([[16777217.0, 16777216.0]], dtype=torch.float64)
    assert compare_outputs([[ref]], [[act]], "fp32", {}).outputs[0].top1_agreement == 0.0
    ref = t([[1.0, 0.0], [0.0, 1.0]])
    act = t([[float("nan"), 0.0], [0.0, 1.0]])  # row 0: NaN is no answer, class 1 wins
    assert compare_outputs([[ref]], [[act]], "fp32", {}).outputs[0].top1_agreement == 0.5


def test_nothing_finite_to_compare():
    nan = t([float("nan"), float("inf")])
    rep = compare_outputs([[nan]], [[nan.clone()]], "fp32", FP32)
    (d,) = rep.outputs
    assert (d.max_abs, d.mean_abs, d.scale, d.max_rel, d.mean_rel) == (0.0, 0.0, TINY, 0.0, 0.0)
    assert rep.passed


def test_reference_nan_positions_are_left_out():
    ref = t([float("nan"), 2.0, 2.0])
    act = t([5.0, 2.0, 3.0])
    (d,) = compare_outputs([[ref]], [[act]], "fp32", FP32).outputs
    assert (d.max_abs, d.mean_abs, d.scale) == (1.0, 0.5, 2.0)


def test_two_class_output_is_a_classifier_and_a_later_non_classifier_batch_drops_top1():
    two = t([[0.0, 1.0], [1.0, 0.0]])
    assert compare_outputs([[two]], [[two.clone()]], "fp32", FP32).outputs[0].top1_agreement == 1.0
    one_class = t([[0.5], [0.25]])
    rep = compare_outputs([[two], [one_class]], [[two.clone()], [one_class.clone()]], "fp32", FP32)
    assert rep.outputs[0].top1_agreement is None and rep.outputs[0].shape == [2, 2]
    empty = torch.zeros(0, 3)
    assert compare_outputs([[empty]], [[empty.clone()]], "fp32", FP32).outputs[0].top1_agreement is None


def test_bare_tensors_lists_and_scalars_are_one_output_each():
    rep = compare_outputs([t([[1.0, 2.0], [3.0, 4.0]])], [t([[1.0, 2.0], [3.0, 4.0]])], "fp32", FP32)
    assert [d.name for d in rep.outputs] == ["output0"] and rep.samples == 2 and rep.outputs[0].shape == [2, 2]
    rep = compare_outputs([[[1.0, 2.0, 3.0]]], [[[1.0, 2.0, 3.5]]], "fp32", FP32)  # python lists, not tensors
    assert rep.outputs[0].max_abs == 0.5 and rep.samples == 3
    rep = compare_outputs([[np.float64(2.0)]], [[np.float64(2.0)]], "fp32", FP32)
    assert rep.samples == 1 and rep.outputs[0].shape == [] and rep.passed
    rep = compare_outputs([[]], [[]], "fp32", FP32)
    assert rep.samples == 0 and rep.outputs == [] and rep.passed and rep.batches == 1


def test_every_distinct_structural_and_nonfinite_problem_is_reported():
    ref = [[torch.ones(2), torch.ones(3)], [torch.ones(2), torch.ones(3)]]
    act = [[torch.ones(2)], [torch.ones(2), torch.ones(3), torch.ones(1)]]
    assert compare_outputs(ref, act, "fp32", FP32).reasons == [
        "numeric check: the engine returned 1 outputs, the framework 2 (in 1 of 2 batches)",
        "numeric check: the engine returned 3 outputs, the framework 2 (in 1 of 2 batches)",
    ]
    ref = [[torch.ones(2), torch.ones(3), torch.ones(4)]]
    act = [[torch.ones(5), torch.ones(6), torch.ones(4)]]
    rep = compare_outputs(ref, act, "fp32", FP32)
    assert rep.reasons == [
        "numeric check: output0 has shape [5] but the framework's has [2]",
        "numeric check: output1 has shape [6] but the framework's has [3]",
    ]
    assert [d.name for d in rep.outputs] == ["output2"]  # compared after the mismatches
    nan = t([float("nan")])
    rep = compare_outputs([[torch.ones(1), torch.ones(1)]], [[nan, nan]], "fp32", FP32)
    assert rep.reasons == [
        "numeric check: output0 has NaN or infinite values where the framework's are finite",
        "numeric check: output1 has NaN or infinite values where the framework's are finite",
    ]


def test_every_all_zero_reference_is_reported():
    zeros = torch.zeros(2)
    rep = compare_outputs([[zeros, zeros]], [[t([1.0, 0.0]), t([0.0, 2.0])]], "fp32", FP32)
    assert rep.reasons == [
        "numeric check: output0 of the framework is all zeros but the engine's differs by up to 1.0e+00",
        "numeric check: output1 of the framework is all zeros but the engine's differs by up to 2.0e+00",
    ]


def test_label_and_against_word_every_reason():
    rep = compare_outputs(
        [[t([[1.0, 0.0]])]],
        [[t([[0.0, 1.0]])]],
        "bf16",
        DEFAULT_TOLERANCES["bf16"],
        label="query 3",
        against="accuracy mode",
    )
    assert rep.reasons == [
        "query 3: output0 differs from accuracy mode by 1.4e+00 of its RMS (limit 5.0e-02 at bf16)",
        "query 3: output0 differs from accuracy mode by 1.4e+00 of its RMS on average (limit 1.0e-02 at bf16)",
        "query 3: output0's top-1 class agrees with accuracy mode on 0.0% of samples (limit 98.0% at bf16)",
    ]
