"""Latency statistics computed the same way for every phase and every engine."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

# MLPerf LoadGen's early-stopping minimums: fewer samples than this make the
# percentile an extrapolation rather than a measurement.
MIN_SAMPLES_FOR_PERCENTILE = {50: 2, 90: 64, 99: 662}
# trtexec flags a measurement as unstable above this coefficient of variation.
UNSTABLE_CV = 0.025


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


@dataclass
class LatencyStats:
    """Per-batch latency in milliseconds."""

    count: int
    mean: float
    min: float
    max: float
    p50: float
    p90: float
    p99: float
    std: float
    cv: float
    stable: bool
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def from_ns(cls, samples_ns: list[int]) -> "LatencyStats | None":
        if not samples_ns:
            return None
        values = sorted(ns / 1e6 for ns in samples_ns)
        n = len(values)
        mean = sum(values) / n
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / n)
        cv = std / mean if mean > 0 else 0.0
        warnings = [
            f"p{q} from {n} batches is an extrapolation (needs >= {need})"
            for q, need in MIN_SAMPLES_FOR_PERCENTILE.items()
            if n < need
        ]
        if cv > UNSTABLE_CV:
            warnings.append(f"unstable: coefficient of variation {cv:.1%} > {UNSTABLE_CV:.1%}")
        return cls(
            count=n,
            mean=mean,
            min=values[0],
            max=values[-1],
            p50=percentile(values, 50),
            p90=percentile(values, 90),
            p99=percentile(values, 99),
            std=std,
            cv=cv,
            stable=cv <= UNSTABLE_CV,
            warnings=warnings,
        )

    def to_dict(self) -> dict:
        return asdict(self)
