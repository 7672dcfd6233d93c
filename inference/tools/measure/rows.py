"""What a performance row judges, and its intervals: one definition for both load generators,
InferPerf's own (stage.py) and MLPerf LoadGen (loadgen.py), which both import it from here.

``row_target`` names the figures a row is judged on (docs/measurement.md, "The stop rule"),
``row_intervals`` writes its ``qps_ci95``, ``latency_ci95`` and ``precision`` block
(docs/result_schema.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from common.record import LatencyBlock, PerformanceRow
from common.record import Verdict as RecordedVerdict
from common.scenario import Scenario, scenario
from common.stats import LatencyStats
from contract.config import CaseConfig, CaseView, setting
from tools.measure.precision import Settle, Target, drift, measure_figures, precision_block, throughput_interval
from tools.measure.verdict import window_throughputs

if TYPE_CHECKING:
    from contract.phase import ContentionReading
    from tools.measure.scenarios import ScenarioRun

PERCENTILES = ("p50", "p90", "p99", "p99_9")


def row_target(name: str | Scenario, config: CaseView) -> Target:
    """What a row judges: its throughput where its scenario judges one (not server's: the arrival
    schedule sets it, and LoadGen judges server on latency alone) and its scenario's headline percentile."""
    chosen = scenario(name)
    return Target(
        throughput=("qps",) if chosen.judges_throughput else (),
        precision=None if setting(config, "precision") is None else float(setting(config, "precision")),
        percentile=chosen.headline,
        latency_precision=setting(config, "latency_precision"),
    )


def row_intervals(run: ScenarioRun, config: CaseView, settled: Settle | None = None, qps: float | None = None) -> dict:
    """A row's ``qps_ci95`` (around ``qps``, the row's figure: the run's own when None), ``latency_ci95``
    and ``precision`` block, from the run's query timings (docs/result_schema.md)."""
    target = row_target(run.scenario, config)
    timeline = run.timeline()
    figures = measure_figures(target, {"qps": timeline}, run.latencies_ns)
    drifts = {"qps": drift(timeline, target.precision)} if target.throughput else {}
    interval = throughput_interval(timeline)
    stats = LatencyStats.from_ns(run.latencies_ns)
    return {
        "qps_ci95": interval.around(run.qps if qps is None else qps) if interval else None,
        "latency_ci95": {name: stats.ci95.get(name) for name in PERCENTILES} if stats else dict.fromkeys(PERCENTILES),
        "precision": precision_block(target, figures, settled or Settle(), drifts, run.checks, run.stop_reason),
    }


def latency_of(stats: LatencyStats | None) -> LatencyBlock:
    """A row's latency block from its per-query timings (all None when there are none)."""
    if stats is None:
        return LatencyBlock()
    return LatencyBlock(p50=stats.p50, p90=stats.p90, p99=stats.p99, p99_9=stats.p99_9, mean=stats.mean)


def latency_bound(run: ScenarioRun, config: CaseConfig) -> float | None:
    """The latency bound a row is held to: its scenario's ``bound_key`` (server's
    ``latency_bound_ms``); None where it has none."""
    key = run.scenario.bound_key
    return getattr(config, key) if key is not None else None


@dataclass(frozen=True)
class RowFigures:
    """What a load generator measures its own way for one performance row: the figure, the latency and
    the verdict, with what judged them, and the window's span on the Unix clock."""

    qps: float | None
    latency: LatencyBlock
    latency_notes: list[str]
    contention: ContentionReading
    verdict: RecordedVerdict
    latency_bound_met: bool | None
    accuracy_in_performance_mode: dict | None
    span: tuple[float | None, float | None]
    load_generator: str
    server_search: dict | None = None
    settled: Settle | None = None
    loadgen: dict | None = None


def performance_row(run: ScenarioRun, config: CaseConfig, figures: RowFigures) -> PerformanceRow:
    """The one constructor of a performance row, for both load generators: what they share comes from
    the run; what each measures its own way (the figure, the latency, the verdict) is passed in."""
    qps, latency_notes, span = figures.qps, figures.latency_notes, figures.span
    intervals = row_intervals(run, config, figures.settled, qps=qps)
    return PerformanceRow(
        batch_size=run.batch_size,
        scenario=run.scenario.name,
        clients=run.clients,
        qps=qps,
        qps_ci95=intervals["qps_ci95"],
        queries=run.queries,
        samples=run.samples,
        duration_s=run.duration_s,
        latency_ms=figures.latency,
        latency_ci95=intervals["latency_ci95"],
        latency_notes=list(latency_notes),
        stop_reason=run.stop_reason,
        window_qps=window_throughputs(run.completions_ns, [run.samples_per_query] * run.queries),
        contention=figures.contention.to_dict(),
        target_qps=run.target_qps,
        issued_qps=run.issued_qps,
        latency_bound_ms=latency_bound(run, config),
        latency_bound_met=figures.latency_bound_met,
        server_search=figures.server_search,
        accuracy_in_performance_mode=figures.accuracy_in_performance_mode,
        precision=intervals["precision"],
        verdict=figures.verdict,
        started_at_unix=span[0],
        finished_at_unix=span[1],
        load_generator=figures.load_generator,
        loadgen=figures.loadgen,
        # A query of several batches (multi_stream) says how many samples it holds.
        samples_per_query=run.samples_per_query if run.scenario.samples_per_query_key is not None else None,
    )
