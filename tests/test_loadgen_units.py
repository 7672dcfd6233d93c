"""load_generator: mlperf, the fast parts (in scripts/mutation.sh's test selection): the key's
checks, the stage's dispatch to LoadGen and back, LoadGen's INVALID provoked for real with
small engines (a latency bound no engine meets; an engine faster than its probe, tested again), the
settings LoadGen is given, and the detail log's reading. The real digits runs, engine
errors and run.py's bad input are in tests/test_loadgen.py.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import time
import types

import mlperf_loadgen as lg  # a declared dependency: a broken install fails, never skips
import pytest
import torch

from common.errors import ConfigError
from contract.config import CaseConfig
from tests.conftest import TYPED_CASE_CONFIG
from tools.measure import loadgen
from tools.measure.stage import PerformanceStage

# ---- the stage's dispatch, LoadGen's INVALID and errors, with small real engines ---------------------


def stage_for(tmp_path, engine_batches=8, **changes):
    values = dict(
        pool_max_mb=1.0,
        batch_sizes=[2],
        batch_size=2,
        warmup=1,
        audits=False,
        scenario=["single_stream"],
        clients=[1],
        server_search=False,
        target_qps=None,
        min_query_count=64,
        min_duration_s=0.2,
        max_duration_s=30.0,
        seed=0,
        device="cpu",
        contention_limit=1.0,
        latency_bound_ms=None,
        log_dir=str(tmp_path),
        load_generator="mlperf",
    )
    values.update(changes)
    loader = [(torch.full((2, 3), float(b)), None) for b in range(engine_batches)]
    return PerformanceStage(types.SimpleNamespace(**values), loader, lambda: None, "fp32")


def sleeping(seconds: float):
    def engine(inputs):
        time.sleep(seconds)
        return [inputs[0] * 2.0], 0.0

    return engine


def test_the_stage_runs_a_row_under_the_generator_the_config_names(tmp_path):
    stage = stage_for(tmp_path, load_generator="inferperf")
    stage.rows_for(sleeping(0.0005), 2)
    stage.config.load_generator = "mlperf"
    stage.rows_for(sleeping(0.0005), 2)
    inferperf, mlperf = (row.to_json() for row in stage.report.rows)
    assert inferperf["load_generator"] == "inferperf" and "loadgen" not in inferperf
    assert mlperf["load_generator"] == "mlperf" and mlperf["loadgen"]["result_validity"] == "VALID"
    assert mlperf["verdict"] == {"valid": True, "reasons": []}
    assert set(inferperf) <= set(mlperf)  # the same keys, plus LoadGen's
    assert len(stage.report.raw_latencies_ns) == 2 and len(stage.report.raw_latencies_ns[1]) == mlperf["queries"]
    assert (tmp_path / "mlperf_log_bs2_single_stream_x1_summary.txt").is_file()


def test_a_latency_bound_no_engine_meets_is_loadgens_invalid_in_the_row(tmp_path):
    stage = stage_for(tmp_path, scenario=["server"], target_qps=2000.0, latency_bound_ms=0.5, min_duration_s=0.5)
    stage.rows_for(sleeping(0.002), 2)  # every query takes 2 ms, the bound is 0.5 ms
    (row,) = (row.to_json() for row in stage.report.rows)
    assert row["loadgen"]["result_validity"] == "INVALID" and row["latency_bound_met"] is False
    (reason,) = [r for r in row["verdict"]["reasons"] if r.startswith("mlperf loadgen")]
    assert (
        reason.startswith("mlperf loadgen: INVALID: ")
        and "latency constraint not met" in reason
        and "early stopping not met (" in reason
    )
    assert row["verdict"]["valid"] is False


def speeding_up(monkeypatch, sleeps: list[float]):
    """An engine that sleeps ``sleeps[k]`` a call once LoadGen's settings have been made ``k`` times (the
    probe runs before the first), so it speeds up between tests, not at a wall-clock instant: a slow start
    of the machine cannot move a step into the probe. Returns the engine, the settings LoadGen got, and
    the engine's calls counted by the number of settings made when each call ran."""
    made = []
    calls = collections.Counter()
    real_settings = loadgen.loadgen_settings

    def counted(*args, **kwargs):
        made.append(real_settings(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(loadgen, "loadgen_settings", counted)

    def engine(inputs):
        calls[len(made)] += 1
        time.sleep(sleeps[min(len(made), len(sleeps) - 1)])
        return [inputs[0]], 0.0

    return engine, made, calls


def test_an_engine_faster_than_its_probe_is_tested_again_at_its_own_speed(tmp_path, monkeypatch):
    # LoadGen generates 2 x min_duration of SingleStream queries at the expected latency, and at least
    # min_query_count: told 91 ms by the probe (100 ms / PROBE_MARGIN), it has 64 queries, which take
    # 0.13 s at 2 ms: min duration (2 s) not met unless a call takes 31 ms (a loaded CI machine stretched
    # the 2-ms sleep to about 10 ms). The row is tested again at the first test's median, and is LoadGen's
    # VALID, saying so: a sleep cannot run much faster than the median it was guessed from.
    engine, made, calls = speeding_up(monkeypatch, [0.100, 0.002])
    stage = stage_for(tmp_path, min_duration_s=2.0, warmup=0)
    stage.rows_for(engine, 2)
    (row,) = (row.to_json() for row in stage.report.rows)
    block = row["loadgen"]
    first_guess, second_guess = (s.single_stream_expected_latency_ns for s in made)
    assert len(made) == 2 and first_guess > 100_000_000 / 1.1 * 0.99
    assert 2_000_000 / 1.1 * 0.99 < second_guess < first_guess / 4  # the first test's median (>= 2 ms) / 1.1
    rerun = block["rerun"]
    assert rerun["probe"]["latency_ns"] >= 100_000_000 and rerun["conditions"]["min_duration_met"] is False
    assert rerun["why"] == "min duration not met at the probe's guess"
    assert rerun["query_count"] == 64 == calls[1]  # what LoadGen generated, all run
    assert abs(block["probe"]["latency_ns"] / 1.1 - second_guess) <= 1  # the guess the second test was given
    assert block["result_validity"] == "VALID" and block["conditions"]["min_duration_met"] is True
    assert row["verdict"] == {"valid": True, "reasons": []} and row["stop_reason"] == "minimums met"
    assert row["queries"] == block["query_count"] == calls[2]  # the second test's, timed by the SUT


def test_an_engine_that_speeds_up_again_misses_loadgens_min_duration(tmp_path, monkeypatch):
    # Once more after the second test's settings: one test again, not a loop; the row is INVALID in
    # LoadGen's words, and its block keeps both guesses. Probe 250 ms (64 queries generated for 6 s), first
    # test 40 ms (64 queries, 2.6 s: met only if a call takes 94 ms), second test told about 36 ms: some
    # 330 queries of no sleep, which miss 6 s unless a call with its LoadGen round trip takes 18 ms.
    engine, made, calls = speeding_up(monkeypatch, [0.250, 0.040, 0.0])
    stage = stage_for(tmp_path, min_duration_s=6.0, warmup=0)
    stage.rows_for(engine, 2)
    (row,) = (row.to_json() for row in stage.report.rows)
    assert len(made) == 2 and row["loadgen"]["rerun"]["probe"]["latency_ns"] >= 250_000_000
    assert row["loadgen"]["rerun"]["query_count"] == 64 == calls[1]
    assert (
        row["loadgen"]["conditions"]["min_duration_met"] is False and row["stop_reason"] == "loadgen: minimums not met"
    )
    assert row["queries"] == calls[2] > 64
    assert any(r.startswith("mlperf loadgen: INVALID: min duration not met") for r in row["verdict"]["reasons"]), row[
        "verdict"
    ]


def test_a_row_invalid_for_another_reason_is_not_tested_again(tmp_path, monkeypatch):
    engine, made, _ = speeding_up(monkeypatch, [0.002])  # min duration met, the latency bound not
    stage = stage_for(tmp_path, scenario=["server"], target_qps=2000.0, latency_bound_ms=0.5, min_duration_s=0.5)
    stage.rows_for(engine, 2)
    (row,) = (row.to_json() for row in stage.report.rows)
    assert len(made) == 1 and "rerun" not in row["loadgen"] and row["loadgen"]["result_validity"] == "INVALID"


# ---- settings, the detail log ------------------------------------------------------------------------


def test_settings_come_from_the_probe_and_the_config(monkeypatch):
    monkeypatch.setattr(loadgen, "generation_limit", lambda available=None: 1_000_000)  # as with 1.9 GB available
    config = types.SimpleNamespace(
        min_duration_s=2.0, max_duration_s=60.0, min_query_count=100, seed=7, latency_bound_ms=25.0
    )
    found = loadgen.Probe(queries=20, latency_ns=1_100_000, qps=900.0)
    single = loadgen.loadgen_settings(lg, "single_stream", config, found, 4, 1, None)
    assert single.scenario == lg.TestScenario.SingleStream and single.mode == lg.TestMode.PerformanceOnly
    assert single.single_stream_expected_latency_ns == 1_000_000  # the probe's latency / PROBE_MARGIN
    assert (single.min_duration_ms, single.max_duration_ms, single.min_query_count, single.schedule_rng_seed) == (
        2000,
        60000,
        100,
        7,
    )
    offline = loadgen.loadgen_settings(lg, "offline", config, found, 4, 2, None)
    assert offline.offline_expected_qps == pytest.approx(900.0 * 2 * 1.1)  # one client's rate x clients x margin
    slow = loadgen.loadgen_settings(lg, "offline", config, loadgen.Probe(3, 10**9, 1.0), 4, 1, None)
    assert slow.offline_expected_qps == pytest.approx(100 / 2.2)  # enough samples for min_query_count
    server = loadgen.loadgen_settings(lg, "server", config, found, 4, 1, 200.0)
    assert (
        server.server_target_qps == 50.0
        and server.server_target_latency_ns == 25_000_000
        and server.server_target_latency_percentile == 0.99
    )
    assert server.min_query_count == 662  # the p99 floor, as InferPerf's server rows
    # LoadGen holds what it generates: a guess never asks for more than generation_limit() queries or samples
    instant = loadgen.Probe(queries=20, latency_ns=100, qps=1e7)
    fast = loadgen.loadgen_settings(lg, "single_stream", config, instant, 4, 1, None)
    assert fast.single_stream_expected_latency_ns == 2 * 2 * 10**9 // 1_000_000 == 4000
    fast = loadgen.loadgen_settings(lg, "offline", config, instant, 4, 1, None)
    assert fast.offline_expected_qps == pytest.approx(1_000_000 / 2.2)
    config.min_query_count = 10
    assert (
        loadgen.loadgen_settings(lg, "single_stream", config, found, 4, 1, None).min_query_count == 64
    )  # the p90 floor


def detail_line(key: str, value, error: bool = False, warning: bool = False) -> str:
    entry = {"key": key, "value": value, "time_ms": 1.0, "metadata": {"is_error": error, "is_warning": warning}}
    return ":::MLLOG " + json.dumps(entry)


def test_the_detail_log_is_read_line_by_line_and_an_error_makes_the_block_invalid(tmp_path):
    path = tmp_path / "detail.txt"
    lines = [
        detail_line("loadgen_version", "6.0.17 @ x"),
        detail_line("result_validity", "VALID"),
        "garbage line",
        ":::MLLOG {not json",
        detail_line("result_min_duration_met", True),
        detail_line("early_stopping_met", True),
        detail_line(
            "early_stopping_result",
            " * Processed at least 64 queries (100).  * Early stopping 90.0th percentile estimate: 2500000",
        ),
        detail_line("result_qps_with_loadgen_overhead", 50.0),
        detail_line("result_90.00_percentile_latency_ns", 2_000_000),
        detail_line("effective_min_duration_ms", 1000),
        detail_line("warning_generic_message", "odd", warning=True),
        detail_line("error_runtime", "SUT failed", error=True),
    ]
    path.write_text("\n".join(lines) + "\n")
    values, errors, warnings = loadgen.read_detail(path)
    assert (
        values["result_validity"] == "VALID"
        and errors == ["error_runtime: SUT failed"]
        and warnings == ["warning_generic_message: odd"]
    )
    block = loadgen.summarize(values, errors, warnings, "single_stream", 4)
    assert block["valid"] is False and block["samples_per_second"] == 200.0 and block["latency_ms"]["p90"] == 2.0
    assert block["early_stopping"] == [
        "Processed at least 64 queries (100).",
        "Early stopping 90.0th percentile estimate: 2500000",
    ]
    assert block["early_stopping_estimate_ms"] == {"p90": 2.5} and block["settings"] == {"min_duration_ms": 1000}
    assert loadgen.invalid_reasons(block) == ["mlperf loadgen: VALID: error error_runtime: SUT failed"]
    values["result_validity"], values["result_min_duration_met"] = "INVALID", False
    block = loadgen.summarize(values, [], [], "single_stream", 4)
    assert loadgen.invalid_reasons(block) == ["mlperf loadgen: INVALID: min duration not met"]


# ---- the key ------------------------------------------------------------------------------------------


def make(**overrides) -> CaseConfig:
    return CaseConfig(**{**TYPED_CASE_CONFIG, **overrides})


def test_the_key_in_the_case_config():
    assert make().load_generator == "inferperf" and make(load_generator="mlperf").load_generator == "mlperf"
    for value, shown in (("loadgen", "'loadgen'"), ("MLPerf", "'MLPerf'"), (None, "None"), (1, "1")):
        with pytest.raises(ConfigError) as info:
            make(load_generator=value, origin={"load_generator": "/v.yaml"})
        assert str(info.value) == f"/v.yaml: key 'load_generator' must be one of inferperf, mlperf, got {shown}"
    with pytest.raises(ConfigError) as info:
        make(
            load_generator="mlperf",
            scenario="server",
            latency_bound_ms=5,
            server_search=True,
            origin={"server_search": "/c.yaml"},
        )
    assert (
        str(info.value)
        == "/c.yaml: key 'server_search' is true, but load_generator mlperf runs server rows at a fixed target_qps; "
        "set target_qps instead"
    )
    assert (
        make(load_generator="inferperf", scenario="server", latency_bound_ms=5, server_search=True).server_search
        is True
    )


def test_mlperf_needs_loadgen_importable(monkeypatch):
    """The check itself (tests/test_loadgen.py runs run.py in an interpreter that really lacks the package)."""
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *args: None if name == "mlperf_loadgen" else real(name, *args)
    )
    with pytest.raises(ConfigError) as info:
        make(load_generator="mlperf", origin={"load_generator": "command line (--set)"})
    message = (
        "command line (--set): key 'load_generator' is 'mlperf', but MLPerf LoadGen is not installed here "
        "(pip install mlcommons-loadgen==6.0.17)"
    )
    assert str(info.value) == message
    assert make(load_generator="inferperf").load_generator == "inferperf"


def test_the_generation_limit_is_a_share_of_the_available_memory(monkeypatch):
    assert loadgen.generation_limit(16 * 2**30) == int(16 * 2**30 * 0.25 / 470) == 9_138_228  # 4.3 GB at 470 B
    assert loadgen.generation_limit(2 * 2**30) == 1_142_278
    assert loadgen.generation_limit(2**30) == loadgen.generation_limit(0) == 1_000_000  # the floor
    monkeypatch.setattr("psutil.virtual_memory", lambda: types.SimpleNamespace(available=8 * 2**30))
    assert loadgen.generation_limit() == 4_569_114  # psutil's available memory, read when asked
    config = types.SimpleNamespace(min_duration_s=600.0, min_query_count=64)
    instant = loadgen.Probe(queries=20, latency_ns=100, qps=1e7)
    single = loadgen.named("single_stream")
    # 600 s at 0.3 ms a query: 4M queries generated, under 8 GB's bound; 1M would have asked for 1.2 ms
    assert loadgen.guesses(single, config, loadgen.Probe(20, 330_000, 3030.0), 1, 1) == {
        "single_stream_expected_latency_ns": 300_000
    }
    assert loadgen.guesses(single, config, instant, 1, 1) == {"single_stream_expected_latency_ns": 262_633}
    assert loadgen.guesses(single, config, instant, 1, 1, limit=1_000_000) == {
        "single_stream_expected_latency_ns": 1_200_000
    }


def test_the_rerun_guess_is_the_faster_median_and_only_for_a_missed_duration(monkeypatch):
    monkeypatch.setattr(loadgen, "generation_limit", lambda available=None: 1_000_000)
    # No LoadGen and no clock: the decision alone, on a first test's block and its SUT's latencies.
    config = types.SimpleNamespace(min_duration_s=1.0, max_duration_s=60.0, min_query_count=64, seed=0)
    found = loadgen.Probe(queries=8, latency_ns=20_000_000, qps=50.0)
    sut = types.SimpleNamespace(latencies_ns=[2_000_000, 3_000_000, 2_500_000])
    missed = {"conditions": {"min_duration_met": False, "min_queries_met": True}}
    single = loadgen.named("single_stream")
    guess = loadgen.rerun_guess(single, config, missed, found, sut, 1, 1)
    assert guess == loadgen.Probe(3, 2_500_000, 400.0)  # the median, and its rate
    multi = loadgen.named("multi_stream")
    assert loadgen.rerun_guess(multi, config, missed, found, sut, 4, 1).latency_ns == 625_000  # per engine call
    for conditions in ({"min_duration_met": True}, {"min_duration_met": False, "min_queries_met": False}, {}):
        assert loadgen.rerun_guess(single, config, {"conditions": conditions}, found, sut, 1, 1) is None
    assert loadgen.rerun_guess(loadgen.named("server"), config, missed, found, sut, 1, 1) is None  # nothing guessed
    empty = types.SimpleNamespace(latencies_ns=[])
    assert loadgen.rerun_guess(single, config, missed, found, empty, 1, 1) is None
    slower = types.SimpleNamespace(latencies_ns=[30_000_000])  # never slower than the probe
    assert loadgen.rerun_guess(single, config, missed, found, slower, 1, 1) is None
    capped = loadgen.Probe(8, 1_000, 1e6)  # already at the generation bound: a rerun would change nothing
    assert loadgen.rerun_guess(single, config, missed, capped, types.SimpleNamespace(latencies_ns=[500]), 1, 1) is None
