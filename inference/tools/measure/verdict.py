"""Validity verdicts, LoadGen-style: every measured figure says whether it can be trusted, and why not.

A verdict is ``{"valid": bool, "reasons": [sentence, ...]}``. The rules that
make a measurement invalid, each with its own reason:

- too few queries or too little measured time (``min_query_count``,
  ``min_duration_s``): the measured loop keeps issuing until both are met, so
  this happens only when ``max_duration_s`` stopped it first;
- not precise enough: a judged figure's 95 % interval is wider than
  ±``precision`` when ``max_duration_s`` stops the measurement, and drifting:
  the first and last thirds of the window disagree (``tools.measure.precision``);
- contention: other processes used more than ``contention_limit`` of the CPUs
  the benchmark may run on during the measured phase, or held a compute
  context on its GPU (``tools.measure.contention``);
- a scenario's headline percentile (single_stream p90, server p99) that has
  too few samples to be measured (``common.stats``), or a server run whose p99
  exceeds ``latency_bound_ms``;
- the numeric check or an audit failed (engine-wide: every engine figure).

The throughputs of consecutive windows of equal query count (perf_analyzer's
windows, ``window_qps``) are kept as information: on a 2-core CPU a window of
a few queries mostly measures how many queries happen to end in it, so they
judge nothing (docs/measurement.md).
"""

from __future__ import annotations

from typing import Iterable, Sequence

from contract.phase import ContentionReading, Verdict

MIN_WINDOWS = 3
MAX_WINDOWS = 10
MIN_QUERIES_PER_WINDOW = 8


def window_verdict(
    queries: int,
    seconds: float,
    minimums: tuple[int, float],
    precision: Iterable[str],
    drifts: dict,
    reading: ContentionReading,
    contention_limit: float,
) -> Verdict:
    """A measured window's verdict, in this order: too few queries or too short (``minimums``:
    min_query_count, min_duration_s), not precise or drifting (``precision``: its reasons), contended
    (the CPU reading over ``contention_limit``, a foreign GPU context); and what could not be
    judged (drift, contention). The phases, the rows and the LLM cells are all judged by it."""
    verdict = Verdict().extend(minimum_reasons(queries, seconds, *minimums)).extend(precision)
    verdict.add(contention_reason(reading.share, reading.cpus, contention_limit))
    verdict.add(accelerator_reason(reading.gpu_other_processes))
    return verdict.skip([*drift_not_judged(drifts), contention_not_judged(reading.share)])


def drift_not_judged(drifts: dict) -> list[str]:
    """A figure whose window was too short for an interval in each third: its drift was not judged."""
    return [
        f"drift of {name}: not judged (a third of the window is too short for its own interval)"
        for name, found in drifts.items()
        if found is None
    ]


def contention_not_judged(share: float | None) -> str | None:
    if share is not None:
        return None
    return "contention: not judged (no reading of the other processes' CPU time on this machine)"


def window_throughputs(elapsed_ns: Sequence[int], samples: Sequence[int]) -> list[float]:
    """Throughput (samples/s) of consecutive windows of equal query count (information only).

    ``elapsed_ns[i]`` is when query i completed, measured from the start of the
    measured window (for a sequential phase, the cumulative core time);
    ``samples[i]`` is its batch size. A window ends at its last query's
    completion and starts at the previous window's end, so the windows tile
    the measured time exactly and no query is counted twice.
    """
    n = len(elapsed_ns)
    count = min(MAX_WINDOWS, n // MIN_QUERIES_PER_WINDOW)
    if count < MIN_WINDOWS:
        return []
    bounds = [round(n * k / count) for k in range(count + 1)]
    rates = []
    previous_end = 0
    for lo, hi in zip(bounds, bounds[1:]):
        end = elapsed_ns[hi - 1]
        span = end - previous_end
        rates.append(sum(samples[lo:hi]) * 1e9 / span if span > 0 else float("inf"))
        previous_end = end
    return rates


def minimum_reasons(queries: int, duration_s: float, min_query_count: int, min_duration_s: float) -> list[str]:
    reasons = []
    if queries < min_query_count:
        reasons.append(f"too few queries: {queries} measured, min_query_count is {min_query_count}")
    if duration_s < min_duration_s:
        reasons.append(f"too short: {duration_s:.3g} s measured, min_duration_s is {min_duration_s:g}")
    return reasons


def contention_reason(share: float | None, cpus: int, limit: float) -> str | None:
    if share is None or share <= limit:
        return None
    return (
        f"contention: other processes used {share:.0%} of the {cpus} CPU(s) available to the benchmark "
        f"during the measured phase (limit {limit:.0%})"
    )


def accelerator_reason(other_processes: int | None) -> str | None:
    if not other_processes:
        return None
    return (
        f"contention: {other_processes} other process(es) held a compute context on the benchmark's GPU "
        "during the measured phase"
    )


def minimums_met(queries: int, elapsed_s: float, min_query_count: int, min_duration_s: float) -> bool:
    return queries >= min_query_count and elapsed_s >= min_duration_s
