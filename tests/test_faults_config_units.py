"""The bounds behind tests/test_faults_config_run.py, one class of fault at a time, in-process.

contract/config/expr.py: no intermediate value beyond a float, no power computed before
its size is known, bounded text and syntax tree. common/yamlio.py: bounded
file size, alias expansion, nesting, no cycles. common/errors.shown: a value in
a message is never longer than a line. utils/host_config.py: HostConfig checks
itself and owns the one list of host.yaml keys. contract/config/: every value
that sizes a resource is bounded.
"""

from __future__ import annotations

import os
import re
import tracemalloc
from pathlib import Path

import pytest
import yaml

from common.errors import ConfigError, shown
from common.yamlio import MAX_DEPTH, MAX_VALUES, YamlTooLarge, load_yaml_mapping, load_yaml_value
from contract.config import expr
from contract.config.expr import parse_number
from tests.conftest import TYPED_CASE_CONFIG as TYPED
from tests.infra.host_config import host_fields

REPO = Path(__file__).resolve().parents[1]
INFERENCE = REPO / "inference"


# ---- contract/config/expr.py ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "((((9**64)**64)**64)**64)**64",  # never finished: only the exponent was capped
        "(9**64)**64",
        "(2**64)**64",
        "(1e-300)**-2",  # a small base, a negative exponent
        "(-(2**64)**8)**3",
        "(4**64)**4*(4**64)**4",  # an int product beyond any float
    ],
)
def test_powers_and_products_beyond_a_float_are_refused_at_once(text, monkeypatch):
    # "At once" as a count, not a stopwatch: every arithmetic result the evaluator computes is watched,
    # and none may be an integer beyond a float's range (a refusal after computing 9**4096 gives the
    # same message, but the first text would never finish).
    computed: list[int] = []

    def watched(op):
        def run(left, right):
            result = op(left, right)
            computed.append(result.bit_length() if isinstance(result, int) else 0)
            return result

        return run

    monkeypatch.setattr(expr, "_BINARY", {node: watched(op) for node, op in expr._BINARY.items()})
    with pytest.raises(ValueError) as info:
        parse_number(text)
    assert max(computed, default=0) <= 1025, computed  # a float holds up to 2**1024
    assert str(info.value) == f"{text!r} is out of range"


def test_every_intermediate_value_is_bounded_not_only_the_result():
    # The result would be 2**512, but 2**1024 on the way is refused.
    with pytest.raises(ValueError, match="is out of range"):
        parse_number("(4**64)**4*(4**64)**4/(4**64)**4")
    assert parse_number("(4**64)**4/(4**64)**2") == 2.0**256


@pytest.mark.parametrize(
    "value, message",
    [
        (10**400, "an integer of about 401 digits is out of range"),  # OverflowError traceback before
        (-(10**309), "an integer of about 310 digits is out of range"),
        (float("inf"), "inf is not finite"),  # returned as inf before
        (float("nan"), "nan is not finite"),
    ],
)
def test_numbers_given_as_numbers_are_bounded_too(value, message):
    with pytest.raises(ValueError) as info:
        parse_number(value)
    assert str(info.value) == message


def test_largest_float_and_int_still_pass():
    assert parse_number(1.7976931348623157e308) == 1.7976931348623157e308
    assert parse_number(10**308) == 1e308
    assert parse_number("2**64*2**64") == 2.0**128


def test_syntax_tree_is_bounded():
    text = "+".join(["1"] * 100)  # 199 characters, 299 syntax nodes
    with pytest.raises(ValueError) as info:
        parse_number(text)
    assert str(info.value) == f"{text!r} has too many terms (more than 256 syntax nodes)"
    assert parse_number("+".join(["1"] * 60)) == 60.0


def test_a_nul_byte_is_not_a_number():
    # ast.parse raises ValueError (not SyntaxError) on a NUL byte: a traceback before.
    with pytest.raises(ValueError) as info:
        parse_number("1\x00")
    assert str(info.value) == "'1\\x00' is not a number or arithmetic expression"


# ---- common/yamlio.py ---------------------------------------------------------------------------


def write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def laughs(levels: int) -> str:
    lines = ['l0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"l{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_billion_laughs_is_refused_before_anything_walks_it(tmp_path):
    path = write(tmp_path, laughs(9))
    tracemalloc.start()
    try:
        with pytest.raises(YamlTooLarge) as info:
            load_yaml_mapping(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 << 20  # nothing walked the 387 million values (bounded by memory, not by a stopwatch)
    assert str(info.value) == f"{path} (line 6): refused: more than {MAX_VALUES} values once aliases are expanded"
    assert isinstance(info.value, ConfigError) and info.value.exit_code == 2


def test_aliases_that_expand_modestly_are_fine(tmp_path):
    data = load_yaml_mapping(
        write(tmp_path, laughs(4) + "base: &b {x: 1}\nmerged: {<<: *b, y: 2}\nscalar: &s 5\nagain: *s\n")
    )
    assert len(data["l3"]) == 9 and data["merged"] == {"x": 1, "y": 2} and data["again"] == 5


def test_value_count_bound_is_exact(tmp_path):
    # mapping + key + sequence + n scalars
    fits = write(tmp_path, "a: [" + ",".join(["0"] * (MAX_VALUES - 3)) + "]\n", "fits.yaml")
    assert len(load_yaml_mapping(fits)["a"]) == MAX_VALUES - 3
    over = write(tmp_path, "a: [" + ",".join(["0"] * (MAX_VALUES - 2)) + "]\n", "over.yaml")
    with pytest.raises(YamlTooLarge, match="more than 100000 values"):
        load_yaml_mapping(over)


def test_nesting_bound_is_exact_and_needs_no_recursion(tmp_path):
    inner = MAX_DEPTH - 1  # the top-level mapping is the first level
    assert load_yaml_mapping(write(tmp_path, "a: " + "[" * inner + "]" * inner + "\n", "ok.yaml"))
    path = write(tmp_path, "a: " + "[" * (inner + 1) + "]" * (inner + 1) + "\n", "deep.yaml")
    with pytest.raises(YamlTooLarge) as info:
        load_yaml_mapping(path)
    assert str(info.value) == f"{path} (line 1): refused: collections nested more than {MAX_DEPTH} deep"
    very = write(tmp_path, "a: " + "[" * 100_000 + "]" * 100_000 + "\n", "very.yaml")
    with pytest.raises(YamlTooLarge, match="nested more than"):
        load_yaml_mapping(very)  # a RecursionError traceback before


def test_a_collection_that_contains_itself_is_refused(tmp_path):
    path = write(tmp_path, "a: &x [1, *x]\n")
    with pytest.raises(YamlTooLarge, match="an alias refers to a collection that contains it"):
        load_yaml_mapping(path)


def test_file_size_is_bounded_and_only_that_much_is_read(tmp_path):
    path = write(tmp_path, "a: 1\n# " + "x" * (1 << 20) + "\n")
    with pytest.raises(YamlTooLarge) as info:
        load_yaml_mapping(path)
    assert str(info.value) == f"{path}: refused: larger than 1 MiB, too large for a config file"


@pytest.mark.parametrize(
    "text, problem",
    [
        ("a: " + "1" * 5000 + "\n", "(line 1): invalid YAML: cannot read the value: Exceeds the limit (4300 digits)"),
        ("a: 2024-13-45\n", "(line 1): invalid YAML: cannot read the value: month must be in 1..12"),
        ("? [1]\n: 2\n", "(line 1): invalid YAML: a list cannot be a key"),
        ("? {a: 1}\n: 2\n", "(line 1): invalid YAML: a dict cannot be a key"),
        ("a: 1\na: 2\n", "(line 2): invalid YAML: duplicate key 'a'"),
    ],
)
def test_values_pyyaml_cannot_build_are_config_errors(tmp_path, text, problem):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_yaml_mapping(path)
    assert str(info.value).startswith(f"{path} {problem}")


def test_a_single_value_has_the_same_bounds():
    assert load_yaml_value("[1, 8, 32]", "--set x") == [1, 8, 32]
    with pytest.raises(YamlTooLarge, match="^--set x \\(line 1\\): refused: more than"):
        load_yaml_value("{" + laughs(9).replace("\n", ", ").rstrip(", ") + "}", "--set x")


# ---- common/errors.shown ------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["8", 2.0, None, True, [2, 1, 2], {"a": 1}, "x" * 80, 10**70, -3, b"ab"])
def test_shown_is_repr_for_short_values(value):
    assert shown(value) == repr(value)


def test_shown_bounds_long_values_without_building_them():
    assert shown("x" * 1_048_576) == "'" + "x" * 80 + "…' (1048576 chars)"
    assert shown(10**5000) == "an integer of about 5001 digits"  # repr() itself raises ValueError here
    assert shown(list(range(100_000))) == "[0, 1, 2, 3, 4, 5, 6, 7, ...] (100000 items)"
    nested = ["x"] * 9
    for _ in range(8):
        nested = [nested] * 9  # 387 million strings once walked
    tracemalloc.start()
    try:
        text = shown(nested)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (
        peak < 1 << 20 and len(text) < 120 and text.endswith("(9 items)")
    )  # not walked: bounded memory, not a stopwatch
    assert len(shown({"k": "v" * 10_000})) < 120


# ---- utils/host_config.py -----------------------------------------------------------------------


def test_host_config_validates_itself_when_constructed(tmp_path):
    from utils.host_config import CaseSpec, Host, HostConfig

    config = HostConfig(**host_fields(tmp_path), inference_dir=INFERENCE)
    assert config.hosts == [Host("127.0.0.1", 22)] and config.cases == [CaseSpec("digits", "pytorch", "/data")]
    assert config.case_timeout == 3600.0 and type(config.case_timeout) is float
    with pytest.raises(ConfigError) as info:
        HostConfig(**host_fields(tmp_path, monitor_interval=0.000001))
    assert str(info.value) == (
        f"{tmp_path / 'host.yaml'}: key 'MONITOR_INTERVAL' must be a positive number of seconds >= 0.05 and <= 60; "
        "shorter intervals make the monitors busy-loop, got 1e-06"
    )
    # Checked values pass again unchanged (a HostConfig may be rebuilt from another's fields).
    again = HostConfig(**{**host_fields(tmp_path), "hosts": config.hosts, "cases": config.cases})
    assert again.hosts == config.hosts and again.cases == config.cases


@pytest.mark.parametrize(
    "key, field, good, bad",
    [
        ("MONITOR_INTERVAL", "monitor_interval", [0.05, 60], [0.0499, 60.01, 0, -1, "1", True]),
        ("CASE_TIMEOUT", "case_timeout", [1, 604800], [0.99, 604801, float("inf"), float("nan")]),
        (
            "SHM_SIZE",
            "shm_size",
            ["1m", "1024g", "1048576", "1.5G", 1073741824],
            ["1023k", "1025g", "32T", "", "G", "1e9"],
        ),
        ("VENDOR", "vendor", ["cpu"], ["c" * 65, "cpu/..", "", None]),
        ("HOSTS", "hosts", [["127.0.0.1"]], [[], ["127.0.0.1", "127.0.0.2"], ["h" * 300]]),
    ],
)
def test_host_config_bounds(tmp_path, key, field, good, bad):
    from utils.host_config import HostConfig

    for value in good:
        HostConfig(**host_fields(tmp_path, **{field: value}))
    for value in bad:
        with pytest.raises(ConfigError, match=f"key '{key}' "):
            HostConfig(**host_fields(tmp_path, **{field: value}))


def test_hosts_count_is_bounded(tmp_path):
    from utils.host_config import MAX_HOSTS, HostConfig

    hosts = [f"h{i}" for i in range(MAX_HOSTS)]
    fields = host_fields(tmp_path, mode="docker", trust_on_first_use=True, hosts=hosts)
    assert len(HostConfig(**fields).hosts) == MAX_HOSTS
    with pytest.raises(ConfigError, match=f"key 'HOSTS' lists {MAX_HOSTS + 1} hosts, more than {MAX_HOSTS}"):
        HostConfig(**{**fields, "hosts": hosts + ["one-more"]})


def test_unwritable_log_path_is_named(tmp_path, monkeypatch):
    from utils.host_config import HostConfig

    parent = tmp_path / "results"
    parent.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == parent else real_access(p, mode))
    with pytest.raises(ConfigError) as info:
        HostConfig(**host_fields(tmp_path, log_path=parent / "a" / "b"))
    assert (
        str(info.value)
        == f"{tmp_path / 'host.yaml'}: key 'FLAGPERF_LOG_PATH' {parent}/a/b cannot be created: {parent} is not writable"
    )
    with pytest.raises(ConfigError, match=f"key 'FLAGPERF_LOG_PATH' {parent} is not writable$"):
        HostConfig(**host_fields(tmp_path, log_path=parent))


def test_from_yaml_is_load_host_config(tmp_path):
    from utils.host_config import HostConfig, load_host_config

    path = tmp_path / "host.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "VENDOR": "cpu",
                "FLAGPERF_PATH": str(INFERENCE),
                "FLAGPERF_LOG_PATH": str(tmp_path / "r"),
                "CASES": {"digits:pytorch": "/data"},
            }
        )
    )
    assert load_host_config(path, INFERENCE) == HostConfig.from_yaml(path, INFERENCE)
    assert load_host_config(path, INFERENCE).mode == "local"


def test_host_yaml_keys_are_defined_once():
    import contract.config.load
    import utils.host_config as host_config
    from common import host_keys

    assert contract.config.load.HOST_KEYS is host_keys.HOST_KEYS
    assert host_config.KEY_FIELDS is host_keys.KEY_FIELDS
    assert set(host_config.IGNORED_KEYS) <= set(host_keys.HOST_KEYS)
    assert set(host_config.FLAGPERF_DOCKER_KEYS) <= set(host_keys.HOST_KEYS)
    fields = set(host_config.HostConfig.__dataclass_fields__)
    assert {f for f in host_config.KEY_FIELDS.values() if f} <= fields
    # No other module spells the list out again.
    spelled = [
        path.relative_to(INFERENCE)
        for path in INFERENCE.rglob("*.py")
        if re.search(r"[\"']REMOTE_WORKDIR[\"']", path.read_text(encoding="utf-8"))
        and re.search(r"[\"']TRUST_ON_FIRST_USE[\"']", path.read_text(encoding="utf-8"))
    ]
    assert spelled == [Path("common/host_keys.py")]


# ---- contract/config/ ----------------------------------------------------------------------------


def make(**overrides):
    from contract.config import CaseConfig

    extra = overrides.pop("extra", {})
    return CaseConfig(**{**TYPED, **overrides}, extra=extra, origin={key: "/c.yaml" for key in [*overrides, *extra]})


def reason(**overrides) -> str:
    with pytest.raises(ConfigError) as info:
        make(**overrides)
    return str(info.value)


@pytest.fixture
def two_cores(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)


WHY = "thousands of threads or processes exhaust process ids or crash a runtime"


# The 100000-thread segfault: refused by one bound that does not depend on the machine
# (commit 5bf66f5); more than the CPUs here is legal and only warned about
# (tests/test_config_keys.py covers the warning and env.oversubscribed).
@pytest.mark.parametrize(
    "key", ["intra_op_num_threads", "inter_op_num_threads", "torch_threads", "flagv_threads", "loader_workers"]
)
def test_every_thread_count_key_is_bounded_by_one_machine_independent_limit(two_cores, key):
    assert make(extra={key: 0}).get(key) == 0
    assert make(extra={key: 3}).get(key) == 3  # more than the 2 CPUs: oversubscribed, not refused
    assert make(extra={key: 1024}).get(key) == 1024
    assert (
        reason(extra={key: 1025}) == f"/c.yaml: key '{key}' must be 0 (the default) or a count <= 1024, got 1025: {WHY}"
    )
    assert reason(extra={key: 100_000}).endswith(f"got 100000: {WHY}")
    assert "must be a non-negative integer, got '4'" in reason(extra={key: "4"})


def test_num_workers_is_bounded_by_one_machine_independent_limit(two_cores):
    assert make(num_workers=8).num_workers == 8  # FlagPerf's published value, on 2 CPUs
    assert (
        reason(num_workers=100_000)
        == f"/c.yaml: key 'num_workers' must be 0 (the default) or a count <= 1024, got 100000: {WHY}"
    )


def test_onnx_opset_is_bounded_by_the_installed_exporter():
    from contract.config.values import supported_onnx_opsets

    low, high, source = supported_onnx_opsets()
    try:
        from torch.onnx import _constants

        assert (low, high) == (_constants.ONNX_MIN_OPSET, _constants.ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET)
    except ImportError:
        pass
    assert make(onnx_opset=high).onnx_opset == high and make(onnx_opset=low).onnx_opset == low
    assert (
        reason(onnx_opset=high + 1)
        == f"/c.yaml: key 'onnx_opset' must be an ONNX opset from {low} to {high} (what {source} supports), got "
        f"{high + 1}"
    )
    assert "from" in reason(onnx_opset=low - 1)


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("batch_size", 65537, "must be a positive integer <= 65536 (the largest batch InferPerf runs), got 65537"),
        (
            "batch_size",
            10**30,
            "must be a positive integer <= 65536 (the largest batch InferPerf runs), got "
            "1000000000000000000000000000000",
        ),
        ("repeat", 1_000_001, "must be a positive integer <= 1000000 (minimum passes over the data), got 1000001"),
        ("warmup", 10_001, "must be a non-negative integer <= 10000 (untimed calls), got 10001"),
        ("seed", 2**32, "must be a non-negative integer <= 4294967295 (numpy's seeds are 32-bit), got 4294967296"),
        ("input_size", 2**31 + 1, "must be a positive integer <= 2147483648 (elements of one sample), got 2147483649"),
        (
            "log_freq",
            10**9 + 1,
            "must be a non-negative integer <= 1000000000 (batches between log lines), got 1000000001",
        ),
        ("flops", 1e22, "must be a positive number of FLOPs per sample <= 1e+21, got 1e+22"),
        ("flops", float("inf"), "must be a positive number of FLOPs per sample, got inf"),
        ("flops", "((((9**64)**64)**64)**64)**64", "'((((9**64)**64)**64)**64)**64' is out of range"),
        ("device", "cuda:x", "must be 'cpu' or 'cuda[:N]', got 'cuda:x'"),
        ("compiler", "c" * 65, "must be a name of letters, digits, '_' or '-', or null, got '" + "c" * 65 + "'"),
        (
            "exist_onnx_path",
            "/m\x00.onnx",
            "must be a path of at most 4096 characters and 255 per name, without NUL, got '/m\\x00.onnx'",
        ),
        ("clients", list(range(1, 66)), "must list at most 64 entries, got 65"),
        ("scenario", ["offline"] * 5, "must list at most 4 entries, got 5"),  # at most one of each scenario
    ],
)
def test_typed_keys_that_size_a_resource_are_bounded(key, value, message):
    assert reason(**{key: value}) == f"/c.yaml: key '{key}' {message}"


def test_bounds_are_inclusive():
    config = make(batch_size=65536, repeat=1_000_000, warmup=10_000, seed=2**32 - 1, flops=1e21)
    assert (config.batch_size, config.repeat, config.warmup, config.seed, config.flops) == (
        65536,
        1_000_000,
        10_000,
        2**32 - 1,
        1e21,
    )


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("train_epochs", "abc", "must be a non-negative integer, got 'abc'"),
        ("train_epochs", 10_001, "must be a non-negative integer <= 10000 (training epochs), got 10001"),
        ("learning_rate", "fast", "must be a positive learning rate, got 'fast'"),
        ("learning_rate", 0, "must be a positive learning rate > 0 and <= 10, got 0"),
        ("weight_decay", -0.1, "must be a weight decay >= 0 and <= 1, got -0.1"),
        ("train_batch_size", 0, "must be a positive integer, got 0"),
        ("max_samples", 0, "must be a positive integer, got 0"),
        ("num_classes", 10**9, "must be a positive integer <= 100000 (outputs of a classifier), got 1000000000"),
        ("crop", 10**5, "must be a positive integer <= 8192 (pixels), got 100000"),
        ("max_seq_length", "128", "must be a positive integer, got '128'"),
        ("trt_workspace_gib", 1e6, "must be a positive number of GiB > 0 and <= 4096, got 1000000.0"),
        ("anything", float("nan"), "must be a finite number, got nan"),
        ("anything", 2**63, "must be an integer within +-2**63, got 9223372036854775808"),
        (
            "anything",
            "s" * 5000,
            "must be a string of at most 4096 characters without NUL, got '" + "s" * 80 + "…' (5000 chars)",
        ),
        ("anything", [1, float("inf")], "entry inf must be a finite number, got inf"),
        ("anything", {"k": [float("nan")]}, "entry [nan] must be a finite number, got nan"),
        ("anything", list(range(5000)), "must have at most 4096 entries, got 5000"),
    ],
)
def test_well_known_and_other_case_keys_are_checked(key, value, message):
    assert reason(extra={key: value}) == f"/c.yaml: key '{key}' {message}"


def test_well_known_keys_pass_with_sane_values():
    extra = {
        "train_epochs": 15,
        "learning_rate": 0.01,
        "train_batch_size": 32,
        "weight_decay": 0.0,
        "max_samples": None,
        "num_classes": 1000,
        "resize": 256,
        "crop": 224,
        "max_seq_length": 128,
        "weights": None,
        "model": "b_16",
    }
    assert make(extra=dict(extra)).extra == extra


def test_case_config_key_names_are_bounded(tmp_path):
    from contract.config import merge_case_config

    base = {
        "batch_size": 8,
        "fp16": False,
        "compiler": None,
        "num_workers": 0,
        "log_freq": 1,
        "repeat": 1,
        "no_validation": False,
        "exist_onnx_path": None,
        "exist_compiler_path": None,
    }
    with pytest.raises(ConfigError) as info:
        merge_case_config(base, Path("/b.yaml"), {"k" * 100_000: 1}, Path("/p.yaml"), {}, Path("/v.yaml"))
    assert str(info.value).startswith("/p.yaml: key '" + "k" * 80 + "…' (100000 chars) must be a name of letters")


def test_device_availability_is_checked_where_the_config_is_loaded(tmp_path, monkeypatch):
    import torch

    from contract.config import check_device_available, load_case_config

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert check_device_available("cpu") is None
    assert "has no usable CUDA device" in check_device_available("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert check_device_available("cuda:1") is None
    assert check_device_available("cuda:2") == "is 'cuda:2', but this machine has 2 CUDA device(s) (cuda:0..cuda:1)"

    case = tmp_path / "inference" / "configs" / "toy"
    case.mkdir(parents=True)
    (case / "configurations.yaml").write_text(
        "batch_size: 8\nfp16: false\ncompiler: null\nnum_workers: 0\nlog_freq: 1\nrepeat: 1\n"
        "no_validation: false\nexist_onnx_path: null\nexist_compiler_path: null\ndevice: cuda:3\n"
    )
    with pytest.raises(ConfigError) as info:
        load_case_config(str(tmp_path / "inference"), "toy", "pytorch", "acme", "/d", "/l")
    assert (
        str(info.value)
        == f"{case / 'configurations.yaml'}: key 'device' is 'cuda:3', but this machine has 2 CUDA device(s) "
        "(cuda:0..cuda:1)"
    )
    # Where the case runs elsewhere (the host driving MODE docker), the device is not this machine's.
    assert (
        load_case_config(str(tmp_path / "inference"), "toy", "pytorch", "acme", "/d", "/l", check_device=False).device
        == "cuda:3"
    )


def test_case_and_vendor_names_are_bounded_before_the_file_system(tmp_path):
    from contract.config import load_case_config

    with pytest.raises(ConfigError, match=r"^case 'c{80}…' \(300 chars\) is not a name of at most 64"):
        load_case_config(str(tmp_path), "c" * 300, "pytorch", "acme", "/d", "/l")
    with pytest.raises(ConfigError, match=r"^vendor 'a/b' is not a name"):
        load_case_config(str(tmp_path), "toy", "pytorch", "a/b", "/d", "/l")
