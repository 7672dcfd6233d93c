"""contract.config: the measurement and workload keys, their cross-checks and ``--set`` overrides.

Each bound of the ``_CHECKS`` table is tried on both sides, to the exact message,
so that a changed bound, a lost ``entry`` prefix or a swapped default fails a test
(mutation-tested, see docs/testing.md). When a key is added to ``_CHECKS``, add
its rows here.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from common.errors import ConfigError
from common.values import bounded, one_or_list, optional
from contract.config import CaseConfig, load_case_config, parse_overrides
from contract.tolerances import tolerances_for
from tests.conftest import TYPED_CASE_CONFIG as TYPED
from tests.infra.case_config import BASE

SERVER = dict(latency_bound_ms=50, target_qps=100)
SCENARIOS = "must be one of offline, single_stream, multi_stream, server"


def make(**overrides) -> CaseConfig:
    return CaseConfig(**{**TYPED, **overrides})


@pytest.fixture
def two_cores(monkeypatch):
    """Two CPUs usable by this process, out of a machine's 64 (affinity is what counts)."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)


# --- the check factories behind the table (built once, at import) ---------------


def _reason(check, value) -> str:
    with pytest.raises(ValueError) as info:
        check(value)
    return str(info.value)


def test_bounded_excludes_or_includes_its_low_end_and_includes_its_high_end():
    above = bounded("a size", 2, 10)
    assert [above(2.5), above(10), above(3)] == [2.5, 10.0, 3.0]
    assert type(above(3)) is float
    assert _reason(above, 2) == "must be a size > 2 and <= 10, got 2"
    assert _reason(above, 10.001) == "must be a size > 2 and <= 10, got 10.001"
    from_ = bounded("a size", 2, 10, low_inclusive=True)
    assert from_(2) == 2.0
    assert _reason(from_, 1.999) == "must be a size >= 2 and <= 10, got 1.999"
    assert _reason(from_, 11) == "must be a size >= 2 and <= 10, got 11"
    count = bounded("a count", 0, 1e8, integer=True)
    assert count(100_000_000) == 100_000_000 and type(count(5)) is int
    assert _reason(count, 5.0) == "must be a count, got 5.0"
    assert _reason(count, 0) == "must be a count > 0 and <= 1e+08, got 0"
    for bad in (True, None, "3", [3]):
        assert _reason(above, bad) == f"must be a size, got {bad!r}"
    assert _reason(above, float("inf")) == "must be a size > 2 and <= 10, got inf"
    assert _reason(bounded("a share", 0.5, 0.75), 0.8) == "must be a share > 0.5 and <= 0.75, got 0.8"


def test_one_or_list_checks_each_entry_and_always_returns_a_list():
    sizes = one_or_list(bounded("a size", 0, 10, integer=True))
    assert sizes(3) == [3] and sizes([3, 1]) == [3, 1]
    assert _reason(sizes, 11) == "must be a size > 0 and <= 10, got 11"  # a single value: no "entry"
    assert _reason(sizes, [1, 11]) == "entry 11 must be a size > 0 and <= 10, got 11"
    assert _reason(sizes, [1, "2"]) == "entry '2' must be a size, got '2'"
    assert _reason(sizes, []) == "must not be an empty list"
    assert _reason(sizes, [2, 1, 2]) == "has repeated entries: [2, 1, 2]"
    assert one_or_list(lambda v: v % 3, unique=False)([1, 4]) == [1, 1]
    assert _reason(one_or_list(lambda v: v % 3), [1, 4]) == "has repeated entries: [1, 4]"  # after the check


def test_optional_passes_none_and_checks_the_rest():
    check = optional(bounded("a rate", 0, 5))
    assert check(None) is None
    assert check(5) == 5.0
    assert _reason(check, 0) == "must be a rate > 0 and <= 5, got 0"


def test_measurement_defaults():
    config = make()
    assert (config.min_query_count, config.min_duration_s, config.max_duration_s, config.contention_limit) == (
        64,
        2.0,
        60.0,
        0.10,
    )
    assert (config.precision, config.latency_precision, config.settle_max_s, config.warmup) == (0.02, None, 10.0, 2)
    assert config.batch_sizes == [8]  # null means [batch_size]
    assert (config.scenario, config.clients, config.target_qps, config.latency_bound_ms) == (
        ["offline"],
        [1],
        None,
        None,
    )
    assert (config.server_search, config.compile_only, config.numeric_check, config.audits) == (
        False,
        False,
        True,
        True,
    )
    assert (config.numeric_batches, config.numeric_tolerance, config.allow_many_clients, config.pool_max_mb) == (
        2,
        None,
        False,
        256.0,
    )


@pytest.mark.parametrize(
    "key, value, expected",
    [
        ("min_query_count", 1, 1),
        ("min_query_count", 100_000_000, 100_000_000),
        ("min_duration_s", 0, 0.0),  # the only bound that includes its low end
        ("min_duration_s", 1, 1.0),
        ("max_duration_s", 86400, 86400.0),
        ("max_duration_s", 2, 2.0),  # equal to min_duration_s is allowed
        ("contention_limit", 1, 1.0),
        ("contention_limit", 0.001, 0.001),
        ("precision", 0.05, 0.05),
        ("precision", 1e-6, 1e-6),
        ("precision", None, None),  # no precision asked: stop at the minimums
        ("latency_precision", 0.1, 0.1),
        ("latency_precision", None, None),
        ("settle_max_s", 0, 0.0),  # no settle phase
        ("settle_max_s", 30, 30.0),
        ("batch_sizes", 4, [4]),
        ("batch_sizes", [1, 8, 65536], [1, 8, 65536]),
        ("scenario", "single_stream", ["single_stream"]),
        ("scenario", ["single_stream", "offline"], ["single_stream", "offline"]),
        ("clients", [1, 2], [1, 2]),
        ("clients", 8, [8]),
        ("target_qps", 1e9, 1e9),
        ("target_qps", 5, 5.0),
        ("latency_bound_ms", 3.6e6, 3.6e6),
        ("server_search", True, True),
        ("compile_only", True, True),
        ("numeric_check", False, False),
        ("numeric_batches", 1, 1),
        ("numeric_batches", 64, 64),
        ("audits", False, False),
        ("pool_max_mb", 65536, 65536.0),
        ("pool_max_mb", 0.5, 0.5),
    ],
)
def test_good_values_are_normalised(two_cores, key, value, expected):
    config = make(**{key: value})
    assert getattr(config, key) == expected
    assert type(getattr(config, key)) is type(expected)
    if isinstance(expected, list):
        assert all(type(a) is type(b) for a, b in zip(getattr(config, key), expected))


@pytest.mark.parametrize(
    "key, value, reason",
    [
        ("precision", 0, "must be a fraction > 0 and < 1 (0.02 = ±2 %), got 0"),
        ("precision", 1, "must be a fraction > 0 and < 1 (0.02 = ±2 %), got 1"),
        ("precision", -0.02, "must be a fraction > 0 and < 1 (0.02 = ±2 %), got -0.02"),
        ("precision", True, "must be a fraction > 0 and < 1 (0.02 = ±2 %), got True"),
        ("precision", "2%", "must be a fraction > 0 and < 1 (0.02 = ±2 %), got '2%'"),
        ("latency_precision", 1.5, "must be a fraction > 0 and < 1 (0.02 = ±2 %), got 1.5"),
        ("settle_max_s", -1, "must be a number of seconds >= 0 and <= 86400, got -1"),
        ("min_query_count", 0, "must be a positive integer > 0 and <= 1e+08, got 0"),
        ("repetitions", 0, "must be a positive integer, got 0"),
        ("repetitions", 2.5, "must be a positive integer, got 2.5"),
        ("repetitions", "3", "must be a positive integer, got '3'"),
        ("repetitions", 1001, "must be a positive integer <= 1000 (fresh runs of the case), got 1001"),
        ("min_query_count", 100_000_001, "must be a positive integer > 0 and <= 1e+08, got 100000001"),
        ("min_query_count", 2.0, "must be a positive integer, got 2.0"),
        ("min_query_count", True, "must be a positive integer, got True"),
        ("min_query_count", "64", "must be a positive integer, got '64'"),
        ("min_query_count", None, "must be a positive integer, got None"),
        ("min_duration_s", -0.5, "must be a number of seconds >= 0 and <= 86400, got -0.5"),
        ("min_duration_s", 86400.5, "must be a number of seconds >= 0 and <= 86400, got 86400.5"),
        ("max_duration_s", 0, "must be a number of seconds > 0 and <= 86400, got 0"),
        ("max_duration_s", "1", "must be a number of seconds, got '1'"),
        ("max_duration_s", float("nan"), "must be a number of seconds > 0 and <= 86400, got nan"),
        ("contention_limit", 0, "must be a fraction > 0 and <= 1, got 0"),
        ("contention_limit", 1.01, "must be a fraction > 0 and <= 1, got 1.01"),
        ("contention_limit", False, "must be a fraction, got False"),
        ("batch_sizes", 0, "must be a positive integer > 0 and <= 65536, got 0"),
        ("batch_sizes", 65537, "must be a positive integer > 0 and <= 65536, got 65537"),
        ("batch_sizes", [1, 0], "entry 0 must be a positive integer > 0 and <= 65536, got 0"),
        ("batch_sizes", [4, 2.5], "entry 2.5 must be a positive integer, got 2.5"),
        ("batch_sizes", [], "must not be an empty list"),
        ("batch_sizes", [8, 1, 8], "has repeated entries: [8, 1, 8]"),
        ("scenario", "bogus", f"{SCENARIOS}, got 'bogus'"),
        ("scenario", None, f"{SCENARIOS}, got None"),
        ("scenario", ["offline", "Server"], f"entry 'Server' {SCENARIOS}, got 'Server'"),
        ("scenario", ["offline", "offline"], "has repeated entries: ['offline', 'offline']"),
        ("scenario", [], "must not be an empty list"),
        ("clients", 0, "must be a positive integer > 0 and <= 4096, got 0"),
        ("clients", [1, 4097], "entry 4097 must be a positive integer > 0 and <= 4096, got 4097"),
        ("clients", [2, 2], "has repeated entries: [2, 2]"),
        ("target_qps", 0, "must be a positive number of samples per second > 0 and <= 1e+09, got 0"),
        ("target_qps", 1.5e9, "must be a positive number of samples per second > 0 and <= 1e+09, got 1500000000.0"),
        ("latency_bound_ms", 3600001, "must be a positive number of milliseconds > 0 and <= 3.6e+06, got 3600001"),
        ("latency_bound_ms", -1, "must be a positive number of milliseconds > 0 and <= 3.6e+06, got -1"),
        ("server_search", 1, "must be true or false, got 1"),
        ("compile_only", "yes", "must be true or false, got 'yes'"),
        ("numeric_check", None, "must be true or false, got None"),
        ("audits", 0, "must be true or false, got 0"),
        ("allow_many_clients", "true", "must be true or false, got 'true'"),
        ("numeric_batches", 0, "must be a positive integer > 0 and <= 64, got 0"),
        ("numeric_batches", 65, "must be a positive integer > 0 and <= 64, got 65"),
        ("pool_max_mb", 0, "must be a positive number of MiB > 0 and <= 65536, got 0"),
        ("pool_max_mb", 65537, "must be a positive number of MiB > 0 and <= 65536, got 65537"),
    ],
)
def test_bad_values_say_which_bound(two_cores, key, value, reason):
    with pytest.raises(ConfigError) as info:
        make(**{key: value})
    assert str(info.value) == f"config: key '{key}' {reason}"


def test_min_and_max_duration_are_checked_together():
    assert (make(min_duration_s=5, max_duration_s=5).max_duration_s) == 5.0
    with pytest.raises(ConfigError) as info:
        make(min_duration_s=10, max_duration_s=5.5, origin={"max_duration_s": "/v.yaml"})
    assert str(info.value) == "/v.yaml: key 'max_duration_s' is 5.5, less than min_duration_s 10"
    with pytest.raises(ConfigError) as info:
        make(min_duration_s=70)
    assert str(info.value) == "config: key 'max_duration_s' is 60, less than min_duration_s 70"


def test_explicit_batch_sizes_are_kept_apart_from_batch_size():
    assert make(batch_size=2, batch_sizes=[4, 16]).batch_sizes == [4, 16]
    assert make(batch_size=2).batch_sizes == [2]


@pytest.mark.parametrize("scenario", ["server", ["offline", "server"]])
def test_the_server_scenario_needs_a_latency_bound_and_a_rate(scenario):
    # Named where scenario was set: that is what asks for the bound.
    with pytest.raises(ConfigError) as info:
        make(scenario=scenario, target_qps=10)
    assert (
        str(info.value)
        == "config: key 'scenario' includes server, so key 'latency_bound_ms' is required (the p99 bound in ms)"
    )
    with pytest.raises(ConfigError) as info:
        make(scenario=scenario, latency_bound_ms=10, origin={"scenario": "/b.yaml", "target_qps": "/c.yaml"})
    assert (
        str(info.value)
        == "/b.yaml: key 'scenario' includes server, so key 'target_qps' is required (or server_search: true)"
    )
    config = make(scenario=scenario, latency_bound_ms=10, server_search=True)
    assert config.target_qps is None and config.server_search is True
    assert make(scenario=scenario, **SERVER).target_qps == 100.0


def test_other_scenarios_need_neither():
    config = make(scenario=["offline", "single_stream"])
    assert (config.target_qps, config.latency_bound_ms) == (None, None)


def test_clients_are_bounded_by_four_per_core(two_cores):
    assert make(clients=[1, 8]).clients == [1, 8]
    message = (
        "config: key 'clients' is 9, more than 4 x the 2 cores here; set allow_many_clients: true if that is intended"
    )
    for clients in (9, [9, 1]):
        with pytest.raises(ConfigError) as info:
            make(clients=clients)
        assert str(info.value) == message
    assert make(clients=[9, 1], allow_many_clients=True).clients == [9, 1]


@pytest.mark.parametrize("count, cores", [(3, 3), (None, 1)])
def test_cores_fall_back_to_cpu_count_without_affinity(monkeypatch, count, cores):
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: count)
    assert make(clients=4 * cores).clients == [4 * cores]
    with pytest.raises(ConfigError) as info:
        make(clients=4 * cores + 1)
    assert str(info.value) == (
        f"config: key 'clients' is {4 * cores + 1}, more than 4 x the {cores} cores here; set allow_many_clients: true "
        "if that is intended"
    )


# --- thread and worker counts: bounded the same on every machine, oversubscription reported --------

THREADS_REFUSED = (
    "must be 0 (the default) or a count <= 1024, got {}: thousands of threads or processes exhaust "
    "process ids or crash a runtime"
)


@pytest.mark.parametrize(
    "key",
    ["num_workers", "intra_op_num_threads", "inter_op_num_threads", "torch_threads", "flagv_threads", "loader_workers"],
)
def test_thread_counts_have_one_bound_whatever_the_cpus(two_cores, key):
    typed = key == "num_workers"

    def config(value):
        return make(**{key: value}) if typed else make(extra={key: value})

    for value in (0, 2, 3, 8, 1024):  # more than the 2 CPUs here is legal: a 64-core server's config runs on a laptop
        assert config(value).get(key) == value
    for value, shown in ((1025, "1025"), (100_000, "100000")):
        with pytest.raises(ConfigError) as info:
            config(value)
        assert str(info.value) == f"config: key '{key}' " + THREADS_REFUSED.format(shown)
    for value, reason in ((-1, "got -1"), (True, "got True"), (2.0, "got 2.0"), ("8", "got '8'")):
        with pytest.raises(ConfigError) as info:
            config(value)
        assert str(info.value) == f"config: key '{key}' must be a non-negative integer, {reason}"


def test_oversubscribed_lists_thread_counts_above_the_cpus(two_cores):
    from contract.config.values import oversubscribed

    values = {
        "num_workers": 8,
        "intra_op_num_threads": 2,
        "inter_op_num_threads": 3,
        "torch_threads": 0,
        "batch_size": 64,
        "my_workers": True,
    }
    assert oversubscribed(values) == [
        {"key": "num_workers", "value": 8, "cpus": 2, "run_with": 8},
        {"key": "inter_op_num_threads", "value": 3, "cpus": 2, "run_with": 3},
    ]
    assert (
        oversubscribed({"num_workers": 2, "threads": 64, "workers": 64}) == []
    )  # 2 = the CPUs; bare names are not thread keys


def test_oversubscription_warns_once_per_key_with_where_and_how_many(two_cores, caplog_loguru):
    from contract.config.values import warn_oversubscribed

    found = warn_oversubscribed(
        {"num_workers": 8, "intra_op_num_threads": 1, "flagv_threads": 4}, {"num_workers": "/c.yaml"}
    )
    assert [item["key"] for item in found] == ["num_workers", "flagv_threads"]
    assert [(r["level"], r["message"]) for r in caplog_loguru] == [
        (
            "WARNING",
            f"{where}: key '{key}' is {value}, more than the 2 CPUs this process may use; running with {value} as "
            "given "
            "(oversubscribed: slower, not wrong; recorded in result.json env.oversubscribed)",
        )
        for where, key, value in (("/c.yaml", "num_workers", 8), ("config", "flagv_threads", 4))
    ]


def test_numeric_tolerance_is_checked_by_tools_numeric():
    assert make(numeric_tolerance={"max_rel": 0.5}).numeric_tolerance == {"max_rel": 0.5}
    for bad in ("x", {"bogus": 1}, {"max_rel": -1}):
        with pytest.raises(ValueError) as expected:
            tolerances_for("fp32", bad)
        with pytest.raises(ConfigError) as info:
            make(numeric_tolerance=bad, origin={"numeric_tolerance": "/v.yaml"})
        assert str(info.value) == f"/v.yaml: key 'numeric_tolerance' {expected.value}"


# --- --set overrides --------------------------------------------------------------


def test_parse_overrides_reads_yaml_values():
    assert parse_overrides(None) == {}
    assert parse_overrides([]) == {}
    assert parse_overrides(
        ["batch_sizes=[1,8]", "scenario=server", " fp16 =true", "x=", "y= ", "s=a=b", "n=1e3", "q='7'"]
    ) == {
        "batch_sizes": [1, 8],
        "scenario": "server",
        "fp16": True,
        "x": None,
        "y": None,
        "s": "a=b",
        "n": "1e3",
        "q": "7",
    }


@pytest.mark.parametrize(
    "items, message",
    [
        (["batch_size"], "command line (--set): 'batch_size' is not KEY=VALUE"),
        (["=3"], "command line (--set): '=3' is not KEY=VALUE"),
        (["a-b=1"], "command line (--set): 'a-b=1' is not KEY=VALUE"),
        (["1a=1"], "command line (--set): '1a=1' is not KEY=VALUE"),
        (["a=1", "b=2", "a=3"], "command line (--set): key 'a' is given twice"),
        (["a=1", " a =2"], "command line (--set): key 'a' is given twice"),
        (["a=[1"], "command line (--set): key 'a': value '[1' is not valid YAML"),
    ],
)
def test_parse_overrides_refuses(items, message):
    with pytest.raises(ConfigError) as info:
        parse_overrides(items)
    assert str(info.value) == message


@pytest.fixture
def root(tmp_path) -> Path:
    case = tmp_path / "inference" / "configs" / "toy"
    (case / "vendor_config").mkdir(parents=True)
    (case / "configurations.yaml").write_text(textwrap.dedent(BASE))
    (case / "parameters.yaml").write_text("weights: /w.pth\n")
    (case / "vendor_config" / "acme_configurations.yaml").write_text("batch_size: 16\n")
    return tmp_path / "inference"


def load(root: Path, overrides):
    return load_case_config(str(root), "toy", "pytorch", "acme", "/d", "/l", overrides=overrides)


def test_overrides_win_over_every_file_and_are_named_as_the_origin(root):
    config = load(root, {"batch_size": 4, "threads": 3, "scenario": "single_stream"})
    assert (config.batch_size, config.threads, config.scenario) == (4, 3, ["single_stream"])
    assert config.origin["batch_size"] == config.origin["threads"] == "command line (--set)"
    assert config.origin["repeat"] == str(root / "configs" / "toy" / "configurations.yaml")
    assert config.extra == {"weights": "/w.pth", "threads": 3}
    for empty in (None, {}):
        config = load(root, empty)
        assert config.batch_size == 16
        assert config.origin["batch_size"] == str(
            root / "configs" / "toy" / "vendor_config" / "acme_configurations.yaml"
        )


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            {"weights": "/x"},
            "command line (--set): key 'weights' is a case parameter ({params}) and may not be overridden",
        ),
        (
            {"threads": 1, "vendor": "x"},
            "command line (--set): key 'vendor' collides with the command-line option --vendor",
        ),
        ({"HOSTS": ["a"]}, "command line (--set): key 'HOSTS' is a host.yaml key and may not appear in case configs"),
        (
            {"cache_dir": "/c"},
            "command line (--set): key 'cache_dir' is set by the framework and may not be configured",
        ),
        ({"batch_size": 0}, "command line (--set): key 'batch_size' must be a positive integer, got 0"),
    ],
)
def test_overrides_follow_the_case_file_rules(root, overrides, message):
    with pytest.raises(ConfigError) as info:
        load(root, overrides)
    assert str(info.value) == message.format(params=root / "configs" / "toy" / "parameters.yaml")
