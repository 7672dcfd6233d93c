"""How precise a measured figure is, when a measurement may stop, and whether it drifted.

Terms (defined here once; the reasoning and the measured figures are in docs/measurement.md):
  timeline   = the queries of one measured window on one clock: query i occupied
               [begin_ns[i], end_ns[i]] and carried samples[i]; the window is
               [0, span_ns]. A sequential loop's queries tile it (each begins where
               the previous ended); concurrent clients' queries overlap.
  block rate = the window cut into k blocks of equal length; a query's samples
               count in each block in proportion to the part of the query that
               falls in it (so a block is never judged by how many whole queries
               happen to end in it), divided by the block's length. The blocks'
               rates average to the window's throughput.
  interval   = the 95 % confidence interval of the window's throughput: the mean of
               the block rates (equal-length blocks make the ratio samples / time a
               plain mean of the rates) with an AR(1) long-run variance. The window
               is cut into fine blocks (about one query each, at most
               ``FINE_BLOCKS``); their lag-1 autocorrelation r is corrected for its
               small-sample bias (+(1 + 3r) / k) and raised by one standard error
               (``common.stats.honest_lag1``) (a short window that happens to look uncorrelated
               must not pass as independent); the variance of the mean is then
               s^2 / k x (1 + r) / (1 - r), and Student's t is taken at the
               effective number of independent blocks, k (1 - r) / (1 + r). Below
               ``MIN_EFFECTIVE_BLOCKS`` of them (or r >= ``MAX_LAG1``) there is no
               interval: the window is too short against its correlation time to
               say how precise it is ("± n/a"; the stop rule measures on).
  precision  = the interval's half-width over the figure (``±1.2%``). A measurement
               keeps issuing queries after its minimums until every judged figure
               is within its precision, or ``max_duration_s`` stops it (INVALID).
               ``precision: null`` asks for none: the measurement stops once its
               minimums are met ("minimums met"), its figures keep their intervals
               and nothing is judged on them (drift still is, on the intervals alone).
  settle     = before the measured window, queries run in blocks until a block's
               rate is within noise of the block before it (the rate stopped
               trending), bounded by ``settle_max_s``.
  drift      = the first and the last third of the window, each with its own
               interval: when their throughputs differ by more than both
               half-widths together, and by more than the precision asked for, the
               figure is drifting (INVALID).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Final, Sequence, TypeVar, cast

import numpy as np

from common.record import NOT_PRECISE, as_json
from common.stats import (
    MIN_SAMPLES_FOR_PERCENTILE,
    effective_size,
    honest_lag1,
    lag1,
    percentile,
    percentile_ci,
    relative_half_width,
    t975,
)
from contract.settings import MIN_QUERIES, MINIMUMS_MET, OUT_OF_REACH, PRECISION_REACHED

FINE_BLOCKS = 64  # the window is cut into about one block per query, at most this many
MIN_EFFECTIVE_BLOCKS = 3.0  # fewer effectively independent blocks: no interval
MAX_LAG1 = 0.97  # a corrected lag-1 at or above this: no interval (correlated across the whole window)
EXACT = 1e-9  # block rates whose spread is below this share of their mean are one rate (zero width)
CHECK_EVERY_S = 0.5  # the stop rule looks at the figures at most this often ...
CHECK_COST_SHARE = 0.02  # ... and spends at most this share of the time doing so
OUT_OF_REACH_FACTOR = 4.0  # stop early when reaching the precision would take this many times max_duration_s
OUT_OF_REACH_MIN_EFFECTIVE = 16.0  # ... judged only from intervals worth this many independent blocks
# (t's small-sample width is not the figure's)
SETTLE_BLOCK_S = 0.25  # a settle block lasts at least this long ...
SETTLE_MIN_BLOCK = 2  # ... and holds at least this many queries ...
SETTLE_MAX_BLOCK = 1024  # ... and at most this many
SETTLE_FLOOR = 0.03  # blocks within 3 % of each other have settled whatever the noise says
THIRD = 1 / 3
DRIFTING = "drifting: "  # how a drift reason begins (``drift_reason``)
T = TypeVar("T")


@dataclass(frozen=True)
class Timeline:
    begin_ns: np.ndarray
    end_ns: np.ndarray
    samples: np.ndarray
    span_ns: float

    @classmethod
    def tiled(
        cls, ends_ns: Sequence[float], samples: Sequence[float] | float, span_ns: float | None = None
    ) -> "Timeline":
        """Sequential queries: each began where the previous ended (the first at 0)."""
        end = np.asarray(ends_ns, dtype=np.float64)
        begin = np.concatenate(([0.0], end[:-1])) if len(end) else end
        return cls(
            begin,
            end,
            _samples(samples, len(end)),
            float(span_ns if span_ns is not None else (end[-1] if len(end) else 0.0)),
        )

    @classmethod
    def spans(
        cls,
        ends_ns: Sequence[float],
        durations_ns: Sequence[float],
        samples: Sequence[float] | float,
        span_ns: float | None = None,
    ) -> "Timeline":
        """Concurrent queries: each began its own duration before it ended (never before 0)."""
        end = np.asarray(ends_ns, dtype=np.float64)
        begin = np.maximum(end - np.asarray(durations_ns, dtype=np.float64), 0.0)
        return cls(
            begin,
            end,
            _samples(samples, len(end)),
            float(span_ns if span_ns is not None else (end.max() if len(end) else 0.0)),
        )

    @property
    def queries(self) -> int:
        return len(self.end_ns)

    def work_at(self, t: float) -> float:
        """Samples done by time ``t``: every query counts in proportion to the part of it before ``t``."""
        length = np.maximum(self.end_ns - self.begin_ns, 1e-9)
        return float(np.dot(self.samples, np.clip((t - self.begin_ns) / length, 0.0, 1.0)))

    def block_rates(self, blocks: int) -> np.ndarray:
        """Samples per second of each of ``blocks`` equal parts of the window (``work_at`` at every
        border, a few borders at a time against all queries)."""
        edges = np.linspace(0.0, self.span_ns, blocks + 1)
        length = np.maximum(self.end_ns - self.begin_ns, 1e-9)
        done = np.empty(blocks + 1)
        step = max(1, 1_000_000 // max(self.queries, 1))
        for i in range(0, blocks + 1, step):
            done[i : i + step] = np.clip((edges[i : i + step, None] - self.begin_ns) / length, 0.0, 1.0) @ self.samples
        return np.diff(done) / (self.span_ns / blocks) * 1e9

    def part(self, start_ns: float, stop_ns: float) -> "Timeline":
        """The window [start_ns, stop_ns] as a timeline of its own: queries clipped to it,
        their samples cut in proportion to the part of them inside it."""
        length = self.end_ns - self.begin_ns
        begin = np.clip(self.begin_ns, start_ns, stop_ns)
        end = np.clip(self.end_ns, start_ns, stop_ns)
        instant = ((self.end_ns > start_ns) & (self.end_ns <= stop_ns)).astype(np.float64)  # a query of no duration
        share = np.where(length > 0, (end - begin) / np.maximum(length, 1e-9), instant)
        keep = share > 0
        return Timeline(
            begin[keep] - start_ns, end[keep] - start_ns, self.samples[keep] * share[keep], float(stop_ns - start_ns)
        )


def _samples(samples: Sequence[float] | float, count: int) -> np.ndarray:
    if isinstance(samples, (int, float)):
        return np.full(count, float(samples))
    return np.asarray(samples, dtype=np.float64)


@dataclass(frozen=True)
class Interval:
    """A throughput's 95 % interval, in the timeline's samples per second."""

    value: float
    lo: float
    hi: float
    batches: int
    lag1: float
    effective: float = math.inf  # independent blocks the batches are worth (``effective_size``)

    @property
    def relative(self) -> float:
        return (self.hi - self.lo) / 2 / self.value if self.value > 0 else math.inf

    def around(self, figure: float | None) -> list[float] | None:
        """The same relative interval around the figure as reported (it may subtract foo_time the timeline does not)."""
        if figure is None or not self.value > 0:
            return None
        return [figure * self.lo / self.value, figure * self.hi / self.value]


def throughput_interval(timeline: Timeline) -> Interval | None:
    """The timeline's throughput with its 95 % interval (see the module docstring); None below
    ``MIN_QUERIES``, or when the blocks are worth fewer than ``MIN_EFFECTIVE_BLOCKS`` independent ones."""
    if timeline.queries < MIN_QUERIES or not timeline.span_ns > 0:
        return None
    blocks = min(timeline.queries, FINE_BLOCKS)
    rates = timeline.block_rates(blocks)
    rho = float(lag1(cast(Sequence[float], rates)))  # an array of the block rates
    mean, spread = float(rates.mean()), float(rates.std(ddof=1))
    if spread <= EXACT * abs(mean):  # the same rate in every block, to rounding: its lag-1 is the rounding's
        return Interval(mean, mean, mean, blocks, rho, float(blocks))
    r = honest_lag1(rho, blocks)
    if r >= MAX_LAG1:
        return None
    independent = effective_size(blocks, r)
    if independent < MIN_EFFECTIVE_BLOCKS:
        return None
    half = t975(max(int(independent) - 1, 1)) * spread * math.sqrt((1 + r) / (1 - r) / blocks)
    return Interval(mean, mean - half, mean + half, blocks, rho, independent)


# ---- what must be precise, and the stop rule -------------------------------------------------
@dataclass(frozen=True)
class Target:
    """The figures a measurement judges and how precise each must be (fractions, e.g. 0.02)."""

    throughput: tuple[str, ...] = ("qps",)  # throughput figures judged
    precision: float | None = 0.02  # None: no precision asked (stop at the minimums, judge nothing)
    percentile: str | None = None  # the headline percentile judged (single_stream p90, server p99)
    latency_precision: float | None = None  # the percentile's own precision; None: ``precision``
    check_every_s: float = CHECK_EVERY_S

    def limit(self, figure: str) -> float | None:
        if figure == self.percentile and self.latency_precision is not None and self.precision is not None:
            return self.latency_precision
        return self.precision

    def required(self, figure: str) -> float:
        """``limit`` of a figure judged against a precision (one is asked: ``precision`` is not None)."""
        limit = self.limit(figure)
        if limit is None:
            raise ValueError(f"{figure}: no precision asked")
        return limit


@dataclass
class Figures:
    """What one measured window gives: each figure's value, interval and relative half-width."""

    throughput: dict[str, Interval | None] = field(default_factory=dict)
    percentile: dict[str, tuple[float | None, list[float] | None]] = field(default_factory=dict)
    timeless: list[str] = field(
        default_factory=list
    )  # throughputs whose clock never moved: null, and nothing to wait for
    unjudged: list[str] = field(
        default_factory=list
    )  # throughputs whose thirds cannot yet say whether the window drifted (``drift`` is None)

    def widths(self) -> dict[str, float | None]:
        out: dict[str, float | None] = {name: (iv.relative if iv else None) for name, iv in self.throughput.items()}
        out.update({name: relative_half_width(value, ci) for name, (value, ci) in self.percentile.items()})
        return out


def measure_figures(
    target: Target, timelines: dict[str, Timeline], latencies_ns: Sequence[float] | None = None
) -> Figures:
    """Each judged figure's interval: throughputs from their timelines, the headline percentile from the latencies."""
    # A throughput whose clock never moved (every call's foo_time covered it) is null: no more queries can help.
    timeless = [
        name for name in target.throughput if not timelines[name].span_ns > 0 and timelines[name].queries >= MIN_QUERIES
    ]
    figures = Figures(
        {name: throughput_interval(timelines[name]) for name in target.throughput if name not in timeless},
        timeless=timeless,
    )
    if target.precision is not None:  # the stop rule waits for these too: a window too short to judge its drift
        figures.unjudged = [name for name in figures.throughput if drift(timelines[name], target.precision) is None]
    if target.percentile is not None:
        q, need = MIN_SAMPLES_FOR_PERCENTILE[target.percentile]
        ordered: list[float] = list(latencies_ns or ())
        values = sorted(ordered) if len(ordered) >= need else []
        if values:
            figures.percentile[target.percentile] = (
                float(percentile(values, q)),
                percentile_ci(ordered, values, q, need),
            )
        else:
            figures.percentile[target.percentile] = (None, None)
    return figures


def imprecise(target: Target, figures: Figures) -> dict[str, float | None]:
    """The judged figures not (yet) within their precision: name -> relative half-width (None: no interval yet).
    Nothing when no precision is asked."""
    if target.precision is None:
        return {}
    return {name: width for name, width in figures.widths().items() if width is None or width > target.required(name)}


def needed_s(width: float, limit: float, elapsed_s: float) -> float:
    """How long the measurement would have to run for ``width`` to shrink to ``limit``, at the
    1 / sqrt(time) rate of a mean over independent batches."""
    return elapsed_s * (width / limit) ** 2


class StopRule:
    """Once the minimums are met, asks "is every judged figure precise, and can each judged
    throughput's drift be judged?" at most every ``check_every_s`` of the measurement's own clock
    (at once again while an interval or a drift cannot be judged yet), never spending more than
    ``CHECK_COST_SHARE`` of the time on the question. It also gives up early when a figure
    could not reach its precision within ``OUT_OF_REACH_FACTOR`` x ``max_s`` (waiting for
    the cap would only cost time: the figure is invalid either way)."""

    def __init__(
        self, target: Target, clock: Callable[[], int] = time.perf_counter_ns, max_s: float = math.inf
    ) -> None:
        self.target = target
        self.clock = clock
        self.max_s = max_s
        self.next_ns: int | None = None
        self.checks = 0

    def decide(self, now_ns: int, elapsed_ns: int, measure: Callable[[], Figures]) -> str | None:
        """PRECISION_REACHED, OUT_OF_REACH, MINIMUMS_MET (no precision asked), or None (go on)."""
        if self.target.precision is None:
            return MINIMUMS_MET
        if self.next_ns is not None and now_ns < self.next_ns:
            return None
        self.checks += 1
        started = self.clock()
        figures = measure()
        missing = imprecise(self.target, figures)
        cost = self.clock() - started
        if None in missing.values() or (not missing and figures.unjudged):
            # no interval yet (too few queries, or a window short against its correlation), or precise but a third
            # still too short to say whether the window drifted: look again as soon as the look's cost allows
            self.next_ns = now_ns + int(cost / CHECK_COST_SHARE) if cost > 0 else None
            return None
        self.next_ns = now_ns + max(int(self.target.check_every_s * 1e9), int(cost / CHECK_COST_SHARE))
        if not missing:
            return PRECISION_REACHED
        if any(
            (iv := figures.throughput.get(name)) is not None and iv.effective < OUT_OF_REACH_MIN_EFFECTIVE
            for name in missing
        ):
            return None  # too few independent blocks to extrapolate a throughput's width from
        elapsed_s = elapsed_ns / 1e9
        widths = {
            name: width for name, width in missing.items() if width is not None
        }  # all of them: None returned above
        if any(
            needed_s(width, self.target.required(name), elapsed_s) > OUT_OF_REACH_FACTOR * self.max_s
            for name, width in widths.items()
        ):
            return OUT_OF_REACH
        return None


def precision_reasons(
    target: Target, figures: Figures, drifts: dict[str, "Drift | None"], elapsed_s: float, stop: str | None = None
) -> list[str]:
    """One "not precise enough" sentence per judged figure that missed its precision (saying how
    long it would have needed when the stop rule gave up early), one "drifting" sentence per
    throughput whose first and last thirds disagree."""
    reasons = [f"{NOT_PRECISE}{name} took no measurable time" for name in figures.timeless]
    for name, width in imprecise(target, figures).items():
        limit = f"precision {target.required(name) * 100:g}%"
        if width is None:
            need = MIN_QUERIES if name in figures.throughput else MIN_SAMPLES_FOR_PERCENTILE[name][1]
            more = "more if correlated"
            reasons.append(
                f"{NOT_PRECISE}{name} has no interval after {elapsed_s:.3g} s "
                f"(it needs at least {need} queries, {more}; {limit})"
            )
        else:
            early = (
                f"; out of reach: about {needed_s(width, target.required(name), elapsed_s):.3g} s needed"
                if stop == OUT_OF_REACH
                else ""
            )
            reasons.append(f"{NOT_PRECISE}{name} ±{width:.1%} after {elapsed_s:.3g} s ({limit}{early})")
    return reasons + [reason for name, found in drifts.items() if (reason := drift_reason(name, found))]


# ---- drift -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Drift:
    change: float  # (last third - first third) / first third
    first: Interval | None  # None: the third is too short against its correlation for an interval
    last: Interval | None
    drifting: bool

    def to_dict(self) -> dict:
        return {
            "change": self.change,
            "first_third": [self.first.lo, self.first.hi] if self.first else None,
            "last_third": [self.last.lo, self.last.hi] if self.last else None,
            "drifting": self.drifting,
        }


def _rate(part: Timeline) -> float:
    return float(part.samples.sum()) / part.span_ns * 1e9 if part.span_ns > 0 else 0.0


def drift(timeline: Timeline, precision: float | None) -> Drift | None:
    """Compare the first and last third of the window. Drifting needs both a gap wider than the
    thirds' half-widths together and a change over ``precision``, so a change within ``precision``
    between thirds of ``MIN_QUERIES`` queries each is no drift even where a third is too correlated
    for an interval of its own. None (not judged) when that cannot be said: a third has fewer
    queries, or it has no interval and the change exceeds ``precision`` (or none is asked: then the
    thirds' intervals alone decide)."""
    third = timeline.span_ns * THIRD
    parts = timeline.part(0.0, third), timeline.part(timeline.span_ns - third, timeline.span_ns)
    first, last = (throughput_interval(part) for part in parts)
    if first is None or last is None:
        before, after = (_rate(part) for part in parts)
        if min(part.queries for part in parts) < MIN_QUERIES or not before > 0:
            return None
        change = (after - before) / before
        return Drift(change, first, last, False) if precision and abs(change) <= precision else None
    if not first.value > 0:
        return None
    gap = abs(last.value - first.value)
    allowed = (first.hi - first.lo) / 2 + (last.hi - last.lo) / 2
    change = (last.value - first.value) / first.value
    return Drift(change, first, last, gap > allowed and abs(change) > (precision or 0.0))


def drifting(block: dict | None) -> dict[str, float]:
    """The figures a ``precision`` block (``precision_block``) says drifted: name -> change."""
    return {
        name: found["change"]
        for name, found in ((block or {}).get("drift") or {}).items()
        if found and found.get("drifting")
    }


def measured_once_more_on_drift(
    measure: Callable[[], T],
    block_of: Callable[[T], dict | None],
    reasons_of: Callable[[T], list[str]],
    discard: Callable[[T], None] = lambda first: None,
    only_drift: bool = False,
) -> T:
    """Run ``measure()``; when its window drifted, run it once more and keep the second window.

    A rate can step mid-window (a virtual machine's neighbour stops, a frequency changes); the
    window after the step is then the measurement a careful person would take. A rate that keeps
    changing (a leak, ongoing throttling) drifts in the second window too and stays INVALID. The
    second window's ``precision`` block keeps the first one's drift and reasons as ``remeasured``;
    ``discard(first)`` is called before the second window starts. ``only_drift``: measure once more
    only where drift is the first window's every reason (one INVALID anyway, by contention or an
    imprecise figure, keeps its window: a second would cost its time and change nothing).
    """
    first = measure()
    moved = drifting(block_of(first))
    if not moved or (only_drift and not all(reason.startswith(DRIFTING) for reason in reasons_of(first))):
        return first
    discard(first)
    second = measure()
    block = block_of(second)
    if block is not None:
        block["remeasured"] = {"drift": moved, "reasons": list(reasons_of(first))}
    return second


def drift_reason(name: str, found: Drift | None) -> str | None:
    if found is None or not found.drifting:
        return None
    way = "fell" if found.change < 0 else "rose"
    return f"{DRIFTING}{name} {way} {abs(found.change):.0%} from the first to the last third"


# ---- settle ----------------------------------------------------------------------------------
@dataclass
class Settle:
    seconds: float = 0.0
    queries: int = 0
    settled: bool = True
    block: int = 0  # queries per compared block
    last_change: float | None = None  # rate change between the last two blocks

    def to_dict(self) -> dict:
        return as_json(self, _SETTLE_KEYS)


_SETTLE_KEYS: Final = (  # Settle's keys in a row's precision block: (key, attribute)
    ("settle_s", "seconds"),
    ("settle_queries", "queries"),
    ("settled", "settled"),
    ("settle_block", "block"),
    ("settle_change", "last_change"),
)


def _block_noise(durations: Sequence[int]) -> float:
    """Relative standard error of a block's mean query time."""
    n = len(durations)
    mean = sum(durations) / n
    if n < 2 or mean <= 0:
        return 0.0
    var = sum((d - mean) ** 2 for d in durations) / (n - 1)
    return math.sqrt(var / n) / mean


def settled(durations: Sequence[int], block: int) -> tuple[bool, float | None]:
    """Whether the last ``block`` query times are within noise of the ``block`` before them,
    and the rate change between the two (None before there are two blocks)."""
    if block < 1 or len(durations) < 2 * block:
        return False, None
    previous, latest = durations[-2 * block : -block], durations[-block:]
    rate_previous, rate_latest = block / max(sum(previous), 1), block / max(sum(latest), 1)
    change = rate_latest / rate_previous - 1
    noise = 2 * math.sqrt(_block_noise(previous) ** 2 + _block_noise(latest) ** 2)
    return abs(change) <= max(SETTLE_FLOOR, noise), change


def settle(call: Callable[[], int], clock: Callable[[], int], max_s: float) -> Settle:
    """Run ``call()`` (one query; returns its duration in ns) until the rate stops trending or ``max_s`` passes.

    Blocks hold ``SETTLE_MIN_BLOCK`` queries, or as many as fill ``SETTLE_BLOCK_S``
    at the first query's pace; with ``max_s`` 0 nothing runs.
    """
    result = Settle()
    if not max_s > 0:
        return result
    durations: list[int] = []
    start = clock()
    limit = int(max_s * 1e9)
    while True:
        durations.append(call())
        if result.block == 0:
            result.block = min(
                SETTLE_MAX_BLOCK, max(SETTLE_MIN_BLOCK, math.ceil(SETTLE_BLOCK_S * 1e9 / max(durations[0], 1)))
            )
        if len(durations) % result.block == 0:  # consecutive blocks, compared as each one ends
            done, result.last_change = settled(durations, result.block)
            if done:
                break
        if clock() - start >= limit:
            result.settled = False
            break
    result.seconds = (clock() - start) / 1e9
    result.queries = len(durations)
    return result


# ---- the result's record -----------------------------------------------------------------------
METHOD = (
    "mean of equal-time blocks with an AR(1) long-run variance (lag-1 bias-corrected and raised one standard error), "
    "Student t at the effective number of blocks; percentiles: binomial order statistics at the effective sample size, "
    "widened by block percentiles"
)


def precision_block(
    target: Target, figures: Figures, settled: Settle, drifts: dict[str, Drift | None], checks: int, stop: str
) -> dict:
    """The ``precision`` block of a phase or performance row (docs/result_schema.md)."""
    widths = figures.widths()
    known = [w for w in widths.values() if w is not None]
    batches = {name: iv.batches for name, iv in figures.throughput.items() if iv}
    return {
        "target": target.precision,
        "latency_target": target.limit(target.percentile) if target.percentile else None,
        "achieved": max(known) if known and len(known) == len(widths) else None,
        "figures": widths,
        "method": METHOD,
        "batches": batches,
        "lag1": {name: iv.lag1 for name, iv in figures.throughput.items() if iv},
        "stop_reason": stop,
        "checks": checks,
        **settled.to_dict(),
        "drift": {name: (found.to_dict() if found else None) for name, found in drifts.items()},
    }
