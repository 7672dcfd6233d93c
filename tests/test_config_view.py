"""contract.config.view.CaseView: the config type at the plug-in boundary fits both a CaseConfig
and the namedtuple FlagPerf hands its cases and engines."""

from __future__ import annotations

import dataclasses
from collections import namedtuple

import pytest

from contract.config import CaseConfig, CaseView
from tools.torch_sync import torch_sync

# FlagPerf's run_inference.py builds its config as a namedtuple of the merged keys.
FLAGPERF_KEYS = (
    "vendor",
    "case",
    "framework",
    "perf_dir",
    "data_dir",
    "log_dir",
    "batch_size",
    "fp16",
    "compiler",
    "num_workers",
    "log_freq",
    "repeat",
    "no_validation",
    "exist_onnx_path",
    "exist_compiler_path",
)


def flagperf_config(keys=FLAGPERF_KEYS, **extra):
    values = (
        dict.fromkeys(keys, None)
        | {k: v for k, v in {"vendor": "cpu", "batch_size": 8, "fp16": False}.items() if k in keys}
        | extra
    )
    return namedtuple("Config", list(values))(**values)


def case_config() -> CaseConfig:
    return CaseConfig(
        vendor="cpu",
        case="toy",
        framework="pytorch",
        perf_dir="/p",
        data_dir="/d",
        log_dir="/l",
        batch_size=8,
        fp16=False,
        compiler="onnxruntime",
        num_workers=0,
        log_freq=10,
        repeat=1,
        no_validation=False,
        exist_onnx_path=None,
        exist_compiler_path=None,
    )


def protocol_members() -> set[str]:
    """The names the protocol declares (not typing's own bookkeeping)."""
    return {name for name in vars(CaseView) if not name.startswith(("__", "_abc", "_is_"))}


def test_the_view_is_flagperf_keys_which_are_case_configs_required_fields():
    required = {
        f.name
        for f in dataclasses.fields(CaseConfig)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    assert required == set(FLAGPERF_KEYS)
    assert protocol_members() == required | {"_fields", "_asdict"}


def test_a_case_config_and_a_flagperf_namedtuple_both_fit():
    assert isinstance(case_config(), CaseView)
    assert isinstance(flagperf_config(), CaseView)
    assert isinstance(flagperf_config(FLAGPERF_KEYS + ("input_size", "has_dynamic_axis")), CaseView)  # more keys: fine


@pytest.mark.parametrize("missing", ["vendor", "batch_size", "exist_compiler_path"])
def test_a_config_without_a_flagperf_key_does_not_fit(missing):
    assert not isinstance(flagperf_config(tuple(k for k in FLAGPERF_KEYS if k != missing)), CaseView)
    assert not isinstance({k: None for k in FLAGPERF_KEYS}, CaseView)  # a mapping is not read as attributes


def test_torch_sync_takes_a_flagperf_namedtuple():
    assert torch_sync(flagperf_config()) is None  # cpu: nothing to wait for, and no attribute FlagPerf lacks is read
