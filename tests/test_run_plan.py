"""utils/run_plan.py: what a run runs and in which order (repetitions interleaved, ABBA variants), and its bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.errors import ConfigError
from utils.case_specs import CaseSpec
from utils.run_plan import AB_REPETITIONS, MAX_REPEAT, Variant, build_plan, check_variants, parse_repeat, with_sets

DIGITS, BERT = CaseSpec("digits", "pytorch", "/d"), CaseSpec("bert", "pytorch", "/b")


def order(plan) -> list[tuple[str, str, int]]:
    return [(item.variant or "-", item.spec.case, item.repetition) for item in plan]


def test_repetitions_are_interleaved_across_cases():
    plan = build_plan([Variant("", Path("/r"), [DIGITS, BERT])], {"digits:pytorch": 3, "bert:pytorch": 2})
    assert order(plan) == [
        ("-", "digits", 1),
        ("-", "bert", 1),
        ("-", "digits", 2),
        ("-", "bert", 2),
        ("-", "digits", 3),
    ]
    assert {item.run_dir for item in plan} == {Path("/r")}
    assert order(build_plan([Variant("", Path("/r"), [DIGITS])], {})) == [("-", "digits", 1)]  # one when not given


def test_two_variants_run_abba():
    a = Variant("A", Path("/r/A"), with_sets([DIGITS, BERT], ["compiler=onnxruntime"]))
    b = Variant("B", Path("/r/B"), with_sets([DIGITS, BERT], ["compiler=inductor"]))
    plan = build_plan([a, b], {"digits:pytorch": 2, "bert:pytorch": 2})
    assert order(plan) == [
        ("A", "digits", 1), ("B", "digits", 1), ("A", "bert", 1), ("B", "bert", 1),
        ("B", "digits", 2), ("A", "digits", 2), ("B", "bert", 2), ("A", "bert", 2),
    ]  # fmt: skip
    assert plan[1].run_dir == Path("/r/B") and plan[1].spec.overrides == ("compiler=inductor",)


def test_ab_runs_its_calibrated_repetitions_where_no_config_says():
    a = Variant("A", Path("/r/A"), with_sets([DIGITS, BERT], ["compiler=onnxruntime"]))
    b = Variant("B", Path("/r/B"), with_sets([DIGITS, BERT], ["compiler=inductor"]))
    plan = build_plan([a, b], {"bert:pytorch": 2}, AB_REPETITIONS)
    assert AB_REPETITIONS == 8  # docs/measurement.md, "Calibration": the smallest N meeting both goals
    assert [item.repetition for item in plan if item.spec.case == "digits" and item.variant == "A"] == list(range(1, 9))
    assert sum(item.spec.case == "bert" for item in plan) == 4  # a case config's repetitions wins
    assert order(plan)[:4] == [("A", "digits", 1), ("B", "digits", 1), ("A", "bert", 1), ("B", "bert", 1)]


def test_a_variant_set_is_added_to_a_cases_own_sets():
    model = CaseSpec("onnx_model", "pytorch", "/m", model="m.onnx", workload_overrides=("batch_sizes=[1]",))
    (spec,) = with_sets([model], ["fp16=true"])
    assert spec.overrides == ('model_path="m.onnx"', "batch_sizes=[1]", "fp16=true") and spec.key == model.key


@pytest.mark.parametrize(
    "text, message",
    [
        ("0", "from 1 to"),
        ("-2", "from 1 to"),
        ("x", "whole number"),
        ("1.5", "whole number"),
        (str(MAX_REPEAT + 1), "from 1 to"),
    ],
)
def test_bad_repeat_is_one_line(text, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse_repeat(text)
    assert str(info.value).startswith("--repeat: ") and "\n" not in str(info.value)
    assert parse_repeat("3") == 3 and parse_repeat(None) is None


def test_identical_or_missing_variants_are_refused():
    with pytest.raises(ConfigError, match="same variant"):
        check_variants(["compiler=onnxruntime", "fp16=false"], ["fp16=false", "compiler=onnxruntime"])
    with pytest.raises(ConfigError, match="give the variants"):
        check_variants([], [])
    check_variants(["compiler=onnxruntime"], [])  # B: the cases as configured
