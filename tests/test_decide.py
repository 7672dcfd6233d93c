"""utils/results/decide.py: the ratio B/A across repetitions, its Welch interval, the verdicts, and
the error rates they promise, on seeded simulated repetitions (no clock involved)."""

from __future__ import annotations

import math
import random

import pytest
from scipy import stats

from utils.results import decide as d
from utils.results.decide import Sample, across, decide, side, welch_df


def samples(*values: float, interval: float | None = None, valid: bool = True) -> list[Sample]:
    """Repetitions with, optionally, a window interval of ±``interval`` (relative) each."""
    return [Sample(v, (v * (1 - interval), v * (1 + interval)) if interval else None, valid) for v in values]


def test_the_interval_is_welchs_on_the_log_scale():
    a, b = [100.0, 104.0, 98.0, 101.0], [90.0, 93.0, 88.0]
    la, lb = [math.log(v) for v in a], [math.log(v) for v in b]
    welch = stats.ttest_ind(lb, la, equal_var=False)
    # the repetitions' own part: Welch's (a run made at another time adds the between-run term, below)
    result = decide(samples(*a), samples(*b), higher_is_better=True, threshold=0.05, between_cv=0.0)
    diff = sum(lb) / 3 - sum(la) / 4
    se = math.sqrt(stats.tvar(la) / 4 + stats.tvar(lb) / 3)
    assert result.df == pytest.approx(welch.df)
    assert result.ratio == pytest.approx(math.exp(diff))
    half = stats.t.ppf(0.975, welch.df) * se
    assert (result.low, result.high) == (pytest.approx(math.exp(diff - half)), pytest.approx(math.exp(diff + half)))
    assert diff / se == pytest.approx(welch.statistic)
    assert result.verdict == d.WORSE and result.regression and (result.n_a, result.n_b) == (4, 3) and not result.widened


def test_runs_made_at_different_times_add_the_between_run_term_to_each_side():
    """Each side's variance is s²/n plus between_cv², and the Welch-Satterthwaite degrees of freedom
    count that term as exact: only the repetitions' part is estimated."""
    a, b = [100.0, 104.0, 98.0, 101.0], [90.0, 93.0, 88.0]
    la, lb = [math.log(v) for v in a], [math.log(v) for v in b]
    ma, mb = stats.tvar(la) / 4, stats.tvar(lb) / 3
    result = decide(samples(*a), samples(*b), True, 0.05, between_cv=0.1)
    total = ma + mb + 2 * 0.1**2
    df = total**2 / (ma**2 / 3 + mb**2 / 2)
    assert result.df == pytest.approx(df) and result.widened
    half = stats.t.ppf(0.975, df) * math.sqrt(total)
    assert math.log(result.high / result.ratio) == pytest.approx(half)
    # -10 % with both runs' repetitions within ±3 %: Welch alone calls it; across runs it is inconclusive
    assert result.verdict == d.INCONCLUSIVE
    assert decide(samples(*a), samples(*b), True, 0.05, between_cv=0.0).verdict == d.WORSE
    # identical repetitions: only the term is left, with infinite degrees of freedom
    same = decide(samples(100.0, 100.0), samples(50.0, 50.0), True, 0.05, between_cv=0.1)
    assert math.isinf(same.df) and math.log(same.high / same.ratio) == pytest.approx(d.Z975 * math.sqrt(0.02))


@pytest.mark.parametrize(
    "a, b, higher, verdict",
    [
        ((100, 101, 99), (80, 81, 79), True, d.WORSE),  # qps -20 %
        ((100, 100.2, 99.8), (97, 97.2, 96.8), True, d.WORSE_BELOW),  # -3 %, clearly
        ((100, 101, 99), (120, 121, 119), True, d.BETTER),
        ((100, 100.2, 99.8), (102, 102.2, 101.8), True, d.BETTER_BELOW),
        ((100, 130, 80), (90, 120, 70), True, d.INCONCLUSIVE),  # noisy: the interval reaches -40 %
        ((100, 101, 99), (100.5, 99.5, 100), True, d.NO_CHANGE),
        ((1.0, 1.01, 0.99), (1.2, 1.21, 1.19), False, d.WORSE),  # latency +20 %
        ((1.0, 1.01, 0.99), (0.8, 0.81, 0.79), False, d.BETTER),
    ],
)
def test_verdicts(a, b, higher, verdict):
    assert decide(samples(*a), samples(*b), higher, threshold=0.05, between_cv=0.0).verdict == verdict


def test_a_change_of_exactly_the_threshold_is_within_it():
    # identical repetitions: a zero-width interval at exactly -5 %
    result = decide(samples(100.0, 100.0), samples(95.0, 95.0), True, threshold=1 - 0.95 / 1.0, between_cv=0.0)
    assert result.low == result.high == pytest.approx(0.95) and result.verdict == d.WORSE_BELOW


def test_one_repetition_is_widened_by_the_between_run_spread():
    one = decide(samples(100.0, interval=0.02), samples(100.0, interval=0.02), True, 0.05, between_cv=0.12)
    own = math.log(1.02 / 0.98) / 2 / d.Z975
    assert one.widened and math.isinf(one.df)
    assert math.log(one.high) == pytest.approx(d.Z975 * math.sqrt(2 * (own**2 + 0.12**2)))
    # 20 % slower in one run each: within what two runs of this machine differ by
    assert decide(samples(100.0, interval=0.02), samples(80.0, interval=0.02), True, 0.05).verdict == d.INCONCLUSIVE
    assert decide(samples(100.0, interval=0.02), samples(50.0, interval=0.02), True, 0.05).verdict == d.WORSE
    # with no between-run term, a 20 % change beyond both windows' ±2 % is called
    assert (
        decide(samples(100.0, interval=0.02), samples(80.0, interval=0.02), True, 0.05, between_cv=0.0).verdict
        == d.WORSE
    )
    # a mixed comparison: one side's term exact, the other's by Welch-Satterthwaite
    mixed = decide(samples(100.0), samples(80.0, 81.0, 79.0), True, 0.05)
    assert mixed.widened and mixed.df == pytest.approx(welch_df(side(samples(100.0)), side(samples(80.0, 81.0, 79.0))))


def test_across_is_the_geometric_mean_and_its_t_interval():
    mean, interval, spread = across(samples(100.0, 121.0))
    assert mean == pytest.approx(110.0)
    half = stats.t.ppf(0.975, 1) * math.sqrt(stats.tvar([math.log(100), math.log(121)]) / 2)
    assert interval == (pytest.approx(110 * math.exp(-half)), pytest.approx(110 * math.exp(half)))
    assert spread == pytest.approx(stats.tstd([math.log(100), math.log(121)]))
    assert across(samples(5.0)) == (pytest.approx(5.0), None, None)


def test_values_must_be_positive_and_finite():
    for bad in ([], [0.0], [-1.0], [math.inf], [math.nan]):
        with pytest.raises(ValueError):
            side([Sample(v) for v in bad])


def _lognormal_runs(rng: random.Random, n: int, scale: float, cv: float) -> list[Sample]:
    return [Sample(scale * math.exp(rng.gauss(0.0, cv))) for _ in range(n)]


@pytest.mark.parametrize("n", [2, 3, 5, 10])
def test_two_identical_engines_are_called_worse_at_most_2_5_percent_of_the_time(n):
    """A/A on seeded lognormal repetitions with a 12 % spread between runs: the false-alarm rate
    of "worse" is at most alpha / 2, whatever the number of repetitions."""
    rng = random.Random(1000 + n)
    trials = 4000
    alarms = sum(
        decide(_lognormal_runs(rng, n, 100.0, 0.12), _lognormal_runs(rng, n, 100.0, 0.12), True, 0.0).verdict == d.WORSE
        for _ in range(trials)
    )
    assert alarms / trials <= 0.025 + 3 * math.sqrt(0.025 * 0.975 / trials)  # within 3 sigma of the nominal rate


def test_the_ratio_interval_covers_the_true_ratio_at_its_nominal_rate():
    rng = random.Random(7)
    trials, covered = 3000, 0
    for _ in range(trials):
        # independent repetitions (each a fresh draw of the run-to-run noise): no between-run term to add
        result = decide(
            _lognormal_runs(rng, 4, 100.0, 0.1), _lognormal_runs(rng, 6, 85.0, 0.05), True, 0.05, between_cv=0.0
        )
        covered += result.low <= 0.85 <= result.high
    assert abs(covered / trials - 0.95) <= 3 * math.sqrt(0.95 * 0.05 / trials)


def test_power_grows_with_repetitions():
    """A 15 % slower engine, 5 % spread between runs: rarely seen with 2 repetitions a side, nearly always with 8."""
    rng = random.Random(3)

    def power(n: int) -> float:
        found = sum(
            decide(
                _lognormal_runs(rng, n, 100.0, 0.05), _lognormal_runs(rng, n, 85.0, 0.05), True, 0.05, between_cv=0.0
            ).verdict
            == d.WORSE
            for _ in range(1000)
        )
        return found / 1000

    low, high = power(2), power(8)
    assert low < 0.6 < 0.95 < high


def test_repetitions_that_share_their_runs_minutes_keep_false_alarms_within_rate_only_with_the_term():
    """The machine measured in the calibration: each run's repetitions share that run's speed (a
    16.5 % spread between runs) and add 3 % of their own. Welch on the repetitions alone calls two
    identical engines "worse" far beyond 2.5 %; with the between-run term it stays within it."""
    rng = random.Random(21)

    def run(n: int) -> list[Sample]:
        minutes = math.exp(rng.gauss(0, d.BETWEEN_RUN_CV))
        return [Sample(100 * minutes * math.exp(rng.gauss(0, 0.03))) for _ in range(n)]

    trials = 4000
    pairs = [(run(3), run(3)) for _ in range(trials)]
    alone = sum(decide(a, b, True, 0.0, between_cv=0.0).verdict == d.WORSE for a, b in pairs) / trials
    termed = sum(decide(a, b, True, 0.0).verdict == d.WORSE for a, b in pairs) / trials
    assert alone > 0.2 and termed <= 0.025 + 3 * math.sqrt(0.025 * 0.975 / trials)


def test_paired_repetitions_cancel_the_machines_slow_minutes():
    """run.py ab's pairs: each pair shares the machine's speed of its minute (12 % spread), each run adds
    1 % of its own. A 15 % slowdown: the paired rule sees it with 3 pairs; Welch, blind to the pairing, not."""
    rng = random.Random(11)
    minutes = [math.exp(rng.gauss(0, 0.12)) for _ in range(3)]
    a = [Sample(100 * m * math.exp(rng.gauss(0, 0.01))) for m in minutes]
    b = [Sample(85 * m * math.exp(rng.gauss(0, 0.01))) for m in minutes]
    paired = d.decide(a, b, True, 0.05, paired=True)
    logs = [math.log(y.value / x.value) for x, y in zip(a, b)]
    assert paired.paired and paired.df == 2 and paired.ratio == pytest.approx(math.exp(sum(logs) / 3))
    half = stats.t.ppf(0.975, 2) * stats.tstd(logs) / math.sqrt(3)
    assert math.log(paired.high / paired.ratio) == pytest.approx(half)
    assert paired.verdict == d.WORSE and decide(a, b, True, 0.05).verdict != d.WORSE
    # unequal counts (a repetition failed) or one pair: the unpaired rule
    assert (
        not d.decide(a, b[:2], True, 0.05, paired=True).paired
        and d.decide(a[:1], b[:1], True, 0.05, paired=True).widened
    )


def test_paired_false_alarms_stay_within_their_rate():
    rng = random.Random(12)
    trials, alarms = 4000, 0
    for _ in range(trials):
        minutes = [math.exp(rng.gauss(0, 0.12)) for _ in range(4)]
        a = [Sample(100 * m * math.exp(rng.gauss(0, 0.03))) for m in minutes]
        b = [Sample(100 * m * math.exp(rng.gauss(0, 0.03))) for m in minutes]
        alarms += d.decide(a, b, True, 0.0, paired=True).verdict == d.WORSE
    assert alarms / trials <= 0.025 + 3 * math.sqrt(0.025 * 0.975 / trials)


# ---- the edges, one assertion per rule (mutation testing: scripts/mutation.sh) ------------------


@pytest.mark.parametrize(
    "ratio, low, high, higher, verdict",
    [
        (0.9, 0.8, 1.0, True, d.INCONCLUSIVE),  # an interval that touches 1 does not exclude it
        (1.1, 1.0, 1.2, True, d.NO_CHANGE),
        (1.05, 1.01, 1.10, True, d.BETTER_BELOW),  # exactly the threshold is within it
        (1.1, 1.0, 1.2, False, d.INCONCLUSIVE),  # a latency: the same edges the other way
        (0.9, 0.8, 1.0, False, d.NO_CHANGE),
        (1.0, 0.9, 1.5, False, d.INCONCLUSIVE),
        (1.05, 1.01, 1.10, False, d.WORSE_BELOW),
        (0.95, 0.90, 0.99, False, d.BETTER_BELOW),
        (0.95, 0.90, 0.99, True, d.WORSE_BELOW),
    ],
)
def test_verdict_edges(ratio, low, high, higher, verdict):
    assert d._verdict(math.log(ratio), math.log(low), math.log(high), higher, 0.05) == verdict


def test_a_windows_own_interval_on_the_log_scale_and_where_it_has_none():
    between = 0.1
    assert side([Sample(100.0)], between).variance == pytest.approx(between**2)  # no interval: the term alone
    assert side([Sample(100.0)], between).between == between
    own = math.log(200 / 0.5) / 2 / d.Z975  # an interval below 1 (a latency in seconds) is still one
    assert side([Sample(100.0, (0.5, 200.0))], 0.0).variance == pytest.approx(own**2)
    sub = math.log(0.6 / 0.4) / 2 / d.Z975
    assert side([Sample(0.5, (0.4, 0.6))], 0.0).variance == pytest.approx(sub**2)
    for unusable in ((0.0, 200.0), (-1.0, 200.0)):  # no log of a bound at or below 0: no own term
        assert side([Sample(100.0, unusable)], between).variance == pytest.approx(between**2)
    with pytest.raises(ValueError, match="positive, finite"):
        side([Sample(0.0)])


def test_other_confidences_and_the_edges_of_the_paired_rule():
    assert d.t_quantile(math.inf) == d.Z975 and d.t_quantile(math.inf, 0.9) == pytest.approx(1.644854, abs=1e-6)
    a, b = samples(100.0, 110.0, 90.0), samples(90.0, 100.0, 80.0)
    at90 = decide(a, b, True, 0.05, between_cv=0.0, confidence=0.9)
    at95 = decide(a, b, True, 0.05, between_cv=0.0)
    assert math.log(at90.high / at90.ratio) / math.log(at95.high / at95.ratio) == pytest.approx(
        stats.t.ppf(0.95, at95.df) / stats.t.ppf(0.975, at95.df)
    )
    mean, interval, _ = across(a, 0.9)
    assert interval is not None and math.log(interval[1] / mean) == pytest.approx(
        stats.t.ppf(0.95, 2) * stats.tstd([math.log(v) for v in (100, 110, 90)]) / math.sqrt(3)
    )
    two = decide(samples(100.0, 110.0), samples(90.0, 100.0), True, 0.05, paired=True)  # two pairs: paired
    assert two.paired is True and (two.n_a, two.n_b) == (2, 2) and two.widened is False and two.df == 1
    unpaired = decide(samples(100.0, 110.0), samples(90.0), True, 0.05, paired=True)
    assert unpaired.paired is False
    # one side of one repetition, the other of three, no between-run term: the single one is widened
    assert decide(samples(100.0, interval=0.02), samples(80.0, 81.0, 79.0), True, 0.05, between_cv=0.0).widened
