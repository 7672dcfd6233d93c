"""The measurement's vocabulary, defined once: the stop reasons, the framework defaults of the
measurement keys, and "a query's latency minus the engine's foo_time" (the scenarios are
records in ``common/scenario.py``).

Imported by the config (to validate), the timing loop, the scenarios and the
progress lines; it imports nothing of the project, so no import circle can
pass through it.
"""

from __future__ import annotations

from typing import Any

# Why a measured loop stopped (``stop_reason``).
MINIMUMS_MET = "minimums met"  # the minimums are met and nothing more was asked (LoadGen's rows)
PRECISION_REACHED = "precision reached"  # the minimums are met and every judged figure is within its precision
MAX_DURATION_REACHED = "max_duration_s reached"
OUT_OF_REACH = "precision out of reach"  # a judged figure could not reach its precision before max_duration_s

# The measurement keys' framework defaults: configs that lack them keep
# working, and FlagPerf-style configs without these attributes get the same.
# Why these values: docs/measurement.md.
MEASUREMENT_DEFAULTS: dict[str, Any] = {
    "warmup": 2,  # untimed calls on the first batch before each measured phase
    "min_query_count": 64,  # enough queries for a measured p90 (LoadGen's floor)
    "min_duration_s": 2.0,  # of measured wall time, per phase and per performance row
    "max_duration_s": 60.0,  # wall-clock cap per phase or row: hitting it before the minimums or the
    # precision makes it invalid
    "contention_limit": 0.10,  # share of the benchmark's CPUs other processes may use
    "precision": 0.02,  # 95 % half-width / figure every judged figure must reach
    "latency_precision": None,  # the headline percentile's own precision; None: precision
    "settle_max_s": 10.0,  # the settle phase before a measured window stops trending or ends here
}

MIN_QUERIES = 16  # no interval from fewer queries, whatever their correlation

# The framework validation pass (step 3) is information, not judged (docs/measurement.md,
# "What is judged"): FlagPerf's rule, ``repeat`` passes after the warm-up and nothing more.
VALIDATION_PASS: dict[str, Any] = {"precision": None, "min_query_count": 1, "min_duration_s": 0.0, "settle_max_s": 0.0}


def minus_foo(elapsed_ns: int, foo_s: float) -> tuple[int, int]:
    """A query's latency without the engine's declared foo_time, and that foo_time, in whole ns.

    ``foo_time`` (seconds, from ``engine(inputs) -> (outputs, foo_time)``) is time the
    engine spent in the call on work unrelated to inference; a latency never goes below 0.
    """
    if not foo_s:
        return elapsed_ns, 0
    foo_ns = int(foo_s * 1e9)
    return max(elapsed_ns - foo_ns, 0), foo_ns
