"""The config's one definition of each concept: its defaults (``CASE_DEFAULTS``, read by
``setting``), where a value came from (``origin_of``) and the validators both sides share
(``common/values.py``)."""

from __future__ import annotations

import ast
from collections import namedtuple
from dataclasses import MISSING, fields
from pathlib import Path

import pytest

import common.values as shared
from contract.config import CASE_DEFAULTS, CaseConfig, origin_of, setting
from contract.config import values as case_values
from contract.settings import MEASUREMENT_DEFAULTS
from tests.conftest import TYPED_CASE_CONFIG as TYPED

INFERENCE = Path(__file__).resolve().parents[1] / "inference"
# FlagPerf's config: a namedtuple of the merged keys, without InferPerf's newer ones.
FlagPerfConfig = namedtuple("FlagPerfConfig", "vendor case batch_size seed")


def test_case_defaults_are_caseconfigs_own_field_defaults_and_flagperfs():
    own = {f.name: f.default for f in fields(CaseConfig) if f.default is not MISSING}
    assert own and {key: CASE_DEFAULTS[key] for key in own} == own
    assert {key: CASE_DEFAULTS[key] for key in MEASUREMENT_DEFAULTS} == MEASUREMENT_DEFAULTS
    # FlagPerf's required keys (no CaseConfig default) and its vendor key, pinned.
    extra = {key: value for key, value in CASE_DEFAULTS.items() if key not in own}
    # ... and multi_stream's samples per query, an extra key whose default its Scenario record holds (None here).
    assert extra == {
        "repeat": 1,
        "log_freq": 0,
        "fp16": False,
        "has_dynamic_axis": True,
        "multi_stream_samples_per_query": None,
    }
    assert (CASE_DEFAULTS["seed"], CASE_DEFAULTS["onnx_opset"], CASE_DEFAULTS["device"]) == (0, 17, "cpu")


def test_setting_reads_the_config_first_and_the_framework_default_where_it_lacks_the_key():
    flagperf = FlagPerfConfig("cpu", "digits", 8, seed=5)
    assert setting(flagperf, "seed") == 5
    assert setting(flagperf, "onnx_opset") == 17
    assert setting(flagperf, "has_dynamic_axis") is True
    config = CaseConfig(**{**TYPED, "seed": 7, "repeat": 3, "extra": {"has_dynamic_axis": False}})
    assert (setting(config, "seed"), setting(config, "has_dynamic_axis"), setting(config, "repeat")) == (7, False, 3)
    with pytest.raises(KeyError):  # a key without a framework default is the caller's mistake, not a silent None
        setting(flagperf, "no_such_key")


def test_origin_of_names_the_file_or_says_config():
    config = CaseConfig(**{**TYPED, "origin": {"batch_size": "configs/x/configurations.yaml"}})
    assert origin_of(config, "batch_size") == "configs/x/configurations.yaml"
    assert origin_of(config, "seed") == "config"
    assert origin_of(FlagPerfConfig("cpu", "digits", 8, 0), "batch_size") == "config"  # a namedtuple has no origin


def test_one_validator_set_serves_the_host_and_the_container():
    from utils import case_specs, host_config, run_plan

    assert host_config.true_or_false is shared.true_or_false is case_values._CHECKS["fp16"]
    assert host_config.bounded_path is case_specs.bounded_path is shared.bounded_path
    assert run_plan.MAX_REPEAT == shared.MAX_REPETITIONS  # run.py --repeat and the key repetitions: one bound
    assert case_values._CHECKS["repetitions"](shared.MAX_REPETITIONS) == shared.MAX_REPETITIONS
    with pytest.raises(ValueError, match=f"<= {shared.MAX_REPETITIONS} "):
        case_values._CHECKS["repetitions"](shared.MAX_REPETITIONS + 1)
    assert not (INFERENCE / "utils" / "host_values.py").exists()


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            yield "def", node.name, node
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) == 3
        ):
            target = node.args[0]
            if (
                isinstance(target, ast.Name)
                and target.id == "config"
                or isinstance(target, ast.Attribute)
                and target.attr == "config"
            ):
                yield "getattr", "", node


# FlagPerf's ``torch_sync(config)`` takes any object a FlagPerf case hands it (its own reads).
GETATTR_ALLOWED = {"contract/config/case.py", "tools/torch_sync.py"}


def test_defaults_and_origins_are_read_in_one_place():
    getattrs, origins = [], []
    for path in INFERENCE.rglob("*.py"):
        relative = str(path.relative_to(INFERENCE))
        for kind, name, node in _calls(ast.parse(path.read_text(encoding="utf-8"))):
            if kind == "getattr" and relative not in GETATTR_ALLOWED:
                getattrs.append(f"{relative}:{node.lineno}")
            if kind == "def" and name in ("_origin", "origin_of") and relative != "contract/config/case.py":
                origins.append(f"{relative}:{node.lineno}")
    assert getattrs == []  # getattr(config, key, default): use contract.config.setting (the default is CASE_DEFAULTS')
    assert origins == []  # use contract.config.origin_of
