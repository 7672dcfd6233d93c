"""tools.measure.precision: the intervals, the stop rule, the settle phase and the drift test.

The arithmetic is checked by hand and against scipy (an independent implementation);
the interval's coverage over 200 simulated runs with a known mean; the stop rule on a
fake clock, so its stopping point is exact; and each new reason is provoked through the
measured loop and the scenario runner by an engine that slows down or has heavy-tailed
jitter on the fake clock (no test here depends on how fast the machine is: docs/testing.md,
"No timed tests").
"""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import numpy as np
import pytest

from common.stats import (
    MIN_SAMPLES_FOR_PERCENTILE,
    batched_half_width,
    correlated_ranks,
    percentile,
    percentile_ci,
    percentile_interval,
    percentile_ranks,
    relative_half_width,
    t975,
)
from contract.phase import ContentionReading
from tools.measure import loop as forward
from tools.measure import precision
from tools.measure.precision import (
    Drift,
    Figures,
    Interval,
    Settle,
    StopRule,
    Target,
    Timeline,
    drift,
    drift_reason,
    imprecise,
    lag1,
    measure_figures,
    needed_s,
    precision_block,
    precision_reasons,
    settle,
    settled,
    throughput_interval,
)
from tools.measure.scenarios import ScenarioSpec, run_scenario
from tools.measure.stage import judge_row, row_target

MS = 1_000_000
scipy_stats = pytest.importorskip("scipy.stats")  # scikit-learn's dependency: always installed with the project


# ---- t quantiles and percentile intervals ------------------------------------------------
def test_t975_against_scipy():
    for df in range(1, 301):
        assert t975(df) == pytest.approx(scipy_stats.t.ppf(0.975, df), abs=1e-3 if df > 30 else 1e-4)
    assert t975(30) == 2.0423 and t975(31) < t975(30)
    with pytest.raises(ValueError, match=r"^t975: degrees of freedom must be >= 1, got 0$"):
        t975(0)


def test_t975_beyond_the_table_is_the_cornish_fisher_expansion_to_one_over_df_squared():
    # Abramowitz & Stegun 26.7.5 at z = 1.959964: t = z + g1 / df + g2 / df^2, g1 = (z^3 + z) / 4,
    # g2 = (5 z^5 + 16 z^3 + 3 z) / 96 (scipy's exact quantile above is only within 1e-3 of it)
    z = 1.959964
    g1, g2 = (z**3 + z) / 4, (5 * z**5 + 16 * z**3 + 3 * z) / 96
    for df in (31, 40, 100, 1000):
        assert t975(df) == pytest.approx(z + g1 / df + g2 / df**2, rel=1e-12, abs=0)


@pytest.mark.parametrize("n, q", [(7, 50), (64, 90), (100, 50), (662, 99), (1000, 90), (6620, 99.9), (20000, 99)])
def test_percentile_ranks_are_the_tightest_binomial_bounds(n, q):
    lo, hi = percentile_ranks(n, q)
    p = q / 100
    # the interval [x(lo), x(hi)] (0-based) misses when B <= lo or B >= hi + 1; each tail <= 2.5 %
    assert scipy_stats.binom.cdf(lo, n, p) <= 0.025 < scipy_stats.binom.cdf(lo + 1, n, p)
    assert scipy_stats.binom.sf(hi, n, p) <= 0.025 < scipy_stats.binom.sf(hi - 1, n, p)


def test_percentile_ranks_need_enough_samples():
    assert percentile_ranks(5, 50) is None and percentile_ranks(6, 50) == (0, 5)  # 0.5^6 = 1.6 % per tail
    assert percentile_ranks(0, 50) is None and percentile_ranks(10, 0) is None and percentile_ranks(10, 100) is None
    assert percentile_ranks(35, 90) is None and percentile_ranks(36, 90) == (28, 35)  # 0.9^35 = 2.5 % > 2.5 % > 0.9^36
    assert percentile_interval([1.0, 2.0], 50) is None
    assert percentile_interval([float(v) for v in range(100)], 50) == [39.0, 60.0]


def test_percentile_intervals_cover_the_true_quantile():
    rng = np.random.default_rng(11)
    for n, q in ((64, 90), (662, 99), (200, 50)):
        truth = math.exp(scipy_stats.norm.ppf(q / 100))
        covered = sum(
            lo <= truth <= hi for lo, hi in (percentile_interval(sorted(rng.lognormal(size=n)), q) for _ in range(400))
        )
        assert covered / 400 >= 0.93, (n, q, covered)


def _ar1(rng, n, phi):
    """An AR(1) series with unit marginal variance: latencies where a slow query follows a slow one."""
    noise = rng.normal(size=n) * math.sqrt(1 - phi**2)
    out = np.empty(n)
    out[0] = rng.normal()
    for i in range(1, n):
        out[i] = phi * out[i - 1] + noise[i]
    return out


def test_correlated_latencies_widen_the_percentile_interval_until_it_covers():
    """Of 200 AR(1) runs (lag-1 0.9, as bert's queries on the 2-core machine), the order-statistic
    interval alone covers the true p50 and p90 in well under 90 %; the reported interval, widened to
    the blocks' (percentile_ci), in at least 90 %. Independent latencies keep their interval."""
    rng = np.random.default_rng(7)
    runs = 200
    for q in (50, 90):
        truth = float(scipy_stats.norm.ppf(q / 100))
        alone = widened = 0
        for _ in range(runs):
            ordered = _ar1(rng, 2048, 0.9).tolist()
            values = sorted(ordered)
            lo, hi = percentile_interval(values, q)
            alone += lo <= truth <= hi
            lo, hi = percentile_ci(ordered, values, q, MIN_SAMPLES_FOR_PERCENTILE[f"p{q}"][1])
            widened += lo <= truth <= hi
        assert alone / runs < 0.6 and widened / runs >= 0.9, (q, alone, widened)
    independent = rng.normal(size=2048).tolist()
    values = sorted(independent)
    plain, wide = percentile_interval(values, 90), percentile_ci(independent, values, 90, 64)
    assert wide[0] <= plain[0] and wide[1] >= plain[1] and (wide[1] - wide[0]) < 1.6 * (plain[1] - plain[0])


def test_batched_half_width_by_hand():
    # 8 blocks of 16 (p50's blocks hold at least 16): block k's values all equal k, so its median is k.
    ordered = [float(k) for k in range(8) for _ in range(16)]
    spread = math.sqrt(sum((k - 3.5) ** 2 for k in range(8)) / 7)
    assert batched_half_width(ordered, 50, 2) == pytest.approx(t975(7) * spread / math.sqrt(8))
    assert batched_half_width(ordered[:-1], 50, 2) is None  # 127 queries: 7 whole blocks
    assert batched_half_width(ordered, 90, 17) is None  # blocks of the floor, 17: 7 fit
    assert batched_half_width(ordered + [99.0] * 15, 50, 2) == batched_half_width(
        ordered, 50, 2
    )  # a partial block is left out
    many = [float(i % 40) for i in range(40 * 64)]  # 2560 queries: 32 blocks (the most) of 80
    assert batched_half_width(many, 50, 2) == 0.0  # every block holds the same two cycles: the same median
    flat = [1.0] * 200
    values = sorted(flat)
    assert percentile_ci(flat, values, 50, 2) == percentile_interval(values, 50) == [1.0, 1.0]
    # Where the blocks agree (half-width 0) the order-statistic interval stands on both sides ...
    assert (
        percentile_ci(many, sorted(many), 50, 2) == percentile_interval(sorted(many), 50)
        and percentile_interval(sorted(many), 50)[0] < 19.5
    )
    # ... below 512 queries at the effective sample size: a sawtooth's ranks are correlated (correlated_ranks)
    few = many[:400]
    lo, hi = correlated_ranks(few, 50)
    plain = percentile_ranks(400, 50)
    assert percentile_ci(few, sorted(few), 50, 2) == [sorted(few)[lo], sorted(few)[hi]] and (hi - lo) > 3 * (
        plain[1] - plain[0]
    )
    # ... and where they spread, the interval reaches as far as they do: 8 blocks of 16 whose levels differ
    # a little (k / 2) under a scramble of 0..15 inside each block (ranks barely correlated)
    ordered = [k / 2 + (j * 7 % 16) for k in (3, 7, 0, 5, 1, 6, 2, 4) for j in range(16)]
    values = sorted(ordered)
    found = percentile_ci(ordered, values, 50, 2)
    lo, hi = correlated_ranks(ordered, 50)
    point, half = percentile(values, 50), batched_half_width(ordered, 50, 2)
    assert half > 0 and found == [min(values[lo], point - half), max(values[hi], point + half)]
    # levels that climb block after block are correlated across the window: no honest interval ("± n/a")
    climbing = [float(k) for k in range(8) for _ in range(16)]
    assert percentile_ci(climbing, sorted(climbing), 50, 2) is None
    assert percentile_ci([1.0], [1.0], 50, 2) is None


def test_relative_half_width():
    assert relative_half_width(10.0, [9.0, 12.0]) == 0.15
    assert (
        relative_half_width(None, [1, 2]) is None
        and relative_half_width(1.0, None) is None
        and relative_half_width(0.0, [0, 1]) is None
    )


# ---- timelines and block rates ---------------------------------------------------------------
def test_tiled_timeline_spreads_each_query_over_its_time():
    timeline = Timeline.tiled([2, 4, 8], [1, 1, 2])  # queries [0,2] [2,4] [4,8] ns
    assert timeline.begin_ns.tolist() == [0, 2, 4] and timeline.span_ns == 8 and timeline.queries == 3
    assert [timeline.work_at(t) for t in (0, 1, 2, 3, 6, 8, 9)] == [0.0, 0.5, 1.0, 1.5, 3.0, 4.0, 4.0]
    assert timeline.block_rates(2).tolist() == [0.5e9, 0.5e9]  # 2 samples in each 4 ns half
    assert timeline.block_rates(4).tolist() == [0.5e9] * 4
    assert Timeline.tiled([], 3).queries == 0 and Timeline.tiled([], 3).span_ns == 0.0
    assert Timeline.tiled([5, 10], 4, span_ns=20).span_ns == 20 and Timeline.tiled([5, 10], 4).samples.tolist() == [
        4.0,
        4.0,
    ]


def test_spans_timeline_and_parts():
    timeline = Timeline.spans([5, 6, 9], [5, 2, 20], 2)  # the last would have begun before 0
    assert timeline.begin_ns.tolist() == [0, 4, 0] and timeline.span_ns == 9
    assert timeline.work_at(4.5) == pytest.approx(2 * 4.5 / 5 + 2 * 0.5 / 2 + 2 * 4.5 / 9)
    part = Timeline.tiled([2, 4, 8], [1, 1, 2]).part(3, 6)
    assert part.begin_ns.tolist() == [0, 1] and part.end_ns.tolist() == [1, 3] and part.span_ns == 3
    assert part.samples.tolist() == [0.5, 1.0]  # half of the second query, half of the third
    instant = Timeline(np.array([1.0, 5.0]), np.array([1.0, 5.0]), np.array([3.0, 4.0]), 6.0).part(2, 6)
    assert instant.samples.tolist() == [4.0] and instant.begin_ns.tolist() == [
        3.0
    ]  # a query of no duration counts where it ends


def test_lag1():
    assert lag1(np.array([1.0, 2.0, 3.0, 4.0])) == pytest.approx(1.25 / 5)
    assert lag1(np.array([3.0, 3.0, 3.0])) == 0.0
    assert lag1(np.array([1.0, -1.0, 1.0, -1.0])) == pytest.approx(-0.75)


def test_interval_by_hand_when_blocks_hold_whole_queries():
    # 16 queries of 1 s: 8 blocks of 2 queries, block rates = the mean of two batch sizes
    sizes = [4, 6, 5, 5, 3, 7, 6, 4, 5, 5, 4, 6, 7, 3, 5, 5]
    # 16 queries of 1 s: 16 blocks of one query each, the rates are the batch sizes
    interval = throughput_interval(Timeline.tiled([(k + 1) * 1e9 for k in range(16)], [5] * 16))
    assert (interval.value, interval.lo, interval.hi, interval.batches, interval.lag1) == (5.0, 5.0, 5.0, 16, 0.0)
    sizes = [2, 8, 2, 8, 4, 6, 4, 6, 2, 8, 2, 8, 4, 6, 4, 6]
    interval = throughput_interval(Timeline.tiled([(k + 1) * 1e9 for k in range(16)], sizes))
    rates = np.array(sizes, dtype=float)
    measured = lag1(rates)
    corrected = max(measured + (1 + 3 * measured) / 16, 0.0)
    r = corrected + math.sqrt((1 - corrected**2) / 16)  # bias-corrected, raised one standard error
    effective = 16 * (1 - r) / (1 + r)
    half = (
        scipy_stats.t.ppf(0.975, int(effective) - 1) * rates.std(ddof=1) / math.sqrt(16) * math.sqrt((1 + r) / (1 - r))
    )
    assert (
        measured < 0
        and interval.batches == 16
        and interval.lag1 == pytest.approx(measured)
        and interval.effective == pytest.approx(effective)
    )
    assert (interval.lo, interval.hi) == pytest.approx((5 - half, 5 + half), rel=1e-4)
    assert interval.relative == pytest.approx(half / 5, rel=1e-4)


def test_interval_refuses_a_window_short_against_its_correlation_and_needs_16_queries():
    assert throughput_interval(Timeline.tiled(list(range(1, 16)), 1)) is None
    assert throughput_interval(Timeline.tiled([0] * 20, 1)) is None  # no time passed
    # a slow wave over 64 queries: one period, correlated across the window: no honest interval
    wave = [1e9 * (1.5 + math.sin(2 * math.pi * k / 64)) for k in range(64)]
    assert throughput_interval(Timeline.tiled(np.cumsum(wave), 1)) is None
    # four periods of it in 256 queries: the blocks are worth enough independent ones
    waves = throughput_interval(Timeline.tiled(np.cumsum(wave * 4), 1))
    assert (
        waves is not None
        and waves.batches == precision.FINE_BLOCKS
        and waves.lag1 > 0.5
        and waves.effective >= precision.MIN_EFFECTIVE_BLOCKS
    )
    # independent times: 64 queries, 64 blocks, worth most of them
    rng = random.Random(3)
    flat = throughput_interval(Timeline.tiled(np.cumsum([1e9 * rng.uniform(0.9, 1.1) for _ in range(64)]), 1))
    assert flat.batches == 64 and flat.lag1 < 0.5 and flat.effective > 20
    assert throughput_interval(Timeline.tiled(np.cumsum([1e9] * 40), 1)).batches == 40  # about one query a block


def test_interval_covers_a_known_mean_in_at_least_90_percent_of_200_runs():
    """Autocorrelated (AR(1) on log latency, phi 0.5) long-tailed timings with a known
    long-run throughput: 8 samples / E[latency]."""
    rng = np.random.default_rng(20240611)
    sigma, phi, n = 0.1, 0.5, 400
    truth = 8 / (0.5 * math.exp(sigma**2 / 2))
    covered = 0
    for _ in range(200):
        noise = rng.normal(size=n) * sigma * math.sqrt(1 - phi**2)
        x = np.empty(n)
        x[0] = rng.normal() * sigma
        for i in range(1, n):
            x[i] = phi * x[i - 1] + noise[i]
        interval = throughput_interval(Timeline.tiled(np.cumsum(0.5e9 * np.exp(x)), 8))
        covered += interval.lo <= truth <= interval.hi
    assert covered >= 180, covered


def test_interval_around_a_reported_figure():
    interval = Interval(10.0, 9.0, 11.0, 8, 0.0)
    assert interval.around(20.0) == [18.0, 22.0] and interval.around(None) is None and interval.relative == 0.1
    assert Interval(0.0, 0.0, 0.0, 8, 0.0).around(1.0) is None and Interval(0.0, 0.0, 0.0, 8, 0.0).relative == math.inf


# ---- figures, reasons and the record ------------------------------------------------------------
def test_measure_figures_and_reasons():
    target = Target(throughput=("qps",), precision=0.02, percentile="p90", latency_precision=0.05)
    steady = Timeline.tiled([(k + 1) * MS for k in range(64)], 2)
    figures = measure_figures(target, {"qps": steady}, [MS] * 64)
    assert figures.widths() == {"qps": 0.0, "p90": 0.0}
    assert precision.imprecise(target, figures) == {} and precision_reasons(target, figures, {}, 1.0) == []
    few = measure_figures(target, {"qps": Timeline.tiled([MS, 2 * MS], 2)}, [MS, MS])
    assert few.widths() == {"qps": None, "p90": None}
    assert precision_reasons(target, few, {}, 0.002) == [
        "not precise enough: qps has no interval after 0.002 s (it needs at least 16 queries, more if correlated; "
        "precision 2%)",
        "not precise enough: p90 has no interval after 0.002 s (it needs at least 64 queries, more if correlated; "
        "precision 5%)",
    ]
    wide = Figures({"qps": Interval(100.0, 95.2, 104.8, 8, 0.0)}, {"p90": (10.0, [9.0, 12.0])})
    assert precision_reasons(target, wide, {}, 60.0) == [
        "not precise enough: qps ±4.8% after 60 s (precision 2%)",
        "not precise enough: p90 ±15.0% after 60 s (precision 5%)",
    ]
    assert precision_reasons(target, wide, {}, 6.0, "precision out of reach")[0] == (
        "not precise enough: qps ±4.8% after 6 s (precision 2%; out of reach: about 34.6 s needed)"
    )
    timeless = measure_figures(Target(), {"qps": Timeline.tiled([0] * 16, 1)})
    assert timeless.timeless == ["qps"] and timeless.widths() == {}
    assert precision_reasons(Target(), timeless, {}, 1.0) == ["not precise enough: qps took no measurable time"]
    assert target.limit("qps") == 0.02 and target.limit("p90") == 0.05 and Target(percentile="p90").limit("p90") == 0.02
    assert (
        measure_figures(Target(), {"qps": Timeline.tiled([0] * 15 + [1], 1)}).timeless == []
    )  # 1 ns is measurable time
    # The headline percentile is numpy's linear one, with its order-statistic interval, from unsorted latencies.
    latencies = [int(MS * (1 + (k * 37 % 100) / 50)) for k in range(200)]
    found = measure_figures(target, {"qps": steady}, latencies).percentile["p90"]
    lo, hi = correlated_ranks(latencies, 90)
    assert found[0] == pytest.approx(float(np.percentile(latencies, 90))) and found[1] == [
        sorted(latencies)[lo],
        sorted(latencies)[hi],
    ]


def test_drift_by_hand():
    slower = Timeline.tiled(np.cumsum([MS] * 150 + [2 * MS] * 150), 1)  # 150 ms at 1 ms, then 300 ms at 2 ms
    found = drift(slower, 0.02)
    # thirds of 150 ms: the first all at 1000 q/s, the last all at 500 q/s
    assert (found.first.value, found.last.value, found.change, found.drifting) == (
        pytest.approx(1000.0),
        pytest.approx(500.0),
        pytest.approx(-0.5),
        True,
    )
    assert drift_reason("qps", found) == "drifting: qps fell 50% from the first to the last third"
    faster = drift(Timeline.tiled(np.cumsum([2 * MS] * 150 + [MS] * 300), 1), 0.02)
    assert drift_reason("core qps", faster) == "drifting: core qps rose 100% from the first to the last third"
    # 1 % slower: outside the (zero-width) intervals, but within the precision asked for
    slight = drift(Timeline.tiled(np.cumsum([MS] * 300 + [1_010_000] * 300), 1), 0.02)
    assert (
        slight.change == pytest.approx(-1 / 101, rel=1e-6)
        and not slight.drifting
        and drift_reason("qps", slight) is None
    )
    assert drift(Timeline.tiled(np.cumsum([MS] * 40), 1), 0.02) is None  # a third of 40 queries is too short
    assert drift_reason("qps", None) is None
    assert drift(
        Timeline.tiled(np.cumsum([MS] * 300 + [1_010_000] * 300), 1), None
    ).drifting  # no precision asked: the intervals alone decide
    thirds = {"first_third": [found.first.lo, found.first.hi], "last_third": [found.last.lo, found.last.hi]}
    assert found.to_dict() == {"change": found.change, **thirds, "drifting": True}


def test_precision_block():
    target = Target(throughput=("qps",), percentile="p90")
    figures = Figures({"qps": Interval(100.0, 99.0, 101.0, 16, 0.125)}, {"p90": (10.0, [9.9, 10.1])})
    block = precision_block(target, figures, Settle(1.5, 6, True, 2, 0.01), {"qps": None}, 7, "precision reached")
    assert block == {
        "target": 0.02,
        "latency_target": 0.02,
        "achieved": pytest.approx(0.01),
        "figures": {"qps": 0.01, "p90": pytest.approx(0.01)},
        "method": precision.METHOD,
        "batches": {"qps": 16},
        "lag1": {"qps": 0.125},
        "stop_reason": "precision reached",
        "checks": 7,
        "settle_s": 1.5,
        "settle_queries": 6,
        "settled": True,
        "settle_block": 2,
        "settle_change": 0.01,
        "drift": {"qps": None},
    }
    assert precision_block(Target(), Figures({"qps": None}), Settle(), {}, 0, "x")["achieved"] is None


# ---- the stop rule ---------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = 10**12

    def __call__(self) -> int:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += round(seconds * 1e9)


def jitter_engine(clock: Clock, latencies_ns: list[int]):
    queue = iter(latencies_ns)

    def step(inputs):
        clock.now += next(queue)
        return [inputs[0]], 0.0

    return step


def test_the_stop_rule_stops_exactly_when_the_precision_is_reached():
    rng = random.Random(7)
    latencies = [int(MS * rng.lognormvariate(0, 0.3)) for _ in range(20_000)]
    ends = np.cumsum(latencies)
    limit = 0.03

    def width(n: int) -> float | None:
        interval = throughput_interval(Timeline.tiled(ends[:n], 4))
        return interval.relative if interval else None

    expected = next(n for n in range(40, len(latencies)) if (w := width(n)) is not None and w <= limit)
    assert expected > 60 and width(expected - 1) > limit  # the precision, not the minimums, decides
    clock = Clock()
    run = run_scenario(
        jitter_engine(clock, latencies),
        [[np.zeros(4)]],
        ScenarioSpec(
            scenario="offline",
            batch_size=4,
            min_query_count=40,
            min_duration_s=0.0,
            max_duration_s=600.0,
            clock=clock,
            sleep=clock.sleep,
            target=Target(precision=limit, check_every_s=0.0),
        ),
    )
    assert (run.queries, run.stop_reason) == (expected, "precision reached")
    assert run.checks == expected - 40 + 1  # one look per query from the minimums on


def test_the_stop_rule_looks_at_most_every_check_every_s_and_bounds_its_cost():
    clock = Clock()
    looks = []
    now = [0]

    def measure() -> Figures:
        looks.append(now[0])
        clock.now += 30 * MS  # an expensive look: 30 ms on the rule's clock
        return Figures({"qps": Interval(1.0, 0.9, 1.1, 8, 0.0)})

    rule = StopRule(Target(check_every_s=0.5), clock, max_s=1e9)
    for now[0] in range(0, 4000 * MS, 10 * MS):
        assert rule.decide(now[0], now[0], measure) is None
    # after each look the next waits max(0.5 s, 30 ms / 2 %) = 1.5 s
    assert looks == [0, 1500 * MS, 3000 * MS] and rule.checks == 3
    cheap = StopRule(Target(check_every_s=0.5), Clock(), max_s=1e9)
    seen = []
    for t in range(0, 1200 * MS, 100 * MS):
        cheap.decide(t, t, lambda: seen.append(1) or Figures({"qps": Interval(1.0, 0.9, 1.1, 8, 0.0)}))
    assert len(seen) == 3  # at 0, 0.5 and 1.0 s


def test_the_stop_rule_looks_again_at_once_while_an_interval_is_missing():
    rule = StopRule(Target(check_every_s=10.0), Clock(), max_s=60)
    assert rule.decide(0, 0, lambda: Figures({"qps": None})) is None and rule.next_ns is None
    assert rule.decide(1, 1, lambda: Figures({"qps": Interval(1.0, 1.0, 1.0, 8, 0.0)})) == "precision reached"


def test_a_precise_window_too_short_to_judge_its_drift_is_measured_on():
    """Identical queries are precise at once (every block the same rate), but thirds of fewer than
    MIN_QUERIES queries cannot say whether the window drifted: the run goes on until they can."""
    clock = Clock()
    ends = np.cumsum([MS] * 200)
    judged = next(n for n in range(1, 200) if drift(Timeline.tiled(ends[:n], 1), 0.1) is not None)
    assert judged > 20 and measure_figures(Target(precision=0.1), {"qps": Timeline.tiled(ends[:20], 1)}).unjudged
    run = run_scenario(
        jitter_engine(clock, [MS] * 200),
        [[np.zeros(1)]],
        ScenarioSpec(
            scenario="offline",
            batch_size=1,
            min_query_count=20,
            min_duration_s=0.0,
            max_duration_s=600.0,
            clock=clock,
            sleep=clock.sleep,
            target=Target(precision=0.1, check_every_s=0.0),
        ),
    )
    assert (run.queries, run.stop_reason) == (judged, "precision reached")
    found = drift(run.timeline(), 0.1)
    assert found is not None and not found.drifting and found.change == 0.0


def test_the_stop_rule_waits_for_a_judgeable_drift_only_where_a_precision_is_asked():
    exact = Interval(1.0, 1.0, 1.0, 8, 0.0)
    rule = StopRule(Target(precision=0.1, check_every_s=0.0), Clock(), max_s=60)
    assert rule.decide(0, 10**9, lambda: Figures({"qps": exact}, unjudged=["qps"])) is None
    assert rule.decide(1, 10**9, lambda: Figures({"qps": exact})) == "precision reached"
    assert StopRule(Target(precision=None)).decide(0, 10**9, lambda: Figures({"qps": exact}, unjudged=["qps"])) == (
        "minimums met"
    )
    short = {"qps": Timeline.tiled(np.cumsum([MS] * 20), 1)}
    assert measure_figures(Target(precision=None), short).unjudged == []  # nothing waits for it


def test_the_stop_rule_gives_up_when_the_precision_is_out_of_reach():
    wide = Figures({"qps": Interval(1.0, 0.9, 1.1, 8, 0.0)})  # ±10 %
    rule = StopRule(Target(precision=0.02, check_every_s=0.0), Clock(), max_s=60)
    # at 9 s: 9 x (10/2)^2 = 225 s needed <= 4 x 60: go on; at 10 s: 250 s > 240: give up
    assert rule.decide(0, 9 * 10**9, lambda: wide) is None
    assert rule.decide(1, 10 * 10**9, lambda: wide) == "precision out of reach"
    assert needed_s(0.1, 0.02, 10.0) == pytest.approx(250.0)


def test_without_a_target_a_run_stops_at_its_minimums():
    clock = Clock()
    run = run_scenario(
        jitter_engine(clock, [MS] * 100),
        [[np.zeros(1)]],
        ScenarioSpec(
            scenario="offline",
            batch_size=1,
            min_query_count=5,
            min_duration_s=0.0,
            max_duration_s=1.0,
            clock=clock,
            sleep=clock.sleep,
        ),
    )
    assert (run.queries, run.stop_reason, run.checks) == (5, "minimums met", 0)


# ---- the settle phase ----------------------------------------------------------------------------
def test_settle_waits_for_the_rate_to_stop_trending():
    clock = Clock()
    durations = [int(20 * MS - 0.15 * MS * k) for k in range(100)] + [5 * MS] * 200  # warming up for 100 calls

    def one_query() -> int:
        d = durations[one_query.calls]
        one_query.calls += 1
        clock.now += d
        return d

    one_query.calls = 0
    found = settle(one_query, clock, 60.0)
    assert found.block == 13  # ceil(0.25 s / 20 ms)
    assert found.settled and found.queries % 13 == 0 and found.queries == one_query.calls
    last, before = durations[found.queries - 13 : found.queries], durations[found.queries - 26 : found.queries - 13]
    assert abs(sum(before) / sum(last) - 1) <= max(precision.SETTLE_FLOOR, 0.05)
    assert not settled(durations[: found.queries - 13], 13)[0]  # one block earlier it was still trending
    assert (
        found.seconds == sum(durations[: found.queries]) / 1e9
        and found.last_change == settled(durations[: found.queries], 13)[1]
    )


def test_block_noise_and_settled_by_hand():
    assert precision._block_noise([MS, 3 * MS]) == pytest.approx(0.5)  # sd sqrt(2) ms, / sqrt(2) queries, / mean 2 ms
    assert precision._block_noise([MS, MS, 4 * MS]) == pytest.approx(
        math.sqrt(3 / 3) / 2
    )  # var (1+1+4)/2 = 3 ms², mean 2 ms
    assert precision._block_noise([5 * MS]) == 0.0 and precision._block_noise([0, 0]) == 0.0
    # two blocks of one query each: 10 % faster is beyond the 3 % floor (no noise in a block of one)
    assert settled([10 * MS, 9 * MS], 1) == (False, pytest.approx(10 / 9 - 1))
    assert settled([10 * MS, 9_800_000], 1) == (True, pytest.approx(10 / 9.8 - 1))
    assert settled([0, 0, 0, 0], 2) == (True, 0.0)  # no measurable time: nothing to wait for
    # noisy blocks: a 20 % change within twice their combined standard error has settled
    noisy = [MS, 3 * MS, MS, 3 * MS, MS, 2 * MS, MS, 2 * MS]
    done, change = settled(noisy, 4)
    first, last = precision._block_noise(noisy[:4]), precision._block_noise(noisy[4:])
    assert change == pytest.approx(8 / 6 - 1) and done == (abs(change) <= 2 * math.sqrt(first**2 + last**2))
    assert done
    # a 17 % change at 2.1 x the blocks' combined standard error: still trending
    trending = [10 * MS, 12 * MS, 10 * MS, 12 * MS, 8_400_000, 10_400_000, 8_400_000, 10_400_000]
    assert settled(trending, 4) == (False, pytest.approx(44 / 37.6 - 1))


def test_settle_stops_at_its_bound_and_can_be_off():
    clock = Clock()

    def slower_and_slower() -> int:  # every call 10 % slower than the one before: 11 ms, 12.1 ms, ...
        slower_and_slower.d = int(slower_and_slower.d * 1.1)
        clock.now += slower_and_slower.d
        return slower_and_slower.d

    slower_and_slower.d = 10 * MS
    found = settle(slower_and_slower, clock, 0.5)
    assert (
        not found.settled and found.seconds >= 0.5 and found.block == 23 and found.last_change is None
    )  # 0.25 s / 11 ms
    assert settle(slower_and_slower, clock, 0.0) == Settle()
    assert settled([MS] * 3, 2) == (False, None) and settled([MS] * 4, 0) == (False, None)


# ---- each reason provoked for real -----------------------------------------------------------------
def _phase_config(**values):
    base = dict(
        device="cpu",
        warmup=1,
        repeat=1,
        log_freq=0,
        min_query_count=16,
        min_duration_s=1.0,
        max_duration_s=3.0,
        contention_limit=1.0,
        precision=0.5,
        settle_max_s=0.2,
    )
    base.update(values)
    return SimpleNamespace(**base)


def _sleeping_loader():
    return [([np.zeros((2, 1))], [0, 0])]


def _fake_forward(monkeypatch):
    """timed_forward on a fake clock (tests/infra/loop_rig.py's Rig): an engine's "time"
    is what it adds to ``rig.now``, so what a window measures is known before it runs."""
    from tests.infra.loop_rig import Rig

    return Rig(monkeypatch)


def _on(rig):
    """run_scenario's clock and sleep on the same fake clock."""

    def sleep(seconds: float) -> None:
        rig.now += round(seconds * 1e9)

    return dict(clock=lambda: rig.now, sleep=sleep)


def test_drift_an_engine_that_slows_down_is_invalid(monkeypatch):
    """An engine that slows down (as a throttled CPU would): 2 ms a call, 6 ms after 0.9 s, on the fake clock."""
    rig = _fake_forward(monkeypatch)
    started = [rig.now]

    def slowing(inputs):
        rig.now += 2 * MS if rig.now - started[0] < 900 * MS else 6 * MS
        return [inputs[0]], 0.0

    config = _phase_config(precision=0.05, min_duration_s=1.5, max_duration_s=1.5)
    result = forward.timed_forward(slowing, _sleeping_loader(), None, config, "inference")
    assert any(r.startswith("drifting: core qps fell ") for r in result.verdict.reasons), result.verdict.reasons
    assert result.precision["drift"]["core qps"]["drifting"] and result.precision["drift"]["core qps"][
        "change"
    ] == pytest.approx(-2 / 3, abs=0.01)

    started[0] = rig.now
    run = run_scenario(
        slowing,
        [[np.zeros(2)]],
        ScenarioSpec(
            scenario="offline", batch_size=2, min_query_count=16, min_duration_s=1.5, max_duration_s=1.5, **_on(rig)
        ),
    )
    config = SimpleNamespace(
        min_query_count=16, min_duration_s=1.5, contention_limit=1.0, precision=0.05, latency_precision=None
    )
    row_reasons = judge_row(run, None, config, ContentionReading(0.0, 2, 1.0, None), None).reasons
    # the thirds of the window exactly: all 2 ms calls in the first, all 6 ms calls in the last
    assert "drifting: qps fell 67% from the first to the last third" in row_reasons, row_reasons


def test_precision_not_reached_with_heavy_tailed_jitter_and_a_short_cap(monkeypatch):
    """An engine with seeded Pareto (alpha 1.1) call times on the fake clock: its mean barely settles,
    so ±1 % is out of reach within max_duration_s 1 s."""
    rig = _fake_forward(monkeypatch)
    rng = random.Random(5)

    def jittery(inputs):
        rig.now += round(1e9 * min(0.0005 * rng.paretovariate(1.1), 0.15))
        return [inputs[0]], 0.0

    config = _phase_config(precision=0.01, min_duration_s=0.5, max_duration_s=1.0, settle_max_s=0.0)
    result = forward.timed_forward(jittery, _sleeping_loader(), None, config, "inference")
    assert result.precision["stop_reason"] in ("max_duration_s reached", "precision out of reach")
    assert any(r.startswith("not precise enough: core qps ±") for r in result.verdict.reasons), result.verdict.reasons
    run = run_scenario(
        jittery,
        [[np.zeros(1)]],
        ScenarioSpec(
            scenario="offline",
            batch_size=1,
            min_query_count=16,
            min_duration_s=0.5,
            max_duration_s=1.0,
            target=Target(precision=0.01),
            **_on(rig),
        ),
    )
    assert run.stop_reason in ("max_duration_s reached", "precision out of reach")
    config = SimpleNamespace(
        min_query_count=16, min_duration_s=0.5, contention_limit=1.0, precision=0.01, latency_precision=None
    )
    row_reasons = judge_row(run, None, config, ContentionReading(0.0, 2, 1.0, None), None).reasons
    assert any(r.startswith("not precise enough: qps ±") for r in row_reasons), row_reasons


def test_a_steady_engine_is_valid_and_stops_on_its_precision(monkeypatch):
    """2 ms calls with seeded lognormal jitter (sigma 0.5) on the fake clock: ±5 % is reached after the
    minimums and well before max_duration_s. (On a real clock it may reach max_duration_s first: whether
    a real machine reaches a precision in time is not something a test may assert.)"""
    rig = _fake_forward(monkeypatch)
    rng = random.Random(17)

    def steady(inputs):
        rig.now += round(2 * MS * rng.lognormvariate(0, 0.5))
        return [inputs[0]], 0.0

    result = forward.timed_forward(
        steady, _sleeping_loader(), None, _phase_config(precision=0.05, min_duration_s=0.01), "inference"
    )
    assert result.precision["stop_reason"] == "precision reached", result.verdict.reasons
    assert result.verdict.valid and result.precision["achieved"] <= 0.05
    assert result.batches > 16 and result.whole_time_s < 3.0  # the precision, not the minimums or the cap, stopped it
    assert result.core_qps_ci95[0] <= result.core_qps <= result.core_qps_ci95[1]
    assert result.core_qps == pytest.approx(1000 / math.exp(0.125), rel=0.05)  # 2 samples / E[call]


def test_row_targets():
    config = SimpleNamespace(precision=0.03, latency_precision=0.1)
    assert row_target("offline", config) == Target(
        throughput=("qps",), precision=0.03, percentile=None, latency_precision=0.1
    )
    assert row_target("single_stream", config).percentile == "p90" and row_target(
        "single_stream", config
    ).throughput == ("qps",)
    assert row_target("server", config).throughput == () and row_target("server", config).percentile == "p99"
    assert row_target("offline", SimpleNamespace()).precision == 0.02  # the framework default


def test_drift_dataclass_round_trip():
    interval = Interval(1.0, 0.9, 1.1, 8, 0.0)
    assert Drift(-0.2, interval, interval, True).to_dict()["first_third"] == [0.9, 1.1]


def test_no_precision_asked_is_one_pass_and_judges_nothing(monkeypatch):
    """precision: null (docs/measurement.md, "One pass"): the phase stops at repeat and its minimums,
    the stop rule never measures, and no precision reason is given; asked for 5 %, the same phase runs on
    (1 ms calls on the fake clock)."""
    rig = _fake_forward(monkeypatch)

    def steady(inputs):
        rig.now += MS
        return [inputs[0]], 0.0

    loader = [([np.zeros((2, 1))], [0, 0])] * 2
    config = _phase_config(precision=None, min_query_count=1, min_duration_s=0.0, settle_max_s=0.0)
    result = forward.timed_forward(steady, loader, None, config, "validation")
    assert (result.passes, result.batches, result.precision["stop_reason"], result.precision["target"]) == (
        1,
        2,
        "minimums met",
        None,
    )
    assert result.verdict.valid and result.core_qps_ci95 is None  # two queries: no interval, and none asked for
    asked = forward.timed_forward(
        steady,
        loader,
        None,
        _phase_config(precision=0.05, min_query_count=1, min_duration_s=0.0, settle_max_s=0.0),
        "validation",
    )
    assert asked.passes >= 8 and asked.precision["stop_reason"] == "precision reached"  # 16 queries before any interval

    never = StopRule(Target(precision=None))
    assert never.decide(0, 0, lambda: pytest.fail("no precision asked: nothing to measure")) == "minimums met"
    wide = Figures({"qps": Interval(100.0, 50.0, 150.0, 8, 0.0)})
    assert (
        imprecise(Target(precision=None), wide) == {} and precision_reasons(Target(precision=None), wide, {}, 1.0) == []
    )
    assert row_target("offline", SimpleNamespace(precision=None, latency_precision=0.1)).precision is None
    unasked = Target(
        precision=None, percentile="p90", latency_precision=0.1
    )  # a latency_precision alone asks for nothing
    assert (
        unasked.limit("p90") is None
        and precision_block(unasked, wide, Settle(), {}, 0, "minimums met")["latency_target"] is None
    )


def test_a_rate_that_stepped_once_is_measured_again_and_one_that_keeps_falling_stays_invalid(monkeypatch):
    """As the pipeline runs the inference phase: a window that drifted is measured once more. A one-time
    step (2 ms a call, 6 ms after 0.9 s: a neighbour, a frequency change) is steady in the second window;
    a rate that keeps falling drifts in both. On the fake clock, so each window is known exactly."""
    rig = _fake_forward(monkeypatch)
    started = [rig.now]

    def stepped(inputs):
        rig.now += 2 * MS if rig.now - started[0] < 900 * MS else 6 * MS
        return [inputs[0]], 0.0

    def falling(inputs):
        rig.now += round(2 * MS * (1 + 3 * (rig.now - started[0]) / 1e9))
        return [inputs[0]], 0.0

    config = _phase_config(precision=0.2, min_duration_s=1.5, max_duration_s=1.5)
    for engine, steady in ((stepped, True), (falling, False)):
        started[0] = rig.now
        result = precision.measured_once_more_on_drift(
            lambda: forward.timed_forward(engine, _sleeping_loader(), None, config, "inference"),
            lambda r: r.precision,
            lambda r: r.verdict.reasons,
        )
        if steady:  # the first window drifted (-67 %), the second, after the step, is steady and VALID
            first = result.precision["remeasured"]
            assert first["drift"]["core qps"] < -0.3 and any(
                r.startswith("drifting: core qps fell ") for r in first["reasons"]
            )
            assert result.verdict.valid, result.verdict.reasons
        else:
            # a rate that keeps falling is correlated across every third: no interval, INVALID as not precise
            # (drift not judged)
            assert (
                not result.verdict.valid
                and result.precision["drift"]["core qps"] is None
                and "remeasured" not in result.precision
            )
            assert any(
                r.startswith("not precise enough: core qps has no interval after ") for r in result.verdict.reasons
            ), result.verdict.reasons


def test_a_row_that_stepped_once_keeps_the_second_windows_latencies(monkeypatch):
    """As PerformanceStage measures a row (tests/test_performance_units.py's fake-clock Rig): the row
    that stepped once is measured again, and its latencies are the kept window's, not the discarded one's."""
    from tests.infra.performance_rig import Rig, make_stage

    rig = Rig(monkeypatch)
    stage, _ = make_stage(
        rig, batch_sizes=[2], audits=False, min_query_count=16, min_duration_s=1.5, max_duration_s=1.5, precision=0.2
    )
    stage.config.latency_precision, stage.config.contention_limit = None, 1.0
    started = [rig.clock.t]

    def stepped(inputs):
        rig.clock.t += 2 * MS if rig.clock.t - started[0] < 900 * MS else 6 * MS
        return [inputs[0]], 0.0

    row = stage._row(stepped, stage.pool(2), 2, "offline", 1, {}, None).to_json()
    assert not any("drifting" in r for r in row["verdict"]["reasons"]), row["verdict"]["reasons"]
    assert (
        row["precision"]["remeasured"]["drift"]["qps"] == pytest.approx(-2 / 3, abs=0.01)
        and len(stage.report.raw_latencies_ns) == 1
    )
    assert len(stage.report.raw_latencies_ns[0]) == row["queries"] == 1500 // 6  # the kept window: 6 ms calls for 1.5 s
