"""Is B faster than A? One figure, decided across repetitions with a stated error rate.

A figure (core qps, a latency percentile, an LLM row's TTFT ...) is measured once per
repetition: a fresh process running the judged windows again (``run.py --repeat N``). Each
repetition also carries its window's own 95 % interval, which sees the noise inside that
window but not between runs (docs/measurement.md, "Between runs").

The decision (defined here once; ``compare`` and ``ab`` print it):

- **Scale.** Figures are compared as the ratio B/A on the log scale: a run that is 20 % slower
  is as far from A as one that is 25 % faster is from B, and the noise of throughput and
  latency is multiplicative.
- **Each side** is the mean of its repetitions' logs (the headline is its geometric mean). Repetitions
  of one run ran within the same few minutes and share those minutes' speed of the machine: three
  repetitions' t-interval held the session's figure in only 36 % of runs (docs/measurement.md,
  "Calibration"). So two runs made at different times (``run.py compare``) are decided with the
  **between-run noise of their series**, learned from the results history (``decide_between``;
  ``utils/history/noise.py``): the variance of the difference is ``cvA² + cvB²``, with the
  estimates' own degrees of freedom. With too little history the figure is not decided.
  ``--between-run-cv CV`` instead adds a constant ``CV²`` to each side's ``s² / n`` over its
  repetitions (``side``), with Welch-Satterthwaite degrees of freedom in which that term counts as
  exact; a side with **one** repetition then has its window's own variance
  (``(half-width / 1.96)²``) plus the term, as a normal term. The output marks such sides (``*``).
- **Paired (run.py ab).** Where repetition k of A and of B ran back to back (``run.py ab``,
  ABBA), ``decide(..., paired=True)`` uses the pairs' log ratios instead: a slow minute of the machine slows
  both sides of a pair, so it cancels; Student's t over the pairs, ``n - 1`` degrees of freedom.
- **The interval** of the ratio is Welch's: ``d ± t(ν) · sqrt(vA + vB)`` with the
  Welch-Satterthwaite ``ν``, exponentiated. At 95 % two-sided, two identical engines are
  called different in at most 5 % of comparisons (2.5 % "worse") when the repetitions are
  independent and their logs roughly normal.
- **The verdict** uses ``threshold`` as the smallest change that counts:

  ============================  ==============================================================
  worse / better                the interval excludes 1 and the change is beyond the threshold
  worse / better, below         the interval excludes 1, the change is within the threshold
  threshold
  inconclusive                  the interval includes 1 but reaches beyond the threshold on the
                                worse side: more repetitions would be needed to rule it out
  no detectable change          the interval includes 1 and stays within the threshold
  ============================  ==============================================================

  A regression (``compare`` exits 1) is "worse".

``BETWEEN_RUN_CV`` (16.5 %) is the spread of single runs of one engine that one session on a 2-core
machine measured (docs/measurement.md, "Calibration"); it is no default any more, only the value quoted
where ``--between-run-cv`` is explained: the history learns each host's own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

CONFIDENCE = 0.95
Z975 = 1.959964
BETWEEN_RUN_CV = 0.165  # one 2-core machine's, once (module docstring): an example for --between-run-cv

WORSE, BETTER = "worse", "better"
WORSE_BELOW, BETTER_BELOW = "worse, below threshold", "better, below threshold"
INCONCLUSIVE, NO_CHANGE = "inconclusive", "no detectable change"


@dataclass(frozen=True)
class Sample:
    """One repetition's figure: its value, its window's own 95 % interval (if measured), and
    whether its run judged it valid."""

    value: float
    interval: tuple[float, float] | None = None
    valid: bool = True


@dataclass(frozen=True)
class Side:
    """One run's figure on the log scale: the mean of its repetitions' logs, that mean's
    variance and degrees of freedom (``math.inf`` for a widened single repetition)."""

    n: int
    log_mean: float
    variance: float
    df: float
    between: float = 0.0  # the between-run term in the variance (a CV on the log scale)

    @property
    def widened(self) -> bool:
        """The side carries the between-run term: one repetition, or a run decided against another made
        at a different time (unpaired)."""
        return self.n == 1 or self.between > 0

    @property
    def headline(self) -> float:
        """The geometric mean of the repetitions."""
        return math.exp(self.log_mean)


def _log_half_width(sample: Sample) -> float:
    """The window's own half-width on the log scale (0 without an interval)."""
    if sample.interval is None or sample.value <= 0 or sample.interval[0] <= 0:
        return 0.0
    return (math.log(sample.interval[1]) - math.log(sample.interval[0])) / 2


def _logs(samples: Sequence[Sample]) -> list[float]:
    """The repetitions' values on the log scale; a ValueError unless each is positive and finite."""
    values = [s.value for s in samples]
    if not values or any(not (v > 0 and math.isfinite(v)) for v in values):
        raise ValueError(f"a figure needs positive, finite values, got {values!r}")
    return [math.log(v) for v in values]


def side(samples: Sequence[Sample], between_cv: float = BETWEEN_RUN_CV) -> Side:
    """One run's side of a figure (module docstring, "Each side"): with ``between_cv`` > 0, a run
    made at its own time, whose repetitions share the machine's speed of those minutes."""
    logs = _logs(samples)
    n = len(logs)
    mean = sum(logs) / n
    if n == 1:
        own = _log_half_width(samples[0]) / Z975
        return Side(1, mean, own**2 + between_cv**2, math.inf, between_cv)
    measured = sum((x - mean) ** 2 for x in logs) / (n - 1) / n
    variance = measured + between_cv**2
    # Satterthwaite: the between-run term is a constant (exact), only the repetitions' part is estimated
    df = math.inf if measured == 0 else variance**2 / (measured**2 / (n - 1))
    return Side(n, mean, variance, df, between_cv)


def decide_between(
    a: Sequence[Sample],
    b: Sequence[Sample],
    higher_is_better: bool,
    threshold: float,
    noise_a: tuple[float, float],
    noise_b: tuple[float, float],
    shared: bool = False,
    confidence: float = CONFIDENCE,
) -> Decision:
    """Two runs made at different times, each side's between-run noise ``(cv, df)`` learned from the
    results history (``utils/history/noise.py``): ``d = mean log B - mean log A`` with the variance
    ``cvA² + cvB²``, since one run's figure varies between runs by its host's spread whatever its
    repetitions. Welch-Satterthwaite degrees of freedom from the estimates' own; ``shared``: both
    sides took the same estimate (one series, or one pool), which then counts once."""
    d = sum(_logs(b)) / len(b) - sum(_logs(a)) / len(a)
    va, vb = noise_a[0] ** 2, noise_b[0] ** 2
    variance = va + vb
    if shared or va + vb == 0:
        df = noise_a[1]
    else:
        df = variance**2 / (va**2 / noise_a[1] + vb**2 / noise_b[1])
    half = t_quantile(df, confidence) * math.sqrt(variance)
    verdict = _verdict(d, d - half, d + half, higher_is_better, threshold)
    return Decision(math.exp(d), math.exp(d - half), math.exp(d + half), df, len(a), len(b), True, verdict)


def t_quantile(df: float, confidence: float = CONFIDENCE) -> float:
    """Student's t two-sided quantile for real-valued degrees of freedom (normal at infinity)."""
    if math.isinf(df):
        return Z975 if confidence == CONFIDENCE else _normal_quantile(confidence)
    from scipy.stats import t

    return float(t.ppf(0.5 + confidence / 2, df))


def _normal_quantile(confidence: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(0.5 + confidence / 2))


def welch_df(a: Side, b: Side) -> float:
    """The Welch-Satterthwaite degrees of freedom of ``vA + vB`` (a widened side's term is exact)."""
    total = a.variance + b.variance
    finite = sum(v**2 / df for v, df in ((a.variance, a.df), (b.variance, b.df)) if not math.isinf(df))
    if finite == 0:
        return math.inf
    return total**2 / finite


@dataclass(frozen=True)
class Decision:
    """B against A for one figure (module docstring)."""

    ratio: float  # B / A, geometric means
    low: float  # the ratio's 95 % interval
    high: float
    df: float
    n_a: int
    n_b: int
    widened: bool  # a side had one repetition: the between-run term was added
    verdict: str
    paired: bool = False  # decided on the pairs' log ratios (run.py ab)

    @property
    def change(self) -> float:
        return self.ratio - 1.0

    @property
    def regression(self) -> bool:
        return self.verdict == WORSE


def decide(
    a: Sequence[Sample],
    b: Sequence[Sample],
    higher_is_better: bool,
    threshold: float,
    between_cv: float = BETWEEN_RUN_CV,
    confidence: float = CONFIDENCE,
    paired: bool = False,
) -> Decision:
    """The ratio B/A of one figure with its interval, and the verdict at ``threshold`` (a fraction).

    ``paired`` (``run.py ab``): repetition k of A and of B ran next to each other (ABBA), so the
    machine's slow minutes fall on both and cancel in their ratio; the interval is then Student's
    on the mean of the pairs' log ratios (``n - 1`` degrees of freedom). With fewer than two pairs,
    or unequal counts (a repetition failed), the unpaired rule applies."""
    if paired and len(a) == len(b) >= 2:
        ratios = [y - x for x, y in zip(_logs(a), _logs(b))]
        n = len(ratios)
        d = sum(ratios) / n
        df: float = n - 1
        variance = sum((r - d) ** 2 for r in ratios) / (n - 1) / n
        n_a = n_b = n
        widened = False
    else:
        paired = False
        side_a, side_b = side(a, between_cv), side(b, between_cv)
        d = side_b.log_mean - side_a.log_mean
        df = welch_df(side_a, side_b)
        variance = side_a.variance + side_b.variance
        n_a, n_b, widened = side_a.n, side_b.n, side_a.widened or side_b.widened
    half = t_quantile(df, confidence) * math.sqrt(variance)
    verdict = _verdict(d, d - half, d + half, higher_is_better, threshold)
    return Decision(math.exp(d), math.exp(d - half), math.exp(d + half), df, n_a, n_b, widened, verdict, paired)


def _verdict(d: float, low: float, high: float, higher_is_better: bool, threshold: float) -> str:
    """The verdict (module docstring) on the change ``B/A - 1`` as printed: ``threshold`` worse is
    a ratio of ``1 - threshold`` for a throughput and ``1 + threshold`` for a latency."""
    ratio, low, high = math.exp(d), math.exp(low), math.exp(high)
    tolerance = 1e-12  # a change of exactly the threshold is within it (floats: 95/100 - 1 is -0.0500...04)
    if higher_is_better:
        worse_bound, better_bound = 1 - threshold - tolerance, 1 + threshold + tolerance
        all_worse, all_better, reaches_worse = high < 1, low > 1, low < worse_bound
        worse, better = ratio < worse_bound, ratio > better_bound
    else:
        worse_bound, better_bound = 1 + threshold + tolerance, 1 - threshold - tolerance
        all_worse, all_better, reaches_worse = low > 1, high < 1, high > worse_bound
        worse, better = ratio > worse_bound, ratio < better_bound
    if all_worse:
        return WORSE if worse else WORSE_BELOW
    if all_better:
        return BETTER if better else BETTER_BELOW
    return INCONCLUSIVE if reaches_worse else NO_CHANGE


def across(
    samples: Sequence[Sample], confidence: float = CONFIDENCE
) -> tuple[float, tuple[float, float] | None, float | None]:
    """A figure across its repetitions: the geometric mean, its 95 % t-interval (None below two
    repetitions) and the repetitions' spread (the standard deviation of their logs, about the
    coefficient of variation; None below two)."""
    s = side(samples, 0.0)
    if s.n < 2:
        return s.headline, None, None
    half = t_quantile(s.df, confidence) * math.sqrt(s.variance)
    return s.headline, (math.exp(s.log_mean - half), math.exp(s.log_mean + half)), math.sqrt(s.variance * s.n)
