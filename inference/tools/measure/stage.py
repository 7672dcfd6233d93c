"""The performance stage: after the FlagPerf inference pass, drive the engine
LoadGen-style and check that what it computes is right.

Order, for the compiled engine:
  1. query pool  samples from the case's data loader, held in memory (LoadGen's
                 performance sample set), re-cut into batches of each swept batch
                 size (tiled when the data set is smaller than a batch); data
                 loading is never inside a measured window;
  2. numeric     engine vs framework model on the same pool batches (``tools.checks.numeric``);
  3. audits      anti-caching (``tools.checks.audit``) on the base batch size;
  4. rows        one row per batch size x scenario x clients (``tools.measure.scenarios``),
                 each after a settle phase on the pool and measured until its judged
                 figures are precise (``tools.measure.precision``: what its scenario
                 judges, ``common.scenario``), with its contention reading,
                 intervals, throughput windows, per-query latency percentiles and
                 verdict; accuracy-in-performance-mode
                 (MLPerf TEST01) compares outputs sampled under load with untimed
                 accuracy-mode outputs of the same pool batches.
Numeric and anti-caching failures are engine-wide: they invalidate every engine
figure, the FlagPerf inference pass included.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from loguru import logger

from common.record import PerformanceRow
from common.scenario import OFFLINE, SERVER, scenario
from common.stats import LatencyStats
from contract.config import CaseConfig, query_samples, setting
from contract.phase import Verdict
from contract.settings import minus_foo
from tools.measure.contention import CpuContention
from tools.measure.loop import as_input_list
from tools.measure.precision import (
    Settle,
    drift,
    measure_figures,
    measured_once_more_on_drift,
    precision_reasons,
    settle,
)
from tools.measure.rows import RowFigures, latency_bound, latency_of, performance_row, row_target
from tools.measure.scenarios import ScenarioRun, ScenarioSpec, run_scenario, server_search
from tools.measure.verdict import window_verdict

POOL_BATCHES = 8  # distinct batches per batch size, memory permitting
REFERENCE_BATCHES = 2  # pool batches whose outputs are checked under load (TEST01)
AUDIT_BUDGET_S = 2.0

EngineStep = Callable[[list], "tuple[list, float]"]


@dataclass
class PerformanceReport:
    rows: list[PerformanceRow] = field(default_factory=list)
    numeric: dict | None = None
    audits: list[dict] = field(default_factory=list)
    engine_reasons: list[str] = field(default_factory=list)  # invalidate every engine figure
    engine_not_judged: list[str] = field(default_factory=list)  # engine-wide checks that did not run, with why
    notes: list[str] = field(default_factory=list)
    # Each row's raw per-query latencies, in row order: written to latencies.npz, not result.json.
    raw_latencies_ns: list[list[int]] = field(default_factory=list, repr=False)

    def best(self) -> dict | None:
        """The best-throughput and best-latency rows (valid ones when there are any)."""
        if not self.rows:
            return None
        candidates = [r for r in self.rows if r.verdict.valid] or self.rows
        by_qps = max(candidates, key=lambda r: r.qps or 0.0)

        def latency(row: PerformanceRow) -> float:
            lat = row.latency_ms
            value = lat.p90 if lat.p90 is not None else lat.mean
            return float("inf") if value is None else value

        by_latency = min(candidates, key=latency)

        def identity(row: PerformanceRow) -> dict:
            return {"batch_size": row.batch_size, "scenario": row.scenario, "clients": row.clients}

        return {
            "from_valid_rows": bool(candidates) and candidates[0].verdict.valid,
            "throughput": {**identity(by_qps), "qps": by_qps.qps},
            "latency": {
                **identity(by_latency),
                "p90_ms": by_latency.latency_ms.p90,
                "mean_ms": by_latency.latency_ms.mean,
            },
        }

    def to_dict(self) -> dict:
        """What result.json takes from the stage (``tools.results.result.build_result``); ``rows`` typed."""
        return {
            "rows": self.rows,
            "numeric": self.numeric,
            "audits": self.audits,
            "best": self.best(),
            "notes": self.notes,
        }


# ---- the query pool -----------------------------------------------------------
def collect_samples(dataloader: Any, wanted: int, max_bytes: float) -> list | None:
    """Up to ``wanted`` samples (and about ``max_bytes``) from the loader, as one
    tensor per model input with the samples along dimension 0; None when the
    loader does not yield tensors."""
    import torch

    parts: list[list] = []
    count = size = 0
    for x, _ in dataloader:
        inputs = as_input_list(x)
        if not inputs or not all(isinstance(t, torch.Tensor) and t.dim() > 0 for t in inputs):
            return None
        parts.append(inputs)
        count += inputs[0].shape[0]
        size += sum(t.element_size() * t.nelement() for t in inputs)
        if count >= wanted or size >= max_bytes:
            break
    if not parts:
        return None
    return [torch.cat([p[i] for p in parts])[:wanted] for i in range(len(parts[0]))]


def make_pool(samples: list, batch_size: int, max_bytes: float, batches: int = POOL_BATCHES) -> list[list]:
    """Cut the samples into at most ``batches`` full batches of ``batch_size``,
    repeating samples when there are fewer than one batch's worth."""

    available = samples[0].shape[0]
    per_sample = sum(t.element_size() * t.nelement() for t in samples) / max(available, 1)
    by_memory = int(max_bytes // max(per_sample * batch_size, 1))
    count = max(1, min(batches, available // batch_size, by_memory))
    needed = count * batch_size
    if available < needed:
        repeats = -(-needed // available)
        samples = [t.repeat(repeats, *([1] * (t.dim() - 1))) for t in samples]
    return [[t[i * batch_size : (i + 1) * batch_size].contiguous() for t in samples] for i in range(count)]


# ---- rows ------------------------------------------------------------------------


def judge_row(
    run: ScenarioRun, stats: LatencyStats | None, config: CaseConfig, contention, latency_bound_ms: float | None
) -> Verdict:
    target = row_target(run.scenario, config)
    timeline = run.timeline()
    figures = measure_figures(target, {"qps": timeline}, run.latencies_ns)
    drifts = {"qps": drift(timeline, target.precision)} if target.throughput else {}
    seconds = run.duration_s + run.foo_time_s / run.clients
    verdict = window_verdict(
        run.queries,
        run.duration_s,
        (config.min_query_count, config.min_duration_s),
        precision_reasons(target, figures, drifts, seconds, run.stop_reason),
        drifts,
        contention,
        config.contention_limit,
    )
    # A headline percentile with too few queries (below its floor) has no interval: precision_reasons said so.
    headline = run.scenario.headline
    measured = getattr(stats, headline) if stats is not None and headline is not None else None
    if run.scenario.bound_key is not None and latency_bound_ms is not None and measured is not None:
        if measured > latency_bound_ms:
            verdict.add(f"{headline} latency {measured:.3g} ms exceeds {run.scenario.bound_key} {latency_bound_ms:g}")
    return verdict


def row_record(
    run: ScenarioRun,
    config: CaseConfig,
    contention,
    test01: dict | None,
    search: dict | None = None,
    settled: Settle | None = None,
    span: tuple[float | None, float | None] = (None, None),
) -> PerformanceRow:
    stats = LatencyStats.from_ns(run.latencies_ns)
    bound = latency_bound(run, config)
    verdict = judge_row(run, stats, config, contention, bound)
    if test01 and test01.get("passed") is False:
        verdict.add(test01["detail"])
    return performance_row(
        run,
        config,
        RowFigures(
            qps=run.qps,
            latency=latency_of(stats),
            latency_notes=stats.notes if stats else [],
            contention=contention,
            verdict=verdict.record(),
            latency_bound_met=None if bound is None or stats is None or stats.p99 is None else stats.p99 <= bound,
            accuracy_in_performance_mode=test01,
            span=span,
            load_generator="inferperf",
            server_search=search,
            settled=settled,
        ),
    )


def _clone(outputs: list) -> list:
    return [t.clone() if hasattr(t, "clone") else t for t in outputs]


class PerformanceStage:
    """Runs steps 1-4 of the module docstring for one compiled engine."""

    def __init__(self, config: CaseConfig, dataloader: Any, sync: Callable[[], None], precision: str) -> None:
        self.config = config
        self.sync = sync
        self.precision = precision
        self.max_bytes = float(config.pool_max_mb) * 2**20
        wanted = max(*config.batch_sizes, config.batch_size) * POOL_BATCHES
        self.samples = collect_samples(dataloader, wanted, self.max_bytes)
        self.report = PerformanceReport()
        if not config.audits:
            self.report.engine_not_judged.append("audits: not judged (audits: false in the case config)")
        self._spans: dict[int, tuple[float, float]] = {}  # id(ScenarioRun) -> wall-clock (time.time) window
        self._settles: dict[int, Settle] = {}  # id(ScenarioRun) -> its settle phase

    @property
    def usable(self) -> bool:
        return self.samples is not None

    def pool(self, batch_size: int) -> list[list]:
        if self.samples is None:
            raise ValueError("no query pool: the data loader does not yield tensors (check usable first)")
        return make_pool(self.samples, batch_size, self.max_bytes)

    # -- 2. numeric ---------------------------------------------------------------
    def numeric_check(self, engine: EngineStep, framework: EngineStep | None, pool: list[list]) -> None:
        from contract.tolerances import tolerances_for
        from tools.checks.numeric import compare_outputs

        if framework is None:
            self.report.notes.append("numeric check skipped: no framework model (no_validation: true)")
            return
        batches = pool[: self.config.numeric_batches]
        try:
            reference = [framework(list(b))[0] for b in batches]
        except Exception as exc:  # a case whose model cannot be called like this is a harness limit, not a verdict
            self.report.notes.append(
                f"numeric check skipped: the framework model could not be called on the pool: {exc}"
            )
            return
        actual = [engine(list(b))[0] for b in batches]
        self.sync()
        tolerances = tolerances_for(self.precision, self.config.numeric_tolerance)
        report = compare_outputs(reference, actual, self.precision, tolerances)
        self.report.numeric = report.to_dict()
        self.report.engine_reasons.extend(report.reasons)
        logger.info(
            "numeric check: "
            + ("passed" if report.passed else "FAILED")
            + " "
            + ", ".join(f"{d.name} max_rel {d.max_rel:.2e}" for d in report.outputs)
        )

    # -- 3. audits ------------------------------------------------------------------
    def anti_caching(self, engine: EngineStep, pool: list[list]) -> None:
        from tools.checks.audit import anti_caching_audit

        result = anti_caching_audit(engine, pool, sync=self.sync, budget_s=AUDIT_BUDGET_S)
        self.report.audits.append(result.to_dict())
        if result.passed is False:
            self.report.engine_reasons.append(result.detail)
        logger.info(result.detail)

    # -- 4. rows ----------------------------------------------------------------------
    def rows_for(self, engine: EngineStep, batch_size: int, pool: list[list] | None = None) -> None:
        config = self.config
        pool = pool or self.pool(batch_size)
        for _ in range(max(1, config.warmup)):
            engine(list(pool[0]))
        self.sync()
        references = {}
        if config.audits:
            for index in range(min(REFERENCE_BATCHES, len(pool))):
                references[index] = _clone(engine(list(pool[index]))[0])
            self.sync()
        for chosen in map(scenario, config.scenario):
            for clients in [1] if chosen.one_query_at_a_time else config.clients:
                if chosen.scheduled and config.server_search:
                    row = self._search_row(engine, pool, batch_size, clients, references)
                else:
                    row = self._row(engine, pool, batch_size, chosen.name, clients, references, config.target_qps)
                self.report.rows.append(row)
                qps = f"{row.qps:.2f}" if row.qps is not None else "n/a"
                state = "valid" if row.verdict.valid else "INVALID: " + "; ".join(row.verdict.reasons)
                logger.info(f"performance bs={batch_size} {chosen.name} clients={clients}: {qps} qps, {state}")

    def _run(self, engine, pool, batch_size, name, clients, references, target_qps) -> tuple[ScenarioRun, Any]:
        config = self.config
        chosen = scenario(name)
        settled = self._settle(engine, pool)
        contention = CpuContention(str(config.device)).start()
        started_unix = time.time()
        run = run_scenario(
            engine,
            pool,
            ScenarioSpec(
                scenario=chosen,
                batch_size=batch_size,
                clients=clients,
                samples_per_query=chosen.samples_per_query(query_samples(config, chosen), batch_size),
                min_query_count=chosen.min_query_count(config.min_query_count),
                min_duration_s=config.min_duration_s,
                max_duration_s=config.max_duration_s,
                target_qps=target_qps,
                seed=config.seed,
                sync=self.sync,
                sample_pool_indices=frozenset(references),
                target=row_target(chosen, config),
            ),
        )
        self._spans[id(run)] = (started_unix, time.time())
        self._settles[id(run)] = settled
        return run, contention.stop()

    def _settle(self, engine: EngineStep, pool: list[list]) -> Settle:
        """The settle phase before a row: back to back over the pool until the rate stops trending."""
        count = [0]
        clock = time.perf_counter_ns

        def one_query() -> int:
            batch = pool[count[0] % len(pool)]
            count[0] += 1
            t0 = clock()
            _, foo = engine(list(batch))
            self.sync()
            return minus_foo(clock() - t0, foo)[0]

        return settle(one_query, clock, float(setting(self.config, "settle_max_s")))

    def test01(self, run: ScenarioRun, references: dict) -> dict | None:
        """LoadGen's TEST01 on the row's sampled outputs: the same answers as the references under load."""
        if not references:
            return None
        from contract.tolerances import tolerances_for
        from tools.checks.audit import accuracy_in_performance_mode

        tolerances = tolerances_for(self.precision, self.config.numeric_tolerance)
        return accuracy_in_performance_mode(run.sampled_outputs, references, self.precision, tolerances).to_dict()

    def _record(self, run: ScenarioRun, contention, test01: dict | None, search: dict | None = None) -> PerformanceRow:
        """row_record with the run's wall-clock window; keeps its raw latencies (once per row, in row order)."""
        row = row_record(
            run,
            self.config,
            contention,
            test01,
            search,
            self._settles.get(id(run)),
            self._spans.get(id(run), (None, None)),
        )
        self.report.raw_latencies_ns.append(list(run.latencies_ns))
        return row

    def _row(self, engine, pool, batch_size, name, clients, references, target_qps) -> PerformanceRow:
        if setting(self.config, "load_generator") == "mlperf":  # MLPerf LoadGen issues this row's queries
            from tools.measure.loadgen import loadgen_row

            return self._engine_wide(loadgen_row(self, engine, pool, batch_size, name, clients, references, target_qps))

        def measure() -> PerformanceRow:
            run, contention = self._run(engine, pool, batch_size, name, clients, references, target_qps)
            return self._record(run, contention, self.test01(run, references))

        def discard(first: PerformanceRow) -> None:
            logger.info(
                f"performance bs={batch_size} {name} clients={clients} drifted "
                f"({'; '.join(first.verdict.reasons)}): measuring it once more"
            )
            self.report.raw_latencies_ns.pop()  # one raw latency list per row kept, in row order

        return self._engine_wide(
            measured_once_more_on_drift(
                measure, lambda row: row.precision, lambda row: list(row.verdict.reasons), discard
            )
        )

    def _engine_wide(self, row: PerformanceRow, reason: str | None = None) -> PerformanceRow:
        """Add a row's own late reason and the engine-wide ones to its verdict."""
        return replace(row, verdict=Verdict.of(row.verdict).add(reason).extend(self.report.engine_reasons).record())

    def _search_row(self, engine, pool, batch_size, clients, references) -> PerformanceRow:
        """server_search: the highest target_qps whose p99 meets latency_bound_ms,
        bisecting below the offline throughput at the same batch size and clients."""
        config = self.config
        ceiling, _ = self._run(engine, pool, batch_size, OFFLINE.name, clients, {}, None)
        contention_of: dict[int, Any] = {}
        runs: list[ScenarioRun] = []

        def run_at(qps: float) -> ScenarioRun:
            run, reading = self._run(engine, pool, batch_size, SERVER.name, clients, references, qps)
            contention_of[id(run)] = reading
            runs.append(run)
            return run

        def p99(run: ScenarioRun) -> float | None:
            stats = LatencyStats.from_ns(run.latencies_ns)
            return stats.p99 if stats else None

        assert config.latency_bound_ms is not None  # required where a scenario is server (CaseConfig)
        found = server_search(
            run_at, upper_qps=ceiling.qps or 1.0, latency_bound_ms=config.latency_bound_ms, p99_ms=p99
        )
        search = {
            "upper_qps": ceiling.qps,
            "trials": [{"target_qps": t, "p99_ms": p, "met": m} for t, p, m in found.trials],
        }
        if found.best is None:
            last = runs[-1]
            row = self._record(last, contention_of[id(last)], self.test01(last, references), search)
            return self._engine_wide(
                row,
                f"server_search: no target_qps down to {found.trials[-1][0]:.3g} "
                f"met latency_bound_ms {config.latency_bound_ms:g}",
            )
        best = found.best
        return self._engine_wide(self._record(best, contention_of[id(best)], self.test01(best, references), search))
