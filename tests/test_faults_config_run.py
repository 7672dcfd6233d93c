"""Bad input through the real entry point: ``run.py --config host.yaml`` in a subprocess.

Each fault of the corpus (issue "faults and bad input") must end in exactly one
ERROR line naming the file and the key, exit status 2 (ConfigError), no
traceback, within seconds, with no run directory written; the alias bombs run
under a 2 GiB address-space limit, where the old code died of MemoryError.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.conftest import copy_inference_tree
from tests.infra.run_py import DROP, assert_one_config_error, case_file, host_yaml, run_py, set_key

REPO = Path(__file__).resolve().parents[1]
INFERENCE = REPO / "inference"
MEMORY = 2 << 30  # RLIMIT_AS for the alias bombs


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A copy of inference/ that host.yaml tests share (they never change it)."""
    perf = tmp_path_factory.mktemp("faults_config") / "inference"
    copy_inference_tree(perf)
    return perf


@pytest.fixture
def own_tree(tmp_path) -> Path:
    """A copy of inference/ whose case configs a test may break."""
    perf = tmp_path / "inference"
    copy_inference_tree(perf)
    return perf


def bomb(levels: int = 9, name: str = "a") -> str:
    """YAML "billion laughs": 9 aliases of 9 aliases ... = 9**levels strings once expanded."""
    items = ['["x","x","x","x","x","x","x","x","x"]']
    items = [f"&{name}0 {items[0]}"] + [
        f"&{name}{i} [" + ",".join([f"*{name}{i - 1}"] * 9) + "]" for i in range(1, levels)
    ]
    return "[" + ", ".join(items) + "]"


# ---- the baseline is valid: every fault below is the only thing wrong -------------------------


def test_the_baseline_host_yaml_and_case_configs_pass_the_checks(tmp_path, tree):
    from entry.checks import check_cases
    from utils.host_config import load_host_config

    config = load_host_config(host_yaml(tmp_path, tree), tree)
    check_cases(config)
    assert config.vendor == "cpu" and [c.key for c in config.cases] == ["digits:pytorch"]
    # no case config says how many repetitions: the plan's default (1, or run.py ab's) applies
    assert config.repetitions == {}
    config.overrides = ["repetitions=3"]
    check_cases(config)
    assert config.repetitions == {"digits:pytorch": 3}


# ---- host.yaml ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, fragments",
    [
        # monitors busy-looped at 1 µs
        (
            {"MONITOR_INTERVAL": 0.000001},
            ["key 'MONITOR_INTERVAL' must be a positive number of seconds >= 0.05 and <= 60", "got 1e-06"],
        ),
        ({"MONITOR_INTERVAL": 86400}, ["key 'MONITOR_INTERVAL'", "<= 60"]),
        (
            {"CASE_TIMEOUT": 0.5},
            ["key 'CASE_TIMEOUT' must be a positive number of seconds >= 1 and <= 604800", "got 0.5"],
        ),
        ({"CASE_TIMEOUT": 10**9}, ["key 'CASE_TIMEOUT'", "got 1000000000"]),
        ({"CASE_TIMEOUT": math.inf}, ["key 'CASE_TIMEOUT'", "got inf"]),
        ({"CASE_TIMEOUT": math.nan}, ["key 'CASE_TIMEOUT'", "got nan"]),  # nan <= 0 is False: accepted before
        (
            {"SHM_SIZE": "999999999G"},
            ["key 'SHM_SIZE' must be a size like 32G or 512m, from 1m to 1024g", "'999999999G'"],
        ),
        ({"SHM_SIZE": "10"}, ["key 'SHM_SIZE'", "got '10'"]),
        ({"SHM_SIZE": None}, ["key 'SHM_SIZE'", "got None"]),  # a TypeError traceback before
        (
            {"FLAGPERF_LOG_LEVEL": None},
            ["key 'FLAGPERF_LOG_LEVEL' must be a non-empty string"],
        ),  # AttributeError before
        # "file name too long" traceback before: names are bounded before the file system sees them
        ({"VENDOR": "v" * 1_000_000}, ["key 'VENDOR' must be a vendor name of at most 64", "(1000000 chars)"]),
        ({"CASES": {"d" * 300 + ":pytorch": "/data"}}, ["key CASES entry", "(308 chars) must look like"]),
        (
            {"MODE": "docker", "TRUST_ON_FIRST_USE": True, "KNOWN_HOSTS": "/tmp/" + "k" * 300},
            ["key 'KNOWN_HOSTS' must be a path of at most 4096 characters and 255 per name"],
        ),
        (
            {"FLAGPERF_PATH": str(INFERENCE) + "\x00"},
            ["key 'FLAGPERF_PATH' must be one line without control characters"],
        ),
        ({"SSH_USER": "u" * 100_000}, ["key 'SSH_USER' must be at most 256 characters", "(100000 chars)"]),
        ({"SSH_PORT": 10**30}, ["key 'SSH_PORT' must be a TCP port number"]),
        (
            {
                "MODE": "docker",
                "TRUST_ON_FIRST_USE": True,
                "HOSTS": [f"10.0.{i // 250}.{i % 250 + 1}" for i in range(300)],
            },
            ["key 'HOSTS' lists 300 hosts, more than 256"],
        ),
        (
            {"CASES": {f"digits{i}:pytorch": "/data" for i in range(300)}},
            ["key 'CASES' lists 300 cases, more than 256"],
        ),
        ({"LOG_CALL_INFORMATION": "x" * 10}, ["key 'LOG_CALL_INFORMATION' must be true or false"]),
    ],
    ids=lambda v: None if isinstance(v, list) else str(v)[:40],
)
def test_bad_host_yaml_value_is_one_line_exit_2(tmp_path, tree, overrides, fragments):
    config = host_yaml(tmp_path, tree, **overrides)
    proc, cpu = run_py(tree, config)
    assert_one_config_error(proc, cpu, tmp_path, str(config), *fragments)


def test_log_path_naming_an_existing_file(tmp_path, tree):
    existing = tmp_path / "results.txt"
    existing.write_text("not a directory")
    config = host_yaml(tmp_path, tree, FLAGPERF_LOG_PATH=str(existing))
    proc, cpu = run_py(tree, config)
    assert_one_config_error(
        proc, cpu, tmp_path, str(config), f"key 'FLAGPERF_LOG_PATH' {existing} exists and is not a directory"
    )
    assert existing.read_text() == "not a directory"


def test_log_path_below_a_file(tmp_path, tree):
    existing = tmp_path / "results.txt"
    existing.write_text("x")
    config = host_yaml(tmp_path, tree, FLAGPERF_LOG_PATH=str(existing / "run" / "here"))
    proc, cpu = run_py(tree, config)
    assert_one_config_error(
        proc,
        cpu,
        tmp_path,
        f"key 'FLAGPERF_LOG_PATH' {existing}/run/here cannot be created: {existing} is not a directory",
    )


def _unwritable_dir(tmp_path: Path) -> Path:
    """A directory this process cannot write: a chmod 500 one, or for root a read-only mount."""
    import os

    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        return locked
    for candidate in ("/proc/sys", "/sys"):
        if Path(candidate).is_dir() and not os.access(candidate, os.W_OK | os.X_OK):
            return Path(candidate)
    pytest.skip("running as root with no read-only directory to write to")


def test_log_path_in_an_unwritable_place(tmp_path, tree):
    locked = _unwritable_dir(tmp_path)
    config = host_yaml(tmp_path, tree, FLAGPERF_LOG_PATH=str(locked / "inferperf_results"))
    proc, cpu = run_py(tree, config)
    assert_one_config_error(
        proc,
        cpu,
        tmp_path,
        f"key 'FLAGPERF_LOG_PATH' {locked}/inferperf_results cannot be created: {locked} is not writable",
    )


@pytest.mark.parametrize("where", ["VENDOR", "CASE_TIMEOUT"])
def test_alias_bomb_in_host_yaml_under_a_memory_limit(tmp_path, tree, where):
    # Before: the key's check put the value (387 million strings once expanded) in its message: MemoryError.
    config = host_yaml(tmp_path, tree, extra_text=f"{where}: {bomb()}\n", **{where: DROP})
    proc, cpu = run_py(tree, config, memory=MEMORY)
    assert_one_config_error(
        proc, cpu, tmp_path, str(config), "refused: more than 100000 values once aliases are expanded"
    )


def test_host_yaml_over_one_mebibyte(tmp_path, tree):
    config = host_yaml(tmp_path, tree, extra_text="# " + "x" * (1 << 20) + "\n")
    proc, cpu = run_py(tree, config, memory=MEMORY)
    assert_one_config_error(proc, cpu, tmp_path, str(config), "refused: larger than 1 MiB")


def test_deeply_nested_host_yaml(tmp_path, tree):
    # Before: RecursionError traceback in PyYAML's composer.
    config = host_yaml(tmp_path, tree, extra_text="HOSTS_PORTS: " + "[" * 20_000 + "]" * 20_000 + "\n")
    proc, cpu = run_py(tree, config)
    assert_one_config_error(proc, cpu, tmp_path, str(config), "refused: collections nested more than 32 deep")


@pytest.mark.parametrize(
    "text, fragment",
    [
        (
            "MASTER_PORT: " + "9" * 5000,
            "cannot read the value: Exceeds the limit (4300 digits)",
        ),  # ValueError traceback before
        ("MASTER_PORT: 2024-13-45", "cannot read the value: month must be in 1..12"),
        ("? [1, 2]\n: x", "a list cannot be a key"),  # TypeError traceback before
        ("HOSTS_PORTS: &loop [*loop]", "refused: an alias refers to a collection that contains it"),
    ],
)
def test_unreadable_yaml_values_in_host_yaml(tmp_path, tree, text, fragment):
    config = host_yaml(tmp_path, tree, extra_text=text + "\n")
    proc, cpu = run_py(tree, config)
    assert_one_config_error(proc, cpu, tmp_path, str(config), fragment)


# ---- case configs -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "which, key, text, fragments",
    [
        # never finished: the exponent was capped, the base was not
        ("base", "flops", '"((((9**64)**64)**64)**64)**64"', ["is out of range"]),
        ("base", "flops", '"1e308*10"', ["'1e308*10' is not finite"]),
        (
            "base",
            "flops",
            "1.7e+308",
            ["must be a positive number of FLOPs per sample <= 1e+21"],
        ),  # x QPS = inf in result.json
        ("base", "batch_size", str(10**30), ["must be a positive integer <= 65536"]),
        (
            "base",
            "num_workers",
            "100000",
            ["must be 0 (the default) or a count <= 1024, got 100000", "exhaust process ids"],
        ),
        (
            "vendor",
            "intra_op_num_threads",
            "100000",
            ["must be 0 (the default) or a count <= 1024, got 100000", "exhaust process ids"],
        ),
        ("vendor", "inter_op_num_threads", "100000", ["a count <= 1024"]),
        ("vendor", "torch_threads", "100000", ["a count <= 1024"]),
        ("base", "onnx_opset", "99", ["must be an ONNX opset from 7 to"]),
        ("params", "train_epochs", '"abc"', ["must be a non-negative integer, got 'abc'"]),
        ("params", "learning_rate", "fast", ["must be a positive learning rate, got 'fast'"]),
        ("params", "learning_rate", ".inf", ["must be a positive learning rate > 0 and <= 10, got inf"]),
        ("params", "train_batch_size", str(10**12), ["must be a positive integer <= 65536"]),
        ("base", "repeat", str(10**12), ["must be a positive integer <= 1000000"]),
        ("base", "warmup", str(10**12), ["must be a non-negative integer <= 10000"]),
        ("base", "seed", str(2**40), ["must be a non-negative integer <= 4294967295"]),
        ("base", "min_duration_s", "1.0e+9", ["must be a number of seconds >= 0 and <= 86400"]),
        ("base", "max_duration_s", ".inf", ["must be a number of seconds > 0 and <= 86400, got inf"]),
        ("base", "min_query_count", str(10**12), ["must be a positive integer > 0 and <= 1e+08"]),
        (
            "base",
            "batch_sizes",
            "[" + ",".join(map(str, range(1, 101))) + "]",
            ["must list at most 64 entries, got 100"],
        ),
        ("base", "pool_max_mb", "1.0e+12", ["must be a positive number of MiB > 0 and <= 65536"]),
        (
            "base",
            "exist_compiler_path",
            "/" + "e" * 5000,
            ["must be a path of at most 4096 characters and 255 per name"],
        ),
        ("params", "some_ratio", ".nan", ["key 'some_ratio' must be a finite number, got nan"]),
        ("params", "some_count", str(10**30), ["key 'some_count' must be an integer within +-2**63"]),
        (
            "params",
            "note",
            '"' + "n" * 100_000 + '"',
            ["key 'note' must be a string of at most 4096 characters", "(100000 chars)"],
        ),
    ],
    ids=lambda v: str(v)[:30],
)
def test_bad_case_config_value_is_one_line_exit_2(tmp_path, own_tree, which, key, text, fragments):
    path = set_key(case_file(own_tree, which), key, text)
    proc, cpu = run_py(own_tree, host_yaml(tmp_path, own_tree))
    assert_one_config_error(proc, cpu, tmp_path, f"{path}: key '{key}'", *fragments)


def test_alias_bomb_in_a_case_config_under_a_memory_limit(tmp_path, own_tree):
    # Before: the device check put the value in its message: MemoryError under 2 GiB.
    path = case_file(own_tree, "base")
    path.write_text(path.read_text() + f"anchors: {bomb()}\ndevice: *a8\n")
    proc, cpu = run_py(own_tree, host_yaml(tmp_path, own_tree), memory=MEMORY)
    assert_one_config_error(
        proc, cpu, tmp_path, str(path), "refused: more than 100000 values once aliases are expanded"
    )


@pytest.mark.parametrize(
    "item, fragments",
    [
        ("flops=((((9**64)**64)**64)**64)**64", ["command line (--set): key 'flops'", "is out of range"]),
        (
            "batch_sizes=" + "{" + ", ".join(f"k{i}: {b}" for i, b in enumerate([bomb()])) + ", all: *a8}",
            ["command line (--set): key 'batch_sizes' (line 1): refused: more than 100000 values"],
        ),
        ("clients=[" + ",".join(map(str, range(1, 1001))) + "]", ["key 'clients' must list at most 64 entries"]),
    ],
    ids=["flops", "bomb", "clients"],
)
def test_bad_set_override_is_one_line_exit_2(tmp_path, tree, item, fragments):
    proc, cpu = run_py(tree, host_yaml(tmp_path, tree), "--set", item, memory=MEMORY)
    assert_one_config_error(proc, cpu, tmp_path, *fragments)


def test_cuda_device_on_a_machine_without_cuda(tmp_path, tree):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    proc, cpu = run_py(tree, host_yaml(tmp_path, tree), "--set", "device=cuda")
    assert_one_config_error(
        proc,
        cpu,
        tmp_path,
        "command line (--set): key 'device' is 'cuda', but this machine has no usable CUDA device",
    )
