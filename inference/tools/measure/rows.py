"""What a performance row judges, and its intervals: one definition for both load generators,
InferPerf's own (stage.py) and MLPerf LoadGen (loadgen.py), which both import it from here.

``row_target`` names the figures a row is judged on (docs/measurement.md, "The stop rule"),
``row_intervals`` writes its ``qps_ci95``, ``latency_ci95`` and ``precision`` block
(docs/result_schema.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from common.scenario import Scenario, scenario
from common.stats import LatencyStats
from tools.measure.precision import Settle, Target, drift, measure_figures, precision_block, throughput_interval
from tools.measure.settings import MEASUREMENT_DEFAULTS

if TYPE_CHECKING:
    from tools.measure.scenarios import ScenarioRun

PERCENTILES = ("p50", "p90", "p99", "p99_9")


def row_setting(config: Any, key: str) -> Any:
    """A measurement key of the config, or its framework default (a FlagPerf-style config may lack it)."""
    return getattr(config, key, MEASUREMENT_DEFAULTS[key])


def row_target(name: str | Scenario, config: Any) -> Target:
    """What a row judges: its throughput where its scenario judges one (not server's: the arrival
    schedule sets it, and LoadGen judges server on latency alone) and its scenario's headline percentile."""
    chosen = scenario(name)
    return Target(
        throughput=("qps",) if chosen.judges_throughput else (),
        precision=None if row_setting(config, "precision") is None else float(row_setting(config, "precision")),
        percentile=chosen.headline,
        latency_precision=row_setting(config, "latency_precision"),
    )


def row_intervals(run: ScenarioRun, config: Any, settled: Settle | None = None, qps: float | None = None) -> dict:
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
