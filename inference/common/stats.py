"""Latency statistics computed the same way for every phase, scenario and engine.

A percentile is reported only from enough samples to be a measurement rather
than an extrapolation (MLPerf LoadGen's floors: 64 queries for p90, 662 for
p99). Below the floor it is ``None`` and ``notes`` says why: a table must
never show a p99 taken from four batches.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

# Minimum samples for each reported percentile. p90 and p99 are LoadGen's
# published floors; p99.9 scales p99's by ten, as LoadGen's floors scale with
# 1 / (1 - q). p50 needs two samples to be a median of anything.
MIN_SAMPLES_FOR_PERCENTILE: dict[str, tuple[float, int]] = {
    "p50": (50.0, 2),
    "p90": (90.0, 64),
    "p99": (99.0, 662),
    "p99_9": (99.9, 6620),
}


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method) of pre-sorted data."""
    if not sorted_values:
        raise ValueError("percentile of an empty sample")
    rank = (len(sorted_values) - 1) * q / 100.0
    low = math.floor(rank)
    high = math.ceil(rank)
    if low == high:
        return sorted_values[low]
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (rank - low)


def enough_for(name: str, count: int) -> bool:
    return count >= MIN_SAMPLES_FOR_PERCENTILE[name][1]


def too_few_note(name: str, count: int) -> str:
    need = MIN_SAMPLES_FOR_PERCENTILE[name][1]
    return f"{name} needs at least {need} queries, got {count}"


@dataclass
class LatencyStats:
    """Per-query latency in milliseconds (a query is one engine call on one batch).

    ``cv`` (coefficient of variation) is information only: single calls on a
    CPU are long-tailed even for a no-op, so stability is judged on throughput
    over windows (``tools.measure.verdict``), not on this.
    """

    count: int
    mean: float
    min: float
    max: float
    std: float
    cv: float
    p50: float | None
    p90: float | None
    p99: float | None
    p99_9: float | None
    notes: list[str] = field(default_factory=list)

    @classmethod
    def from_ns(cls, samples_ns: list[int]) -> "LatencyStats | None":
        if not samples_ns:
            return None
        values = sorted(ns / 1e6 for ns in samples_ns)
        n = len(values)
        mean = sum(values) / n
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / n)
        points: dict[str, float | None] = {}
        notes: list[str] = []
        for name, (q, _need) in MIN_SAMPLES_FOR_PERCENTILE.items():
            if enough_for(name, n):
                points[name] = percentile(values, q)
            else:
                points[name] = None
                notes.append(too_few_note(name, n))
        return cls(
            count=n,
            mean=mean,
            min=values[0],
            max=values[-1],
            std=std,
            cv=std / mean if mean > 0 else 0.0,
            notes=notes,
            **points,
        )

    def to_dict(self) -> dict:
        return asdict(self)
