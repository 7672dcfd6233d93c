"""This host's between-run noise, learned from its history, per figure kind.

Two runs made at different times differ by more than either run's own interval says: the machine's
speed wanders between runs (docs/measurement.md, "Between runs"). How much is a fact of the host and
of the kind of figure, so it is learned from the history's series rather than assumed:

- **The estimate** is the pooled variance of the logs of a series' valid points within its
  segments (between its change points, ``changes.py``, so that a real step is not taken for
  noise): ``s² = Σ (x - segment mean)² / Σ (segment points - 1)``, with those degrees of freedom.
  One point's figure is a run's (its repetitions' geometric mean), so ``s`` is the spread of a
  run's figure between runs, its own window's noise included.
- **Where from.** A series with at least ``MIN_POINTS`` valid points gives its own. Otherwise the
  series of the same host fingerprint and figure kind (``KIND_OF``: throughput, median latency,
  tail latency, TTFT, TPOT, tokens/s) that have at least ``MIN_SERIES_POINTS`` points each are
  pooled, when they add up to at least ``MIN_POINTS - 1`` degrees of freedom; the source is said.
- **How many.** ``MIN_POINTS`` = 12 runs, 11 degrees of freedom. The false-alarm rate holds with any
  number (the t-quantile pays for an estimate from few runs), but the power does not: 12 is the fewest
  runs learned for which a 10 % drop between two single runs on a host whose runs spread 2 % is
  called in at least 90 % of trials, the interval included (``bench/history_calibration.py``;
  docs/measurement.md, "Decisions across time", has the table).

``compare`` between runs made at different times takes each side's noise from here
(``utils/results/compare.py``); a figure whose host has too little history is not decided.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

from utils.history.changes import breaks
from utils.history.store import Point, Series

MIN_POINTS = 12
MIN_SERIES_POINTS = 4
KIND_OF = {
    "core qps": "throughput",
    "qps": "throughput",
    "requests/s": "throughput",
    "goodput requests/s": "throughput",
    "p50 ms": "latency",
    "p90 ms": "tail latency",
    "p99 ms": "tail latency",
    "E2E p90 ms": "tail latency",
    "TTFT p50 ms": "TTFT",
    "TTFT p90 ms": "TTFT",
    "TPOT p50 ms": "TPOT",
    "output tokens/s": "tokens/s",
}


@dataclass(frozen=True)
class Noise:
    """The spread of one run's figure between runs (the standard deviation of its log, about its CV),
    the degrees of freedom of that estimate, and where it came from."""

    cv: float
    df: int
    source: str


def pooled(segments: Iterable[Sequence[float]]) -> tuple[float, int]:
    """(Σ squared deviations from each segment's mean, Σ (segment size - 1))."""
    ss, df = 0.0, 0
    for seg in segments:
        if len(seg) < 2:
            continue
        mean = sum(seg) / len(seg)
        ss += sum((x - mean) ** 2 for x in seg)
        df += len(seg) - 1
    return ss, df


def segments(points: Sequence[Point]) -> list[list[float]]:
    """The logs of a series' valid points, cut at its change points."""
    logs = [math.log(p.value) for p in points if p.valid and p.value > 0]
    bounds = [0, *breaks(logs), len(logs)]
    return [logs[a:b] for a, b in zip(bounds, bounds[1:])]


class NoiseModel:
    """The noise of every series in a history (module docstring), learned once from its points."""

    def __init__(self, history: dict[Series, Sequence[Point]], exclude_runs: Iterable[str] = ()) -> None:
        excluded = set(exclude_runs)
        self._own: dict[str, tuple[float, int]] = {}
        self._count: dict[str, int] = {}
        self._kind: dict[tuple[str, str], list[tuple[float, int]]] = {}
        for series, points in history.items():
            kept = [p for p in points if p.run_key not in excluded]
            ss, df = pooled(segments(kept))
            self._own[series.key.digest] = (ss, df)
            self._count[series.key.digest] = sum(p.valid for p in kept)
            if df + 1 >= MIN_SERIES_POINTS:
                self._kind.setdefault((series.key.fingerprint, kind_of(series.key.figure)), []).append((ss, df))

    def of(self, series: Series) -> Noise | None:
        """The series' own noise, else its host's and figure kind's pooled one; None: too little history."""
        ss, df = self._own.get(series.key.digest, (0.0, 0))
        if df + 1 >= MIN_POINTS:
            return Noise(math.sqrt(ss / df), df, f"this series, {df + 1} runs")
        kind = kind_of(series.key.figure)
        pool = self._kind.get((series.key.fingerprint, kind), [])
        ss_all, df_all = sum(s for s, _ in pool), sum(d for _, d in pool)
        if df_all + 1 >= MIN_POINTS:
            return Noise(math.sqrt(ss_all / df_all), df_all, f"{kind} on this host, {len(pool)} series pooled")
        return None

    def points_of(self, series: Series) -> int:
        """How many valid runs the series has (for the 'too little history' line)."""
        return self._count.get(series.key.digest, 0)


def kind_of(figure: str) -> str:
    """A figure's kind: ``KIND_OF``'s, a base-tier rate's unit (``FLOP/s``, ``B/s``), else its own name."""
    if figure in KIND_OF:
        return KIND_OF[figure]
    return figure.rsplit(" ", 1)[-1] if figure.endswith(("FLOP/s", "B/s")) else figure
