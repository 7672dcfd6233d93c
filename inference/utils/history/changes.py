"""Change points of a series: where its level stepped, how far (with a 95 % interval), and what changed.

The detector is ruptures' PELT with the linear kernel (``KernelCPD(kernel="linear")``: the squared
deviations from each segment's mean, in ruptures' C implementation) on the figure's logs divided by
their robust spread, with the penalty ``PENALTY`` per change point. The spread is the median absolute
successive difference (× 1.4826 / √2): a step moves one difference only, so it barely moves the
spread it is judged against. A change point found this way is kept only if its two neighbouring
segments differ at 99.9 % (Welch's t on the logs), which drops the breaks that slow wandering of the
machine alone would cut. docs/measurement.md, "Decisions across time", has the detector's error rates: false
change points per 100 points on this machine's A/A series and on simulated ones, and the delay to
find a step.

Only valid points take part (an INVALID point's figure is disturbed by what its verdict names).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Sequence

PENALTY = 20.0  # per change point, on the standardised logs (docs/measurement.md, "Decisions across time")
MIN_SIZE = 2  # points on each side of a change
CONFIRM_P = 0.001  # the two segments' Welch t-test must reject "same level" at this two-sided p
MAD_TO_SD = 1.4826
# A spread of the logs below this is float rounding of a constant figure, not noise: scaled by it, the
# rounding would be cut into spurious levels (54 in 1 000 equal points), and slowly.
NO_SPREAD = 1e-9


def robust_spread(logs: Sequence[float]) -> float:
    """The standard deviation of one point's log, from the median absolute successive difference."""
    if len(logs) < 3:
        return 0.0
    diffs = sorted(abs(b - a) for a, b in zip(logs, logs[1:]))
    middle = len(diffs) // 2
    median = diffs[middle] if len(diffs) % 2 else (diffs[middle - 1] + diffs[middle]) / 2
    return MAD_TO_SD * median / math.sqrt(2)


def breaks(logs: Sequence[float], penalty: float = PENALTY) -> list[int]:
    """The indices where a new level starts (each the first point after a change), confirmed.
    Remembered per series: ``run.py history`` asks once for the noise and once for the changes."""
    return list(_breaks(tuple(logs), penalty))


@lru_cache(maxsize=256)
def _breaks(logs: tuple[float, ...], penalty: float) -> tuple[int, ...]:
    n = len(logs)
    if n < 2 * MIN_SIZE:
        return ()
    spread = robust_spread(logs)
    if spread <= NO_SPREAD:
        spread = _sd(logs) or 0.0
        if spread <= NO_SPREAD:  # a constant series (its logs differ by float rounding at most): no step
            return ()
    import numpy as np
    import ruptures

    signal = (np.asarray(logs, dtype=float) / spread).reshape(-1, 1)
    found = ruptures.KernelCPD(kernel="linear", min_size=MIN_SIZE).fit(signal).predict(pen=penalty)[:-1]
    return tuple(_confirmed(list(logs), [int(i) for i in found]))


def _confirmed(logs: list[float], found: list[int]) -> list[int]:
    """Drop, one at a time, the weakest break whose neighbouring segments do not differ at ``CONFIRM_P``."""
    kept = list(found)
    while kept:
        bounds = [0, *kept, len(logs)]
        pvalues = [
            _welch_p(logs[bounds[i] : bounds[i + 1]], logs[bounds[i + 1] : bounds[i + 2]]) for i in range(len(kept))
        ]
        worst = max(range(len(kept)), key=lambda i: pvalues[i])
        if pvalues[worst] <= CONFIRM_P:
            break
        kept.pop(worst)
    return kept


def _sd(values: Sequence[float]) -> float | None:
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def _welch_p(a: Sequence[float], b: Sequence[float]) -> float:
    from scipy.stats import ttest_ind

    if len(a) < 2 or len(b) < 2:
        return 1.0
    if (_sd(a) or 0.0) == 0 and (_sd(b) or 0.0) == 0:
        return 0.0 if sum(a) / len(a) != sum(b) / len(b) else 1.0
    return float(ttest_ind(a, b, equal_var=False).pvalue)


@dataclass(frozen=True)
class Change:
    """A change point: the first point of the new level, the ratio of the levels' geometric means
    (after / before) with its 95 % interval (Welch's, on the logs), whether it is worse for this
    figure, and what changed in software between the last point before and the first after."""

    index: int  # into the valid points
    at: str
    run_key: str
    ratio: float
    low: float
    high: float
    worse: bool
    changed: list[str] = field(default_factory=list)

    @property
    def change(self) -> float:
        return self.ratio - 1


def changes(points: Sequence[Any], higher_is_better: bool, penalty: float = PENALTY) -> list[Change]:
    """The change points of a series' valid points (``store.Point``s, oldest first)."""
    valid = [p for p in points if p.valid and p.value > 0]
    logs = [math.log(p.value) for p in valid]
    found = breaks(logs, penalty)
    bounds = [0, *found, len(logs)]
    out = []
    for i, index in enumerate(found):
        before, after = logs[bounds[i] : index], logs[index : bounds[i + 2]]
        d = sum(after) / len(after) - sum(before) / len(before)
        half = _welch_half(before, after)
        ratio = math.exp(d)
        worse = ratio < 1 if higher_is_better else ratio > 1
        out.append(
            Change(index, valid[index].at, valid[index].run_key, ratio, math.exp(d - half), math.exp(d + half), worse,
                   software_changes(valid[index - 1].software, valid[index].software))
        )  # fmt: skip
    return out


def _welch_half(a: Sequence[float], b: Sequence[float]) -> float:
    from utils.results.decide import t_quantile

    va, vb = (_sd(a) or 0.0) ** 2 / len(a), (_sd(b) or 0.0) ** 2 / len(b)
    if va + vb == 0:
        return 0.0
    terms = [(v, len(s) - 1) for v, s in ((va, a), (vb, b)) if len(s) > 1 and v > 0]
    df = (va + vb) ** 2 / sum(v**2 / k for v, k in terms) if terms else math.inf
    return t_quantile(df) * math.sqrt(va + vb)


def software_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """``onnxruntime 1.31.1 -> 1.32.0``, one per software fact that differs (packages by name)."""
    flat_a, flat_b = _flat(before), _flat(after)
    return [f"{key} {flat_a.get(key)} -> {flat_b.get(key)}" for key in sorted(set(flat_a) | set(flat_b))
            if flat_a.get(key) != flat_b.get(key)]  # fmt: skip


def _flat(software: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in (software or {}).items():
        if isinstance(value, dict):
            out.update(value)
        else:
            out[key] = value
    return out
