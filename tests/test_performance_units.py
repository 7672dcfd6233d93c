"""tools.measure.stage without a real engine (mutation testing, docs/testing.md).

The pure parts (best rows, the query pool, judge_row, row_record) are checked
against hand-made runs. PerformanceStage is driven with a tiny fake engine on a
fake clock: ``run_scenario`` is called through with an injected clock and sleep,
``CpuContention`` and ``time.time`` are stood in, so every row is exact; the
anti-caching audit (whose clock is bound at import) is stood in as well and
has its own tests in tests/test_audit*.py. Several clients run their workers
one after another, so that the fake clock stays deterministic.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from common.record import LatencyBlock, PerformanceRow, Verdict
from common.scenario import SCENARIOS
from common.stats import LatencyStats
from contract.phase import ContentionReading
from tests.infra.clocks import MS, FakeClock
from tests.infra.performance_rig import CONFIG, QUIET, Loader, Rig, make_stage, scenario_run, stage_config
from tools.checks import audit
from tools.checks.audit import AuditResult
from tools.measure import stage as performance
from tools.measure.precision import METHOD, Settle
from tools.measure.rows import RowFigures, latency_of, performance_row
from tools.measure.scenarios import ScenarioRun, ScenarioSpec, run_scenario
from tools.measure.stage import (
    AUDIT_BUDGET_S,
    POOL_BATCHES,
    REFERENCE_BATCHES,
    PerformanceReport,
    PerformanceStage,
    collect_samples,
    judge_row,
    make_pool,
    row_record,
)
from tools.measure.verdict import contention_not_judged


def test_constants():
    assert (POOL_BATCHES, REFERENCE_BATCHES, AUDIT_BUDGET_S) == (8, 2, 2.0)
    assert {s.name: s.headline for s in SCENARIOS.values()} == {
        "offline": None,
        "single_stream": "p90",
        "multi_stream": "p99",
        "server": "p99",
    }


# ---- PerformanceReport.best -------------------------------------------------------------
def row(bs, scenario, clients, qps, p90=None, mean=None, valid=True):
    return PerformanceRow.from_json(
        {
            "batch_size": bs,
            "scenario": scenario,
            "clients": clients,
            "qps": qps,
            "latency_ms": {"p90": p90, "mean": mean},
            "verdict": {"valid": valid, "reasons": [] if valid else ["x"]},
        }
    )


def record_of(*args, **kwargs) -> dict:
    """row_record's row as result.json has it."""
    return row_record(*args, **kwargs).to_json()


def rows_of(stage) -> list[dict]:
    return [r.to_json() for r in stage.report.rows]


def test_best_prefers_valid_rows():
    rows = [
        row(1, "offline", 1, 500.0, p90=9.0, valid=False),
        row(2, "offline", 2, 300.0, mean=4.0),
        row(4, "single_stream", 1, None, p90=3.0, mean=1.0),
        row(8, "offline", 1, 400.0, p90=None, mean=None),
    ]
    report = PerformanceReport(rows=rows)
    assert report.best() == {
        "from_valid_rows": True,
        "throughput": {"batch_size": 8, "scenario": "offline", "clients": 1, "qps": 400.0},
        "latency": {"batch_size": 4, "scenario": "single_stream", "clients": 1, "p90_ms": 3.0, "mean_ms": 1.0},
    }
    assert report.to_dict() == {"rows": rows, "numeric": None, "audits": [], "best": report.best(), "notes": []}


def test_best_of_invalid_rows_and_of_none():
    rows = [row(1, "offline", 1, None, mean=2.0, valid=False), row(2, "server", 3, 10.0, p90=5.0, valid=False)]
    assert PerformanceReport(rows=rows).best() == {
        "from_valid_rows": False,
        "throughput": {"batch_size": 2, "scenario": "server", "clients": 3, "qps": 10.0},
        "latency": {"batch_size": 1, "scenario": "offline", "clients": 1, "p90_ms": None, "mean_ms": 2.0},
    }
    assert PerformanceReport().best() is None and PerformanceReport().to_dict()["best"] is None


def samples_loader(count=5, size=3, inputs=1):
    return Loader(
        [
            (
                [torch.arange(size * 2, dtype=torch.float32).reshape(size, 2) + 100 * b + 10 * i for i in range(inputs)]
                if inputs > 1
                else torch.full((size, 2), float(b)),
                None,
            )
            for b in range(count)
        ]
    )


def test_collect_samples_stops_at_wanted_or_bytes():
    loader = samples_loader()
    (got,) = collect_samples(loader, 7, 1e9)
    assert loader.yielded == 3 and got.shape == (7, 2)
    assert got[:, 0].tolist() == [0.0, 0, 0, 1, 1, 1, 2]
    loader = samples_loader()
    (got,) = collect_samples(loader, 100, 48)  # 24 bytes a batch: stops at 48
    assert loader.yielded == 2 and got.shape == (6, 2)
    loader = samples_loader()
    (got,) = collect_samples(loader, 6, 1e9)  # exactly two batches' worth
    assert loader.yielded == 2 and got.shape == (6, 2)
    loader = samples_loader(count=2)
    (got,) = collect_samples(loader, 100, 1e9)  # the loader runs out
    assert loader.yielded == 2 and got.shape == (6, 2)


def test_collect_samples_several_inputs_and_refusals():
    a, b = collect_samples(samples_loader(count=2, inputs=2), 4, 1e9)
    assert a[:, 0].tolist() == [0.0, 2.0, 4.0, 100.0] and b[:, 0].tolist() == [10.0, 12.0, 14.0, 110.0]
    assert collect_samples(Loader([(["text"], None)]), 4, 1e9) is None
    assert collect_samples(Loader([(torch.tensor(1.0), None)]), 4, 1e9) is None
    assert collect_samples(Loader([([torch.zeros(2, 1), 3], None)]), 4, 1e9) is None
    assert collect_samples(Loader([([], None)]), 4, 1e9) is None
    assert collect_samples(Loader([]), 4, 1e9) is None


def test_make_pool_cuts_full_batches():
    samples = [torch.arange(20, dtype=torch.float32).reshape(10, 2), torch.arange(10)]
    pool = make_pool(samples, 4, 1e9)
    assert len(pool) == 2
    assert [b[1].tolist() for b in pool] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert pool[1][0].tolist() == [[8.0, 9.0], [10.0, 11.0], [12.0, 13.0], [14.0, 15.0]]
    assert len(make_pool([torch.arange(100)], 2, 1e9)) == 8  # POOL_BATCHES by default
    assert len(make_pool([torch.arange(100)], 2, 1e9, batches=3)) == 3


def test_make_pool_tiles_a_small_data_set():
    samples = [torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), torch.tensor([7, 8, 9])]
    (pool,) = make_pool(samples, 4, 1e9)
    assert pool[0].tolist() == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [1.0, 2.0]]
    assert pool[1].tolist() == [7, 8, 9, 7]
    (pool,) = make_pool([torch.tensor([5])], 7, 1e9)
    assert pool[0].tolist() == [5] * 7


def test_make_pool_respects_memory_and_is_contiguous():
    samples = [torch.zeros(3, 40).t()]  # 40 samples of 3 float32, non-contiguous
    assert not samples[0].is_contiguous()
    per_batch = 2 * 3 * 4  # bytes of one batch of 2
    assert len(make_pool(samples, 2, 3 * per_batch)) == 3
    assert len(make_pool(samples, 2, 3 * per_batch - 1)) == 2
    assert len(make_pool(samples, 2, 1)) == 1  # at least one batch, whatever the memory
    assert all(t.is_contiguous() for batch in make_pool(samples, 2, 1e9) for t in batch)


def judge(run, contention=QUIET, config=CONFIG, bound=None):
    return judge_row(run, LatencyStats.from_ns(run.latencies_ns), config, contention, bound).reasons


def test_judge_row_offline_valid_and_its_failures():
    assert judge(scenario_run("offline", 24)) == []
    uneven = scenario_run("offline", 24)
    uneven.completions_ns = [MS * (k + 1) for k in range(16)] + [16 * MS + 2 * MS * (k + 1) for k in range(8)]
    config = SimpleNamespace(min_query_count=30, min_duration_s=1.0, contention_limit=0.1)
    assert judge(uneven, ContentionReading(0.5, 3, 1.0, 2), config) == [
        "too few queries: 24 measured, min_query_count is 30",
        "too short: 0.024 s measured, min_duration_s is 1",
        "not precise enough: qps has no interval after 0.024 s (it needs at least 16 queries, more if correlated; "
        "precision 2%)",
        "contention: other processes used 50% of the 3 CPU(s) available to the benchmark during the measured phase "
        "(limit 10%)",
        "contention: 2 other process(es) held a compute context on the benchmark's GPU during the measured phase",
    ]


def test_judge_row_headline_percentiles():
    too_few = (
        "not precise enough: p90 has no interval after 0.063 s (it needs at least 64 queries, more if correlated; "
        "precision 2%)"
    )
    assert judge(scenario_run("single_stream", 63)) == [too_few]
    assert judge(scenario_run("single_stream", 64)) == []
    assert judge_row(
        scenario_run("single_stream", 0),
        None,
        SimpleNamespace(min_query_count=0, min_duration_s=0.0, contention_limit=1.0),
        QUIET,
        None,
    ).reasons == [
        "not precise enough: qps has no interval after 0 s (it needs at least 16 queries, more if correlated; "
        "precision 2%)",
        "not precise enough: p90 has no interval after 0 s (it needs at least 64 queries, more if correlated; "
        "precision 2%)",
    ]


def test_judge_row_server_bound_and_no_throughput_precision():
    uneven = scenario_run("server", 662, latency_ns=5 * MS)
    uneven.completions_ns = [k * k for k in range(662)]  # throughput wildly uneven: not judged for a server
    assert judge(uneven, bound=5.0) == []  # p99 5 ms == the bound: met
    assert judge(scenario_run("server", 662, latency_ns=5_010_000), bound=5.0) == [
        "p99 latency 5.01 ms exceeds latency_bound_ms 5"
    ]
    assert judge(scenario_run("server", 662, latency_ns=9 * MS), bound=None) == []
    too_few = (
        "not precise enough: p99 has no interval after 0.661 s (it needs at least 662 queries, more if correlated; "
        "precision 2%)"
    )
    assert judge(scenario_run("server", 661), bound=5.0) == [too_few]


def test_row_record_offline_in_full():
    run = scenario_run("offline", 24, latency_ns=2 * MS, bs=4)
    test01 = {"passed": True, "detail": "fine"}
    record = record_of(run, CONFIG, QUIET, test01)
    stats = LatencyStats.from_ns([2 * MS] * 24)
    assert record == {
        "batch_size": 4,
        "scenario": "offline",
        "clients": 1,
        "qps": 96 / 0.048,
        "qps_ci95": [96 / 0.048] * 2,
        "queries": 24,
        "samples": 96,
        "duration_s": 0.048,
        "latency_ms": {"p50": 2.0, "p90": None, "p99": None, "p99_9": None, "mean": 2.0},
        "latency_ci95": {"p50": [2.0, 2.0], "p90": None, "p99": None, "p99_9": None},
        "latency_notes": stats.notes,
        "stop_reason": "minimums met",
        "window_qps": [2000.0] * 3,
        "contention": QUIET.to_dict(),
        "target_qps": None,
        "issued_qps": None,
        "latency_bound_ms": None,
        "latency_bound_met": None,
        "server_search": None,
        "accuracy_in_performance_mode": test01,
        "precision": {
            "target": 0.02,
            "latency_target": None,
            "achieved": 0.0,
            "figures": {"qps": 0.0},
            "method": METHOD,
            "batches": {"qps": 24},
            "lag1": {"qps": 0.0},
            "stop_reason": "minimums met",
            "checks": 0,
            "settle_s": 0.0,
            "settle_queries": 0,
            "settled": True,
            "settle_block": 0,
            "settle_change": None,
            "drift": {"qps": None},  # a third of 24 queries is too short for an interval
        },
        # 24 queries: 8 in a third, too few for its own interval, so drift could not be judged (and says so)
        "verdict": {
            "valid": True,
            "reasons": [],
            "not_judged": ["drift of qps: not judged (a third of the window is too short for its own interval)"],
        },
        "started_at_unix": None,  # row_record alone: the stage adds the run's wall-clock window
        "finished_at_unix": None,
        "load_generator": "inferperf",
    }


def test_row_record_server_bound_and_test01():
    run = scenario_run("server", 662, latency_ns=5 * MS, target=100.0)
    failed = {"passed": False, "detail": "TEST01 failed"}
    search = {"upper_qps": 1.0, "trials": []}
    record = record_of(run, CONFIG, QUIET, failed, search)
    assert (record["latency_bound_ms"], record["latency_bound_met"], record["server_search"]) == (5.0, True, search)
    assert record["latency_ms"]["p99"] == 5.0 and record["target_qps"] == 100.0 and record["issued_qps"] == 90.0
    assert record["verdict"] == {"valid": False, "reasons": ["TEST01 failed"]}
    slow = record_of(scenario_run("server", 662, latency_ns=6 * MS), CONFIG, QUIET, {"passed": None, "detail": "n"})
    assert slow["latency_bound_met"] is False and slow["verdict"]["reasons"] == [
        "p99 latency 6 ms exceeds latency_bound_ms 5"
    ]
    few = record_of(scenario_run("server", 10), CONFIG, QUIET, None)
    assert few["latency_bound_met"] is None and few["latency_bound_ms"] == 5.0
    empty = record_of(
        scenario_run("offline", 0), SimpleNamespace(**{**vars(CONFIG), "min_query_count": 0}), QUIET, None
    )
    assert empty["latency_ms"] == {"p50": None, "p90": None, "p99": None, "p99_9": None, "mean": None}
    assert empty["latency_notes"] == [] and empty["qps"] is None


# ---- PerformanceStage with a fake engine -------------------------------------------------------------


def test_stage_pool_and_memory(monkeypatch):
    rig = Rig(monkeypatch)
    stage, loader = make_stage(rig, count=20, batch_sizes=[2, 4], batch_size=3)
    assert stage.usable and stage.max_bytes == 2**20
    assert loader.yielded == 11 and stage.samples[0].shape == (32, 2)  # 4 x 8 samples wanted
    assert [b[0].tolist() for b in stage.pool(16)] == [stage.samples[0][:16].tolist(), stage.samples[0][16:].tolist()]
    stage, loader = make_stage(rig, count=20, batch_sizes=[1], batch_size=5, pool_max_mb=24 / 2**20)
    assert loader.yielded == 1 and stage.samples[0].shape == (3, 2)  # 24 bytes: one batch of the loader
    unusable = PerformanceStage(stage_config(), Loader([("text", None)]), rig.sync, "fp32")
    assert not unusable.usable and unusable.samples is None
    assert unusable.report == PerformanceReport()


def test_numeric_check_skips_and_failures(monkeypatch, caplog_loguru):
    rig = Rig(monkeypatch)
    stage, _ = make_stage(rig)
    pool = stage.pool(2)
    stage.numeric_check(rig.engine, None, pool)
    assert stage.report.notes == ["numeric check skipped: no framework model (no_validation: true)"]

    def broken(inputs):
        raise TypeError("takes 2 arguments")

    stage.numeric_check(rig.engine, broken, pool)
    assert stage.report.notes[-1] == (
        "numeric check skipped: the framework model could not be called on the pool: takes 2 arguments"
    )
    assert stage.report.numeric is None and stage.report.engine_reasons == [] and rig.calls == []

    framework_calls = []

    def framework(inputs):
        framework_calls.append(inputs)
        return [inputs[0] * 2.0, inputs[0]], 0.0

    stage.numeric_check(lambda inputs: ([inputs[0] * 2.0, inputs[0] + 0.5], 0.0), framework, pool)
    assert len(framework_calls) == 2 and framework_calls[0][0] is pool[0][0] and rig.syncs == 1
    numeric = stage.report.numeric
    assert numeric["passed"] is False and numeric["batches"] == 2 and numeric["tolerances"]["max_rel"] == 1e-3
    assert stage.report.engine_reasons == numeric["reasons"] and len(numeric["reasons"]) == 2
    max_rel = numeric["outputs"][1]["max_rel"]
    message = " ".join(caplog_loguru[-1]["message"].split())  # (the line has two spaces after its commas)
    assert message == f"numeric check: FAILED output0 max_rel 0.00e+00, output1 max_rel {max_rel:.2e}"


def test_numeric_check_passes_with_the_configured_tolerance(monkeypatch, caplog_loguru):
    rig = Rig(monkeypatch)
    stage, _ = make_stage(rig, numeric_batches=1, numeric_tolerance={"max_rel": 0.9, "mean_rel": 0.9})
    pool = stage.pool(2)
    stage.numeric_check(lambda inputs: ([inputs[0] * 1.01], 0.0), lambda inputs: ([inputs[0]], 0.0), pool)
    assert stage.report.numeric["passed"] is True and stage.report.numeric["batches"] == 1
    assert stage.report.numeric["precision"] == "fp32" and stage.report.engine_reasons == []
    assert caplog_loguru[-1]["message"].startswith("numeric check: passed output0 max_rel ")


def test_anti_caching_is_engine_wide_only_when_failed(monkeypatch, caplog_loguru):
    rig = Rig(monkeypatch)
    stage, _ = make_stage(rig)
    results = iter(
        [
            AuditResult("anti_caching", True, "ok", {"a": 1}),
            AuditResult("anti_caching", None, "not run", {}),
            AuditResult("anti_caching", False, "caches", {}),
        ]
    )
    seen = []

    def fake_audit(engine, pool, *, sync, budget_s):
        seen.append((engine, pool, sync, budget_s))
        return next(results)

    monkeypatch.setattr(audit, "anti_caching_audit", fake_audit)
    pool = stage.pool(2)
    for _ in range(3):
        stage.anti_caching(rig.engine, pool)
    assert seen == [(rig.engine, pool, rig.sync, 2.0)] * 3
    assert [a["passed"] for a in stage.report.audits] == [True, None, False]
    assert stage.report.audits[0] == {"name": "anti_caching", "passed": True, "detail": "ok", "figures": {"a": 1}}
    assert stage.report.engine_reasons == ["caches"]
    assert [r["message"] for r in caplog_loguru] == ["ok", "not run", "caches"]


def test_rows_for_offline_and_single_stream(monkeypatch, caplog_loguru):
    rig = Rig(monkeypatch)
    stage, _ = make_stage(rig, scenario=["offline", "single_stream"], clients=[1, 2], warmup=3, min_query_count=48)
    pool = stage.pool(2)
    stage.report.engine_reasons.append("engine-wide")
    stage.rows_for(rig.engine, 2, pool)
    # warm-up max(1, 3) calls on pool[0], then one untimed reference call per reference batch
    assert [c[0] is pool[0][0] for c in rig.calls[:3]] == [True] * 3
    assert rig.calls[3][0] is pool[0][0] and rig.calls[4][0] is pool[1][0]
    assert rig.syncs >= 2
    rows = rows_of(stage)
    assert [(r["scenario"], r["clients"]) for r in rows] == [("offline", 1), ("offline", 2), ("single_stream", 1)]
    assert [r["queries"] for r in rows] == [48, 48, 64]  # single_stream: at least p90's floor
    assert rows[0]["qps"] == 48 / 0.024 and rows[0]["batch_size"] == 2
    assert [run["min_query_count"] for run in rig.runs] == [48, 48, 64]
    assert all(
        run["sample_pool_indices"] == frozenset({0, 1})
        and run["seed"] == 0
        and run["sync"] == rig.sync
        and run["max_duration_s"] == 100.0
        and run["min_duration_s"] == 0.0
        and run["target_qps"] is None
        for run in rig.runs
    )
    assert rig.devices == ["cpu"] * 3
    assert [r["contention"]["cpus"] for r in rows] == [1, 2, 3]  # each row has its own reading
    assert [(r["started_at_unix"], r["finished_at_unix"]) for r in rows] == [
        (1000.0, 1001.0),
        (1002.0, 1003.0),
        (1004.0, 1005.0),
    ]
    assert [len(x) for x in stage.report.raw_latencies_ns] == [48, 48, 64]
    assert stage.report.raw_latencies_ns[0] == [MS] * 48
    for r in rows:
        assert r["accuracy_in_performance_mode"]["passed"] is True
        assert (r["verdict"]["valid"], r["verdict"]["reasons"]) == (False, ["engine-wide"])
    assert [m["message"] for m in caplog_loguru] == [
        "performance bs=2 offline clients=1: 2000.00 qps, INVALID: engine-wide",
        "performance bs=2 offline clients=2: 2000.00 qps, INVALID: engine-wide",
        "performance bs=2 single_stream clients=1: 2000.00 qps, INVALID: engine-wide",
    ]


def test_rows_for_without_audits_builds_its_own_pool(monkeypatch, caplog_loguru):
    rig = Rig(monkeypatch, share=0.5)
    stage, _ = make_stage(rig, audits=False, warmup=0, device="cuda:1")
    stage.rows_for(rig.engine, 4)
    # min_query_count 24, but a precise window measures on to 46 queries, the fewest whose thirds judge its drift
    assert len(rig.calls) == 1 + 46 and rig.calls[0][0].shape == (4, 2)
    (r,) = rows_of(stage)
    assert r["batch_size"] == 4 and r["accuracy_in_performance_mode"] is None
    assert rig.runs[0]["sample_pool_indices"] == frozenset() and rig.devices == ["cuda:1"]
    assert r["verdict"]["reasons"] == [
        "contention: other processes used 50% of the 1 CPU(s) available to the benchmark during the measured phase "
        "(limit 10%)"
    ]
    assert caplog_loguru[-1]["message"] == (
        "performance bs=4 offline clients=1: 4000.00 qps, INVALID: contention: other processes used 50% of the 1 "
        "CPU(s) available to the benchmark during the measured phase (limit 10%)"
    )


def test_rows_for_a_valid_row_and_a_zero_time_row(monkeypatch, caplog_loguru):
    rig = Rig(monkeypatch)
    stage, _ = make_stage(rig)
    stage.rows_for(rig.engine, 2)
    # precise at 24 queries already, the window measures on until its drift can be judged: nothing is left unjudged
    assert rows_of(stage)[0]["verdict"] == {"valid": True, "reasons": []}
    assert rows_of(stage)[0]["queries"] == 46
    assert caplog_loguru[-1]["message"] == "performance bs=2 offline clients=1: 2000.00 qps, valid"
    rig.cost_ns = 0
    stage.rows_for(rig.engine, 2)
    assert rows_of(stage)[1]["qps"] is None
    assert caplog_loguru[-1]["message"].startswith("performance bs=2 offline clients=1: n/a qps, INVALID: ")


def test_server_rows_use_the_target_and_the_seed(monkeypatch):
    rig = Rig(monkeypatch)
    stage, _ = make_stage(
        rig,
        scenario=["server"],
        target_qps=600.0,
        seed=5,
        min_query_count=10,
        latency_bound_ms=50.0,
        latency_precision=0.5,
    )
    stage.rows_for(rig.engine, 2)
    (r,) = rows_of(stage)
    assert r["queries"] == 662 and r["target_qps"] == 600.0 and r["latency_bound_ms"] == 50.0
    assert (
        rig.runs[0]["seed"] == 5
        and rig.runs[0]["target_qps"] == 600.0
        and rig.runs[0]["scenario"] is SCENARIOS["server"]
    )
    clock = FakeClock()

    def engine(inputs):
        clock.t += MS
        return [inputs[0]], 0.0

    direct = run_scenario(
        engine,
        stage.pool(2),
        ScenarioSpec(
            scenario="server",
            batch_size=2,
            min_query_count=662,
            min_duration_s=0.0,
            max_duration_s=100.0,
            target_qps=600.0,
            seed=5,
            clock=clock,
            sleep=clock.sleep,
        ),
    )
    assert stage.report.raw_latencies_ns[0] == direct.latencies_ns


def test_test01_fails_when_outputs_under_load_differ(monkeypatch):
    rig = Rig(monkeypatch)
    stage, _ = make_stage(rig, warmup=1, numeric_tolerance={"max_rel": 0.5})
    calls = itertools.count()

    def drifting(inputs):
        k = next(calls)
        rig.clock.t += MS
        return [inputs[0] * 2.0 + (0.0 if k < 3 else 1000.0)], 0.0  # warm-up and references exact, then off

    stage.rows_for(drifting, 2)
    (r,) = rows_of(stage)
    test01 = r["accuracy_in_performance_mode"]
    assert test01["passed"] is False and test01["figures"]["compared"] >= 2
    assert r["verdict"]["reasons"] == [test01["detail"]]


def test_search_row_finds_the_highest_target_meeting_the_bound(monkeypatch):
    rig = Rig(monkeypatch, cost_ns=MS)
    stage, _ = make_stage(
        rig,
        scenario=["server"],
        server_search=True,
        clients=[1],
        latency_bound_ms=3.0,
        min_query_count=10,
        latency_precision=0.9,
    )
    stage.rows_for(rig.engine, 2)
    (r,) = rows_of(stage)
    search = r["server_search"]
    assert rig.runs[0]["scenario"] is SCENARIOS["offline"] and rig.runs[0]["sample_pool_indices"] == frozenset()
    assert search["upper_qps"] == 20 / 0.01  # the offline run: 2 samples per 1 ms
    trials = search["trials"]
    assert trials[0]["target_qps"] == 2000.0 and len(trials) in (1, 7)
    met = [t["target_qps"] for t in trials if t["met"]]
    assert met and r["target_qps"] == max(met)
    assert all((t["p99_ms"] is not None and t["p99_ms"] <= 3.0) == t["met"] for t in trials)
    index = [t["target_qps"] for t in trials].index(r["target_qps"])
    assert r["contention"]["cpus"] == index + 2  # the reading of that run (the offline run was 1)
    assert r["started_at_unix"] == 1000.0 + 2 * (index + 1)
    assert len(stage.report.raw_latencies_ns) == 1 and r["queries"] == 662
    assert r["verdict"]["valid"] is True


def test_search_row_when_no_target_meets_the_bound(monkeypatch):
    rig = Rig(monkeypatch, cost_ns=MS)
    stage, _ = make_stage(
        rig, scenario=["server"], server_search=True, latency_bound_ms=0.5, min_query_count=10, latency_precision=0.9
    )
    stage.report.engine_reasons.append("engine-wide")
    stage.rows_for(rig.engine, 2)
    (r,) = rows_of(stage)
    trials = r["server_search"]["trials"]
    assert len(trials) == 7 and not any(t["met"] for t in trials) and trials[-1]["target_qps"] == 2000.0 / 64
    assert r["target_qps"] == 2000.0 / 64 and r["contention"]["cpus"] == 8  # the last run's reading
    assert r["verdict"]["reasons"] == [
        f"p99 latency {trials[-1]['p99_ms']:.3g} ms exceeds latency_bound_ms 0.5",
        "server_search: no target_qps down to 31.2 met latency_bound_ms 0.5",
        "engine-wide",
    ]


def test_search_row_of_an_engine_that_takes_no_time(monkeypatch):
    rig = Rig(monkeypatch, cost_ns=0)
    stage, _ = make_stage(
        rig, scenario=["server"], server_search=True, latency_bound_ms=1.0, audits=False, max_duration_s=10_000.0
    )
    stage.rows_for(rig.engine, 2)
    (r,) = rows_of(stage)
    assert r["server_search"] == {"upper_qps": None, "trials": [{"target_qps": 1.0, "p99_ms": 0.0, "met": True}]}
    assert r["target_qps"] == 1.0


def test_engine_wide_adds_the_late_reason_once():
    stage = PerformanceStage.__new__(PerformanceStage)
    stage.report = PerformanceReport(engine_reasons=["e1", "own"])
    row_ = row(1, "offline", 1, 1.0, valid=False)
    own = replace(row_, verdict=Verdict(("own",)))
    assert stage._engine_wide(own, "late").verdict.to_json() == {"valid": False, "reasons": ["own", "late", "e1"]}
    assert stage._engine_wide(row(1, "offline", 1, 1.0)).verdict.reasons == ("e1", "own")


# ---- edges found by mutation testing -----------------------------------------------------------
def test_best_latency_is_p90_first_and_throughput_counts_none_as_zero():
    rows = [row(1, "offline", 1, None, p90=3.0, mean=1.0), row(2, "offline", 1, 0.5, p90=2.0, mean=2.5)]
    best = PerformanceReport(rows=rows).best()
    assert best["latency"]["batch_size"] == 2 and best["throughput"]["batch_size"] == 2
    only = PerformanceReport(rows=[row(4, "server", 1, 7.0, mean=3.0)]).best()
    assert only["from_valid_rows"] is True and only["latency"]["mean_ms"] == 3.0


def test_collect_samples_takes_one_dimensional_inputs():
    (ids,) = collect_samples(Loader([(torch.arange(3), None), (torch.arange(3, 6), None)]), 5, 1e9)
    assert ids.tolist() == [0, 1, 2, 3, 4]


def test_make_pool_memory_of_one_byte_samples():
    samples = [torch.arange(10, dtype=torch.uint8)]
    assert len(make_pool(samples, 1, 3)) == 3
    assert len(make_pool(samples, 1, 2.5)) == 2


def test_row_record_bound_met_only_for_server_rows_with_a_p99():
    offline = record_of(scenario_run("offline", 662), CONFIG, QUIET, None)
    assert offline["latency_bound_ms"] is None and offline["latency_bound_met"] is None
    empty = record_of(scenario_run("server", 0), CONFIG, QUIET, None)
    assert empty["latency_bound_met"] is None and empty["latency_ms"]["p99"] is None


def test_references_are_copies_of_a_reused_output_buffer(monkeypatch):
    rig = Rig(monkeypatch)
    stage, _ = make_stage(rig, warmup=1)
    buffer = torch.zeros(2, 2)

    def reusing(inputs):  # writes every answer into the same tensor, as IO-bound engines do
        rig.clock.t += MS
        buffer.copy_(inputs[0] * 2.0)
        return [buffer], 0.0

    stage.rows_for(reusing, 2)
    test01 = rows_of(stage)[0]["accuracy_in_performance_mode"]
    assert test01["passed"] is True and test01["figures"]["compared"] >= 2


def test_outputs_without_clone_are_kept_as_they_are(monkeypatch):
    import numpy as np

    rig = Rig(monkeypatch)
    stage, _ = make_stage(rig, warmup=1)

    def numpy_engine(inputs):
        rig.clock.t += MS
        return [np.asarray(inputs[0] * 2.0)], 0.0

    stage.rows_for(numpy_engine, 2)
    assert rows_of(stage)[0]["accuracy_in_performance_mode"]["passed"] is True


def test_test01_uses_the_configured_tolerance_and_precision(monkeypatch):
    rig = Rig(monkeypatch)
    stage, _ = make_stage(rig, warmup=1, numeric_tolerance={"max_rel": 0.5, "mean_rel": 0.5})
    calls = itertools.count()

    def drifting(inputs):
        k = next(calls)
        rig.clock.t += MS
        return [inputs[0] * (1.0 if k < 3 else 1.01)], 0.0  # 1 % off under load: over fp32's default

    stage.rows_for(drifting, 2)
    test01 = rows_of(stage)[0]["accuracy_in_performance_mode"]
    assert test01["passed"] is True and test01["detail"].endswith(" of the RMS, fp32)")


def test_rows_log_every_reason(monkeypatch, caplog_loguru):
    rig = Rig(monkeypatch)
    stage, _ = make_stage(rig)
    stage.report.engine_reasons += ["first", "second"]
    stage.rows_for(rig.engine, 2)
    assert caplog_loguru[-1]["message"] == "performance bs=2 offline clients=1: 2000.00 qps, INVALID: first; second"


@pytest.mark.parametrize("bound", [3.0, 0.5])
def test_search_rows_carry_their_test01(monkeypatch, bound):
    rig = Rig(monkeypatch, cost_ns=MS)
    stage, _ = make_stage(rig, scenario=["server"], server_search=True, latency_bound_ms=bound, min_query_count=10)
    stage.rows_for(rig.engine, 2)
    (r,) = rows_of(stage)
    assert r["accuracy_in_performance_mode"]["passed"] is True
    assert r["accuracy_in_performance_mode"]["figures"]["compared"] >= 1


# ---- the one row constructor (tools/measure/rows.py), found by mutation testing -----------------
def test_latency_of_keeps_every_percentile_and_the_mean():
    stats = LatencyStats.from_ns([MS + 1000 * k for k in range(7000)])  # enough for p99.9
    block = latency_of(stats)
    assert None not in (block.p50, block.p90, block.p99, block.p99_9, block.mean)
    assert block == LatencyBlock(p50=stats.p50, p90=stats.p90, p99=stats.p99, p99_9=stats.p99_9, mean=stats.mean)
    assert latency_of(None) == LatencyBlock()


def test_performance_row_takes_its_figure_settle_config_window_and_generator():
    run = scenario_run("offline", 24, latency_ns=2 * MS, bs=4)  # its own rate: 2000 samples/s
    config = SimpleNamespace(**vars(CONFIG), precision=0.3)
    settled = Settle(seconds=1.5, queries=7, settled=True, block=3, last_change=0.01)
    row = performance_row(
        run,
        config,
        RowFigures(
            qps=1000.0,  # the generator's figure (LoadGen's), not the run's own
            latency=latency_of(None),
            latency_notes=[],
            contention=QUIET,
            verdict=Verdict(("a reason",)),
            latency_bound_met=None,
            accuracy_in_performance_mode=None,
            span=(1.0, 2.0),
            load_generator="mlperf",
            settled=settled,
            loadgen={"result_validity": "VALID"},
        ),
    )
    assert row.qps == 1000.0 and row.qps_ci95 == [1000.0, 1000.0]  # the interval is around the given figure
    assert (row.precision["target"], row.precision["settle_s"], row.precision["settle_queries"]) == (0.3, 1.5, 7)
    assert (row.started_at_unix, row.finished_at_unix, row.load_generator) == (1.0, 2.0, "mlperf")
    assert row.loadgen == {"result_validity": "VALID"} and row.verdict.reasons == ("a reason",)
    assert row.samples_per_query is None and "samples_per_query" not in row.to_json()


def test_a_multi_stream_row_says_its_samples_per_query():
    run = ScenarioRun(
        "multi_stream",
        2,
        1,
        24,
        24 * 8,
        0.048,
        [2 * MS] * 24,
        [2 * MS * (k + 1) for k in range(24)],
        0.0,
        "minimums met",
        samples_per_query=8,
    )
    row = row_record(run, CONFIG, QUIET, None)
    assert row.samples_per_query == 8 and row.to_json()["samples_per_query"] == 8
    assert row.window_qps == [8 / 0.002] * 3  # a query's samples over its time, not one batch's


def test_contention_not_judged_says_why():
    assert contention_not_judged(None) == (
        "contention: not judged (no reading of the other processes' CPU time on this machine)"
    )
    assert contention_not_judged(0.0) is None


def test_an_unusable_stage_has_no_pool_and_audits_off_is_said(monkeypatch):
    rig = Rig(monkeypatch)
    unusable = PerformanceStage(stage_config(), Loader([("text", None)]), rig.sync, "fp32")
    with pytest.raises(ValueError) as raised:
        unusable.pool(2)
    assert str(raised.value) == "no query pool: the data loader does not yield tensors (check usable first)"
    stage, _ = make_stage(rig, audits=False)
    assert stage.report.engine_not_judged == ["audits: not judged (audits: false in the case config)"]


def test_a_rows_settle_phase_cycles_the_pool_and_lands_in_its_row(monkeypatch):
    # On the rig's clock: 1-ms queries, so blocks of 250 (SETTLE_BLOCK_S / the first query), two alike
    rig = Rig(monkeypatch)
    monkeypatch.setattr(performance.time, "perf_counter_ns", rig.clock)
    stage, _ = make_stage(rig, scenario=["offline"], settle_max_s=5.0)
    pool = stage.pool(2)
    stage.rows_for(rig.engine, 2, pool)
    first_settle = 1 + 2  # one warm-up call, then one reference call per reference batch
    settle_calls = rig.calls[first_settle : first_settle + 500]
    assert [c[0] is pool[k % len(pool)][0] for k, c in enumerate(settle_calls)] == [True] * 500
    assert len(pool) > 2 and rig.calls[first_settle + 500][0] is not None  # then the row's own queries
    (row,) = rows_of(stage)
    precision = row["precision"]
    assert (precision["settle_queries"], precision["settle_block"], precision["settled"]) == (500, 250, True)
    assert precision["settle_s"] == 0.5 and precision["settle_change"] == 0.0


def test_a_multi_stream_row_runs_its_samples_per_query_under_its_target(monkeypatch):
    rig = Rig(monkeypatch)
    stage, _ = make_stage(rig, scenario=["multi_stream"], multi_stream_samples_per_query=8, precision=0.05)
    stage.rows_for(rig.engine, 2, stage.pool(2))
    (run,) = rig.runs
    assert run["samples_per_query"] == 8  # the config's 8 samples: 4 batches of 2 a query
    assert (
        run["target"] == performance.row_target(SCENARIOS["multi_stream"], stage.config) and run["target"] is not None
    )
    (row,) = rows_of(stage)
    assert row["samples_per_query"] == 8 and row["queries"] * 8 == row["samples"]
