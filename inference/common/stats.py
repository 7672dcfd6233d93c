"""Latency statistics computed the same way for every phase, scenario and engine.

A percentile is reported only from enough samples to be a measurement rather
than an extrapolation (MLPerf LoadGen's floors: 64 queries for p90, 662 for
p99). Below the floor it is ``None`` and ``notes`` says why: a table must
never show a p99 taken from four batches.

Every reported percentile carries its 95 % confidence interval (``ci95``), a
distribution-free order-statistic interval: of n independent latencies, the
number below the population's q-quantile is Binomial(n, q), so the sorted
sample's values at two ranks chosen from that binomial's tails bracket the
quantile with probability at least 95 %, whatever the latency distribution
(``percentile_ranks``). Latencies are not independent on a real machine (a slow
second follows a slow second), and that interval assumes they are; so below
``CORRELATED_BELOW`` queries the ranks are taken at the latencies' effective sample size, n (1 - r) / (1 + r), with r
the
lag-1 autocorrelation of their ranks in the order they ran, corrected for its
small-sample bias and raised one standard error (``honest_lag1``): too few
effective samples for a bounded interval and there is none (None: "± n/a").
Where the queries fill at least ``BATCHED_MIN_BLOCKS`` consecutive blocks, the
interval is also widened to the batched one when that is wider: each block's own
percentile, Student's t over their spread (batch means for a quantile,
``batched_half_width``).
The Student-t quantile used by the throughput intervals (``tools.measure.precision``)
is here too.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import asdict, dataclass, field
from typing import Sequence

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


CONFIDENCE = 0.95
# Student's t 97.5 % quantiles for 1..30 degrees of freedom (two-sided 95 %).
_T975 = (
    12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
    2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
    2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
)  # fmt: skip


def t975(df: int) -> float:
    """Student's t 97.5 % quantile: the table up to 30 degrees of freedom, then the
    Cornish-Fisher expansion in 1/df (within 0.001 of the exact value from 31 on)."""
    if df < 1:
        raise ValueError(f"t975: degrees of freedom must be >= 1, got {df!r}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def _log_binomial_pmf(n: int, p: float, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * math.log(p) + (n - k) * math.log1p(-p)


def percentile_ranks(n: int, q: float, confidence: float = CONFIDENCE) -> tuple[int, int] | None:
    """0-based ranks (lo, hi) of a sorted sample of ``n`` whose values bracket the
    population's ``q``-th percentile with probability >= ``confidence``; None when
    ``n`` is too small for a bounded interval.

    B, the count of observations below the quantile, is Binomial(n, q/100). The
    interval [x(lo), x(hi)] (0-based) misses the quantile when B <= lo or B > hi;
    each tail is held to (1 - confidence) / 2 by summing the exact binomial
    probabilities outward from the mean (terms beyond 12 standard deviations,
    below 1e-30, are left out).
    """
    p = q / 100.0
    if n < 1 or not 0.0 < p < 1.0:
        return None
    tail = (1.0 - confidence) / 2
    reach = int(12 * math.sqrt(n * p * (1 - p))) + 12
    centre = int(n * p)
    lo_k, hi_k = max(0, centre - reach), min(n, centre + reach)
    pmf = {k: math.exp(_log_binomial_pmf(n, p, k)) for k in range(lo_k, hi_k + 1)}
    below = 0.0  # P(B <= k)
    lo = None
    for k in range(lo_k, hi_k + 1):
        below += pmf[k]
        if below > tail:
            break
        lo = k  # P(B <= k) <= tail: x(k) (0-based) is a lower bound
    above = 0.0  # P(B >= k)
    hi = None
    for k in range(hi_k, lo_k - 1, -1):
        above += pmf[k]
        if above > tail:
            break
        hi = k - 1  # P(B >= k) <= tail: x(k - 1) (0-based) is an upper bound
    if lo is None or hi is None or hi > n - 1 or lo > hi:
        return None
    return lo, hi


LAG1_UPPER_SD = 1.0  # a lag-1 estimate is raised by this many of its standard errors (honest_lag1)


def lag1(values: Sequence[float]) -> float:
    """Lag-1 autocorrelation of a series (0 for a constant one)."""
    n = len(values)
    if n < 2:
        return 0.0
    mean = sum(values) / n
    centred = [v - mean for v in values]
    denominator = sum(c * c for c in centred)
    return sum(a * b for a, b in zip(centred, centred[1:])) / denominator if denominator > 0 else 0.0


def honest_lag1(r: float, count: int) -> float:
    """The lag-1 autocorrelation an interval assumes, from ``r`` measured over ``count`` values:
    r + (1 + 3r) / n (the sample lag-1's bias under AR(1), Marriott and Pope), raised by
    ``LAG1_UPPER_SD`` standard errors sqrt((1 - r^2) / n), never below 0. A short series that
    happens to look uncorrelated must not pass for an independent one."""
    corrected = max(r + (1 + 3 * r) / count, 0.0)
    return corrected + LAG1_UPPER_SD * math.sqrt(max(1 - corrected**2, 0.0) / count)


def effective_size(count: int, r: float) -> float:
    """How many independent values ``count`` AR(1)-correlated ones (lag-1 ``r``) are worth."""
    return count * (1 - r) / (1 + r) if r < 1 else 0.0


def _ranks(values: Sequence[float]) -> list[int]:
    """Each value's rank in the sample (ties share the lowest), in the values' own order."""
    ordered = sorted(values)
    return [bisect_left(ordered, v) for v in values]


def correlated_ranks(ordered: Sequence[float], q: float, confidence: float = CONFIDENCE) -> tuple[int, int] | None:
    """``percentile_ranks`` for latencies in the order they ran, at their effective sample size:
    the binomial ranks of ``effective_size`` samples, carried to the same quantile levels of all
    ``len(ordered)``; None when the effective sample is too small for a bounded interval."""
    n = len(ordered)
    if n < 2:
        return percentile_ranks(n, q, confidence)
    m = int(effective_size(n, honest_lag1(lag1(_ranks(ordered)), n)))
    ranks = percentile_ranks(min(m, n), q, confidence)
    if ranks is None or m >= n:
        return ranks
    lo = math.floor(ranks[0] * n / m)
    hi = math.ceil((ranks[1] + 1) * n / m) - 1
    return (lo, hi) if hi <= n - 1 else None


def percentile_interval(sorted_values: list[float], q: float, confidence: float = CONFIDENCE) -> list[float] | None:
    """[lo, hi] bracketing the population's ``q``-th percentile (``percentile_ranks``), or None."""
    ranks = percentile_ranks(len(sorted_values), q, confidence)
    if ranks is None:
        return None
    return [sorted_values[ranks[0]], sorted_values[ranks[1]]]


CORRELATED_BELOW = (
    512  # below this many queries (8 blocks of p90's floor) the ranks are taken at the effective sample size
)
BATCHED_MIN_BLOCKS = 8  # fewer blocks than this: the order-statistic interval alone
BATCHED_MAX_BLOCKS = 32
BLOCK_MIN_QUERIES = 16  # a block holds at least this many queries, and at least the percentile's floor


def batched_half_width(ordered: Sequence[float], q: float, need: int) -> float | None:
    """Half-width of the ``q``-th percentile's 95 % interval from consecutive blocks of the
    latencies in the order the queries ran: each block's percentile, Student's t over their
    spread. The blocks' spread carries the correlation between neighbouring queries that the
    order-statistic interval leaves out. None when fewer than ``BATCHED_MIN_BLOCKS`` blocks of
    ``max(need, BLOCK_MIN_QUERIES)`` queries fit; the queries after the last whole block are left out."""
    blocks = min(BATCHED_MAX_BLOCKS, len(ordered) // max(need, BLOCK_MIN_QUERIES))
    if blocks < BATCHED_MIN_BLOCKS:
        return None
    size = len(ordered) // blocks
    points = [percentile(sorted(ordered[i * size : (i + 1) * size]), q) for i in range(blocks)]
    mean = sum(points) / blocks
    spread = math.sqrt(sum((p - mean) ** 2 for p in points) / (blocks - 1))
    return t975(blocks - 1) * spread / math.sqrt(blocks)


def percentile_ci(ordered: Sequence[float], sorted_values: list[float], q: float, need: int) -> list[float] | None:
    """The reported interval of the ``q``-th percentile: the order-statistic interval (below
    ``CORRELATED_BELOW`` queries at the latencies' effective sample size, ``correlated_ranks``),
    widened to the batched one around the percentile where that reaches further. None when the
    effective sample is too small for a bounded interval: the percentile is shown, its ``±`` is "n/a"."""
    ranks = correlated_ranks(ordered, q) if len(ordered) < CORRELATED_BELOW else percentile_ranks(len(sorted_values), q)
    interval = None if ranks is None else [sorted_values[ranks[0]], sorted_values[ranks[1]]]
    half = batched_half_width(ordered, q, need)
    if interval is None or half is None:
        return interval
    point = percentile(sorted_values, q)
    return [min(interval[0], point - half), max(interval[1], point + half)]


def relative_half_width(value: float | None, interval: list[float] | tuple[float, float] | None) -> float | None:
    """Half the interval's width over the figure: the ``±`` a table shows (None when either is unknown)."""
    if value is None or interval is None or not value > 0:
        return None
    return (interval[1] - interval[0]) / 2 / value


def enough_for(name: str, count: int) -> bool:
    return count >= MIN_SAMPLES_FOR_PERCENTILE[name][1]


def too_few_note(name: str, count: int) -> str:
    need = MIN_SAMPLES_FOR_PERCENTILE[name][1]
    return f"{name} needs at least {need} queries, got {count}"


@dataclass
class LatencyStats:
    """Per-query latency in milliseconds (a query is one engine call on one batch).

    ``cv`` (coefficient of variation) is information only: single calls on a
    CPU are long-tailed even for a no-op, so precision is judged on the
    intervals of the reported figures (``tools.measure.precision``), not on this.
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
    # Each reported percentile's 95 % interval [lo, hi] in ms (None beside a None percentile).
    ci95: dict[str, list[float] | None] = field(default_factory=dict)

    @classmethod
    def from_ns(cls, samples_ns: list[int]) -> "LatencyStats | None":
        if not samples_ns:
            return None
        ordered = [ns / 1e6 for ns in samples_ns]
        values = sorted(ordered)
        n = len(values)
        mean = sum(values) / n
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / n)
        points: dict[str, float | None] = {}
        intervals: dict[str, list[float] | None] = {}
        notes: list[str] = []
        for name, (q, need) in MIN_SAMPLES_FOR_PERCENTILE.items():
            if enough_for(name, n):
                points[name] = percentile(values, q)
                intervals[name] = percentile_ci(ordered, values, q, need)
            else:
                points[name] = intervals[name] = None
                notes.append(too_few_note(name, n))
        return cls(
            count=n,
            mean=mean,
            min=values[0],
            max=values[-1],
            std=std,
            cv=std / mean if mean > 0 else 0.0,
            notes=notes,
            ci95=intervals,
            **points,
        )

    def to_dict(self) -> dict:
        """The ``latency_ms`` block; the intervals go beside it (``latency_ci95``)."""
        data = asdict(self)
        del data["ci95"]
        return data


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both latency (lower) and
    throughput (higher), ordered by latency: the throughput-latency frontier."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front, best = [], float("-inf")
    for i in order:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return front
