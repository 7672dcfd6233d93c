"""A scenario run of known latencies, and the config and quiet contention reading that judge it."""

from __future__ import annotations

from types import SimpleNamespace

from tests.infra.clocks import MS
from tools.measure.contention import ContentionReading
from tools.measure.scenarios import ScenarioRun


# ---- judging rows -------------------------------------------------------------------------------
def scenario_run(scenario, queries, latency_ns=MS, bs=2, duration_s=None, target=None):
    completions = [latency_ns * (k + 1) for k in range(queries)]
    duration = queries * latency_ns / 1e9 if duration_s is None else duration_s
    return ScenarioRun(
        scenario,
        bs,
        1,
        queries,
        queries * bs,
        duration,
        [latency_ns] * queries,
        completions,
        0.0,
        "minimums met",
        target_qps=target,
        issued_qps=(target and target * 0.9),
    )


CONFIG = SimpleNamespace(min_query_count=24, min_duration_s=0.0, contention_limit=0.1, latency_bound_ms=5.0)


QUIET = ContentionReading(0.0, 2, 1.0, None)
