"""contract.config at its edges: every bound of a case key tried on both sides, every refusal to its
exact line (the file and key it names included), and the CUDA device check on each of its answers.

tests/test_config.py, test_config_keys.py and test_config_merge.py show the merge rules and the
typed keys working; this file pins what a small slip in ``contract/config/{values,case,load,expr}.py``
would change for a user: a name, path, FLOPs or plain value one past its bound, the line that says
so, a multi_stream query that is not a whole number of batches, a device this machine cannot use,
a FlagPerf-style config (no ``origin``) named as ``config`` (docs/testing.md, "Mutation testing").

No GPU exists here: the CUDA answers come from a stand-in ``torch`` module put in ``sys.modules``
(no torch at all, a CPU-only build, a CUDA build without a usable device, one or two devices).
"""

from __future__ import annotations

import os
import sys
import textwrap
import types
from collections import namedtuple
from pathlib import Path

import pytest

from common.errors import ConfigError, shown
from common.scenario import SCENARIOS
from common.values import MAX_NAME, MAX_PATH, MAX_PATH_PART, MAX_TEXT, one_or_list, positive_int
from common.yamlio import YamlTooLarge
from contract.config import (
    CaseConfig,
    check_choice,
    check_device_available,
    check_extra,
    check_flag,
    load_case_config,
    merge_case_config,
    origin_of,
    parse_overrides,
    query_samples,
    values,
)
from contract.config.expr import parse_number
from contract.config.values import MAX_EXTRA_INT, MAX_EXTRA_ITEMS, MAX_FLOPS, MAX_KEY, REQUIRED_KEYS
from tests.conftest import TYPED_CASE_CONFIG as TYPED
from tests.infra.case_config import BASE

MULTI_STREAM = SCENARIOS["multi_stream"]
NUL_PATH = f"must be a path of at most {MAX_PATH} characters and {MAX_PATH_PART} per name, without NUL, got"


def make(**overrides) -> CaseConfig:
    return CaseConfig(**{**TYPED, **overrides})


def refusal(**overrides) -> str:
    with pytest.raises(ConfigError) as info:
        make(**overrides)
    return str(info.value)


def reason(check, *args, error: type[Exception] = ValueError) -> str:
    with pytest.raises(error) as info:
        check(*args)
    return str(info.value)


# --- contract/config/values.py: the typed keys' own checks ----------------------------------------


def test_onnx_opset_is_accepted_from_the_lowest_to_the_highest_the_exporter_writes():
    low, high, source = values.supported_onnx_opsets()
    assert 1 < low < high
    assert (make(onnx_opset=low).onnx_opset, make(onnx_opset=high).onnx_opset) == (low, high)
    expected = "config: key 'onnx_opset' must be an ONNX opset from {low} to {high} (what {source} supports), got {got}"
    for outside in (low - 1, high + 1):
        assert refusal(onnx_opset=outside) == expected.format(low=low, high=high, source=source, got=outside)


def test_compiler_name_of_max_name_characters_is_accepted_and_one_more_is_refused():
    assert make(compiler="a" * MAX_NAME).compiler == "a" * MAX_NAME
    long = "a" * (MAX_NAME + 1)
    assert refusal(compiler=long) == (
        f"config: key 'compiler' must be a name of letters, digits, '_' or '-', or null, got {shown(long)}"
    )


def test_exist_onnx_path_with_a_nul_or_a_name_over_255_characters_is_refused():
    assert make(exist_onnx_path="/m/" + "n" * MAX_PATH_PART).exist_onnx_path == "/m/" + "n" * MAX_PATH_PART
    assert refusal(exist_onnx_path="/m/a\0.onnx") == f"config: key 'exist_onnx_path' {NUL_PATH} '/m/a\\x00.onnx'"
    long = "/m/" + "n" * (MAX_PATH_PART + 1)
    assert refusal(exist_compiler_path=long) == f"config: key 'exist_compiler_path' {NUL_PATH} {shown(long)}"


def test_flops_up_to_1e21_per_sample_are_accepted_and_more_refused():
    assert make(flops=MAX_FLOPS).flops == 1e21
    assert make(flops="1e20*10").flops == 1e21
    assert refusal(flops="1e21*10") == (
        "config: key 'flops' must be a positive number of FLOPs per sample <= 1e+21, got '1e21*10'"
    )


def test_batch_sizes_take_best_or_sizes_and_refuse_any_other_word():
    # _best_or runs once, at import, to build the table: called here, so its own code is what is tried.
    check = values._best_or(one_or_list(positive_int))
    assert check("best") == "best"
    assert check([1, 8]) == [1, 8] and check(4) == [4]
    for word in ("BEST", "all"):
        assert reason(check, word) == (
            f"must be a batch size, a list of them, or 'best' (the engine's best batch sizes), got '{word}'"
        )
    assert make(batch_sizes="best").batch_sizes == "best"
    assert make(batch_sizes=[1, 8]).batch_sizes == [1, 8]


# --- the CUDA device check, with a stand-in torch (no GPU exists here) -------------------------


def fake_torch(monkeypatch, *, available: bool, devices: int = 0, cuda: str | None = "12.4") -> None:
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(is_available=lambda: available, device_count=lambda: devices)
    torch.version = types.SimpleNamespace(cuda=cuda)
    monkeypatch.setitem(sys.modules, "torch", torch)


def test_cpu_needs_nothing_and_cuda_without_torch_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` fails as if it were not installed
    assert check_device_available("cpu") is None
    assert check_device_available("cuda") == "is a CUDA device, but torch is not installed here"
    assert check_device_available("cuda:1") == "is a CUDA device, but torch is not installed here"


@pytest.mark.parametrize(
    "cuda, build",
    [(None, "a CPU-only torch build"), ("12.4", "torch built for CUDA 12.4")],
)
def test_cuda_on_a_torch_without_a_usable_device_names_the_build(monkeypatch, cuda, build):
    fake_torch(monkeypatch, available=False, cuda=cuda)
    assert check_device_available("cuda:0") == (
        f"is 'cuda:0', but this machine has no usable CUDA device ({build}, torch.cuda.is_available() is False)"
    )


def test_cuda_index_must_be_below_the_device_count(monkeypatch):
    fake_torch(monkeypatch, available=True, devices=1)
    assert check_device_available("cuda") is None  # no index: device 0
    assert check_device_available("cuda:0") is None
    assert check_device_available("cuda:1") == "is 'cuda:1', but this machine has 1 CUDA device(s) (cuda:0..cuda:0)"
    fake_torch(monkeypatch, available=True, devices=2)
    assert check_device_available("cuda:1") is None
    assert check_device_available("cuda:2") == "is 'cuda:2', but this machine has 2 CUDA device(s) (cuda:0..cuda:1)"


# --- any other key: plain values a C API can take ----------------------------------------------


def test_plain_integers_floats_and_strings_at_their_bounds():
    for fine in (MAX_EXTRA_INT, -MAX_EXTRA_INT, 0, 1.5, -2.0, "x" * MAX_TEXT, "", True, False, None):
        assert check_extra("opt", fine) == fine
    assert reason(check_extra, "opt", MAX_EXTRA_INT + 1) == (
        "must be an integer within +-2**63, got 9223372036854775808"
    )
    for bad in (float("inf"), float("-inf")):
        assert reason(check_extra, "opt", bad) == f"must be a finite number, got {bad!r}"
    long = "x" * (MAX_TEXT + 1)
    text = f"must be a string of at most {MAX_TEXT} characters without NUL, got"
    assert reason(check_extra, "opt", long) == f"{text} {shown(long)}"
    assert reason(check_extra, "opt", "a\0b") == f"{text} 'a\\x00b'"


def test_plain_lists_and_mappings_are_bounded_and_checked_entry_by_entry():
    assert check_extra("opt", [0] * MAX_EXTRA_ITEMS) == [0] * MAX_EXTRA_ITEMS
    assert reason(check_extra, "opt", [0] * (MAX_EXTRA_ITEMS + 1)) == (
        f"must have at most {MAX_EXTRA_ITEMS} entries, got {MAX_EXTRA_ITEMS + 1}"
    )
    nested = {"layers": [[1, 2], {"k": "v"}], "name": "x"}
    assert check_extra("opt", nested) == nested
    # The top level names the entry; deeper levels pass their reason up unchanged.
    text = f"must be a string of at most {MAX_TEXT} characters without NUL, got 'a\\x00'"
    assert reason(check_extra, "opt", ["ok", "a\0"]) == f"entry 'a\\x00' {text}"
    assert reason(check_extra, "opt", {"k": "a\0"}) == f"entry 'a\\x00' {text}"
    assert reason(check_extra, "opt", {"a\0": 1}) == f"entry 'a\\x00' {text}"
    assert reason(check_extra, "opt", {"k": [1, ["a\0"]]}) == f"entry [1, ['a\\x00']] {text}"
    assert reason(check_extra, "opt", [[float("nan")]]) == "entry [nan] must be a finite number, got nan"


def test_a_bad_extra_key_names_the_file_that_set_it():
    origin = {"opts": "configs/toy/parameters.yaml"}
    assert refusal(extra={"opts": [2**64]}, origin=origin) == (
        "configs/toy/parameters.yaml: key 'opts' entry 18446744073709551616 must be an integer within +-2**63, "
        "got 18446744073709551616"
    )


# --- contract/config/case.py: multi_stream's query, FlagPerf-style configs -------------------------


def test_multi_stream_query_must_be_a_whole_number_of_batches():
    assert make(scenario="multi_stream", batch_size=4).batch_sizes == [4]  # default 8 samples a query
    message = (
        "config: key 'scenario' includes multi_stream, so key 'multi_stream_samples_per_query' ({samples}) must be a "
        "whole number of batches, but batch size {size} does not divide it"
    )
    assert refusal(scenario="multi_stream", batch_size=3) == message.format(samples=8, size=3)
    twelve = {"multi_stream_samples_per_query": 12}
    config = make(scenario=["offline", "multi_stream"], batch_sizes=[3, 4, 12], extra=dict(twelve))
    assert query_samples(config, MULTI_STREAM) == 12
    assert refusal(scenario="multi_stream", batch_sizes=[3, 8], extra=dict(twelve)) == message.format(
        samples=12, size=8
    )


def test_query_samples_reads_the_key_or_its_default_and_none_for_other_scenarios():
    FlagPerf = namedtuple("FlagPerf", "batch_size")
    assert query_samples(FlagPerf(8), MULTI_STREAM) is None  # lacks the key: its default, None
    assert query_samples(make(extra={"multi_stream_samples_per_query": 16}), MULTI_STREAM) == 16
    assert query_samples(make(extra={"multi_stream_samples_per_query": 16}), SCENARIOS["offline"]) is None


def test_an_engines_choice_and_flag_checks_name_the_origin_or_say_config():
    FlagPerf = namedtuple("FlagPerf", "vendor mode")
    flagperf = FlagPerf("acme", "fast")
    config = make(origin={"mode": "configs/toy/vendor_config/acme_configurations.yaml"})
    for ok in ("fast", "slow"):
        check_choice(config, "mode", ok, ("fast", "slow"))
    check_flag(config, "prune", True)
    check_flag(flagperf, "prune", False)
    assert origin_of(flagperf, "mode") == "config"
    assert reason(check_choice, config, "mode", "quick", ("fast", "slow"), error=ConfigError) == (
        "configs/toy/vendor_config/acme_configurations.yaml: key 'mode' must be one of fast, slow, got 'quick'"
    )
    assert reason(check_choice, flagperf, "mode", "quick", ["fast", "slow"], error=ConfigError) == (
        "config: key 'mode' must be one of fast, slow, got 'quick'"
    )
    assert reason(check_flag, config, "mode", "yes", error=ConfigError) == (
        "configs/toy/vendor_config/acme_configurations.yaml: key 'mode' must be true or false, got 'yes'"
    )
    assert (
        reason(check_flag, flagperf, "prune", 1, error=ConfigError)
        == "config: key 'prune' must be true or false, got 1"
    )


# --- contract/config/load.py: names, keys, --set, the device, oversubscription ---------------------


def make_tree(tmp_path: Path, case: str = "toy", vendor: str = "acme", base: str = BASE, vendor_file: str = "") -> Path:
    root = tmp_path / "inference"
    folder = root / "configs" / case
    (folder / "vendor_config").mkdir(parents=True)
    (folder / "configurations.yaml").write_text(textwrap.dedent(base))
    if vendor_file:
        (folder / "vendor_config" / f"{vendor}_configurations.yaml").write_text(textwrap.dedent(vendor_file))
    return root


def test_case_vendor_and_framework_names_are_checked_each_by_its_own_name(tmp_path):
    root = make_tree(tmp_path, case="Toy-1.5", vendor="ACME")
    config = load_case_config(str(root), "Toy-1.5", "pytorch_2.1", "ACME", "/data", "/logs")
    assert (config.case, config.vendor, config.framework, config.framework_full) == (
        "Toy-1.5",
        "ACME",
        "pytorch",
        "pytorch_2.1",
    )
    rule = "is not a name of at most 64 letters, digits, '_', '.' or '-'"
    for what, names in (
        ("case", ("../Toy-1.5", "x" * 65, None)),
        ("vendor", ("a b", 7)),
        ("framework", ("py/torch", "")),
    ):
        for name in names:
            given = {"case": "Toy-1.5", "vendor": "ACME", "framework": "pytorch", what: name}
            with pytest.raises(ConfigError) as info:
                load_case_config(str(root), given["case"], given["framework"], given["vendor"], "/d", "/l")
            assert str(info.value) == f"{what} {shown(name)} {rule}"


def test_a_key_must_be_an_identifier_of_at_most_max_key_characters(tmp_path):
    base = {key: None for key in REQUIRED_KEYS}
    paths = (Path("c.yaml"), Path("p.yaml"), Path("v.yaml"))
    longest = "k" * MAX_KEY
    merged, _ = merge_case_config({**base, longest: 1}, paths[0], {}, paths[1], {}, paths[2])
    assert merged[longest] == 1
    rule = (
        f"must be a name of letters, digits and '_' of at most {MAX_KEY} characters (a case reads it as config.<key>)"
    )
    for bad in ("max-batch", "k" * (MAX_KEY + 1), "2x"):
        with pytest.raises(ConfigError) as info:
            merge_case_config(base, paths[0], {bad: 1}, paths[1], {}, paths[2])
        assert str(info.value) == f"p.yaml: key {shown(bad)} {rule}"


def test_set_with_an_empty_value_is_null_and_a_too_deep_value_names_its_key():
    assert parse_overrides(["seed=", "warmup=  ", "note=\t"]) == {"seed": None, "warmup": None, "note": None}
    with pytest.raises(YamlTooLarge) as info:
        parse_overrides(["seed=" + "[" * 40 + "]" * 40])
    assert str(info.value) == "command line (--set): key 'seed' (line 1): refused: collections nested more than 32 deep"


def test_a_cuda_device_this_machine_lacks_is_refused_where_it_runs_and_named_by_its_file(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    root = make_tree(tmp_path, vendor_file="device: cuda\n")
    with pytest.raises(ConfigError) as info:
        load_case_config(str(root), "toy", "pytorch", "acme", "/data", "/logs")
    vendor_file = root / "configs" / "toy" / "vendor_config" / "acme_configurations.yaml"
    assert str(info.value) == f"{vendor_file}: key 'device' is a CUDA device, but torch is not installed here"
    # Checked where the case runs, not on the host that drives a container elsewhere.
    config = load_case_config(str(root), "toy", "pytorch", "acme", "/data", "/logs", check_device=False)
    assert config.device == "cuda"


def test_more_workers_than_cpus_warn_naming_the_file_that_set_them(tmp_path, monkeypatch, caplog_loguru):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    root = make_tree(tmp_path, base=BASE.replace("num_workers: 0", "num_workers: 4"))
    config = load_case_config(str(root), "toy", "pytorch", "acme", "/data", "/logs")
    assert config.num_workers == 4
    base_file = root / "configs" / "toy" / "configurations.yaml"
    assert [r["message"] for r in caplog_loguru if r["level"] == "WARNING"] == [
        f"{base_file}: key 'num_workers' is 4, more than the 2 CPUs this process may use; running with 4 as given "
        "(oversubscribed: slower, not wrong; recorded in result.json env.oversubscribed)"
    ]


# --- contract/config/expr.py: numbers and expressions at the float range's edges ------------------


def test_numbers_out_of_range_are_named_as_given():
    assert reason(parse_number, float("inf")) == "inf is not finite"
    assert reason(parse_number, 10**400) == "an integer of about 401 digits is out of range"
    assert reason(parse_number, "1e999") == "'1e999' is not finite"
    assert reason(parse_number, "(-8)**0.5") == "'(-8)**0.5' is out of range"
    assert reason(parse_number, "1e300**2") == "'1e300**2' is out of range"
    # 2**1024, one doubling past the largest float: its logarithm is exactly the limit, so the power is
    # tried, and overflows.
    assert reason(parse_number, "(2**-16)**-64") == "'(2**-16)**-64' is out of range"


def test_the_largest_float_is_accepted_as_an_integer_and_as_a_power():
    largest = sys.float_info.max
    assert parse_number(int(largest)) == largest
    assert parse_number(f"{largest!r}**1") == largest


def test_an_expression_of_256_syntax_nodes_is_accepted_and_257_refused():
    at_limit = "-1" + "+1" * 84  # Expression, UnaryOp, USub, Constant, then 3 nodes per "+1": 256
    assert parse_number(at_limit) == 83
    over = "1" + "+1" * 85  # 2 + 3 * 85 = 257
    assert reason(parse_number, over) == f"{over!r} has too many terms (more than 256 syntax nodes)"
