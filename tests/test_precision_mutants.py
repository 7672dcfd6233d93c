"""tools.measure.precision and tools.measure.rows at their edges: exact values worked out by hand
(or with numpy beside the code), each comparison approached from both sides, every sentence.

tests/test_precision.py shows the method working (coverage, the stop rule on a fake clock, each
reason provoked for real); this file pins what a small slip in the code would change: the
float64 timelines, empty timelines, a part's borders, sub-nanosecond queries, the honest lag-1 and
the effective number of blocks at their limits, the AR(1) widening, the drift test's thirds just inside and just
outside their intervals, ties of the stop rule and of the settle test, and the row's intervals as
``tools.measure.rows`` writes them (docs/testing.md, "Mutation testing").
"""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import numpy as np
import pytest

from common.stats import LatencyStats
from contract.config import setting
from contract.settings import MEASUREMENT_DEFAULTS, OUT_OF_REACH
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
    precision_block,
    precision_reasons,
    settle,
    settled,
    throughput_interval,
)
from tools.measure.rows import PERCENTILES, row_intervals
from tools.measure.scenarios import ScenarioRun

MS = 1_000_000


def _lag1_by_hand(values) -> float:
    c = np.asarray(values, dtype=float) - np.mean(values)
    return float(np.dot(c[:-1], c[1:]) / np.dot(c, c))


# ---- timelines ------------------------------------------------------------------------------------
def test_timelines_are_float64_whatever_they_are_given():
    for timeline in (
        Timeline.tiled([2, 4, 8], [1, 1, 2]),
        Timeline.spans([5, 6, 9], [5, 2, 20], [1, 2, 3]),
        Timeline.tiled([3], 2),
    ):
        assert timeline.begin_ns.dtype == timeline.end_ns.dtype == timeline.samples.dtype == np.float64


def test_empty_timelines_and_a_given_span():
    for empty in (Timeline.tiled([], 1), Timeline.spans([], [], 1)):
        assert (
            empty.queries,
            empty.span_ns,
            empty.begin_ns.tolist(),
            empty.end_ns.tolist(),
            empty.samples.tolist(),
        ) == (0, 0.0, [], [], [])
    given = Timeline.spans([5, 6], [5, 2], [1, 2], span_ns=20)
    assert given.span_ns == 20.0 and given.begin_ns.tolist() == [0.0, 4.0] and given.samples.tolist() == [1.0, 2.0]


def test_queries_of_no_duration_and_under_a_nanosecond():
    # two queries of no duration at 0 and one of 1 ns: a query of no duration is done the moment it ends
    zero = Timeline.tiled([0, 0, 1], 1)
    assert (zero.work_at(0), zero.work_at(0.5), zero.work_at(1)) == (0.0, 2.5, 3.0)
    # [2, 3] has 0.75 ns of its 1 ns inside [2.25, 4] (3 of its 4 samples); [2, 2.5] 0.25 of its 0.5 ns (2 of 4)
    short = Timeline(np.array([2.0, 2.0]), np.array([3.0, 2.5]), np.array([4.0, 4.0]), 4.0).part(2.25, 4.0)
    assert (
        short.samples.tolist() == [3.0, 2.0]
        and short.begin_ns.tolist() == [0.0, 0.0]
        and short.end_ns.tolist() == [0.75, 0.25]
    )
    assert short.span_ns == 1.75


def test_a_part_owns_an_instant_query_at_its_stop_not_at_its_start():
    instants = Timeline(np.array([2.0, 4.0, 6.0]), np.array([2.0, 4.0, 6.0]), np.array([1.0, 2.0, 4.0]), 8.0)
    inside = instants.part(2.0, 6.0)
    assert inside.samples.tolist() == [2.0, 4.0] and inside.end_ns.tolist() == [
        2.0,
        4.0,
    ]  # the one at 2 belongs to the part before
    assert instants.part(0.0, 2.0).samples.tolist() == [1.0] and instants.part(6.0, 8.0).samples.tolist() == []


def test_lag1_of_values_below_one():
    assert lag1(np.array([0.1, 0.2, 0.3, 0.4])) == pytest.approx(0.25)  # the denominator is 0.05: small, not zero
    assert lag1(np.array([1e-6, 3e-6, 1e-6, 3e-6])) == pytest.approx(-0.75)


def test_around_an_interval_whose_value_is_below_one():
    interval = Interval(0.5, 0.25, 0.75, 8, 0.0)  # half a sample per second
    assert interval.around(10.0) == [5.0, 15.0] and interval.relative == 0.5


# ---- the interval ---------------------------------------------------------------------------------
def test_one_nanosecond_of_time_gives_an_interval():
    # 15 queries of no duration at 0 and one of 1 ns: 16 samples in 1 ns, 16 blocks of 1/16 ns
    interval = throughput_interval(Timeline.tiled([0] * 15 + [1], 1))
    assert interval is not None and interval.batches == 16 and interval.value == pytest.approx(16e9)


RATES = [6, 2, 3, 5, 5, 5, 5, 7, 7, 1, 3, 4, 4, 2, 3, 2]  # lag-1 exactly 0.2


def _by_hand(rates: list[float]) -> tuple[float, float, float]:
    """(honest lag-1, effective blocks, half-width) of 1-s queries carrying ``rates`` samples, worked out apart
    from the code."""
    k = len(rates)
    r = _lag1_by_hand(rates)
    corrected = max(r + (1 + 3 * r) / k, 0.0)
    honest = corrected + math.sqrt((1 - corrected**2) / k)
    effective = k * (1 - honest) / (1 + honest)
    scipy_stats = pytest.importorskip("scipy.stats")
    half = (
        scipy_stats.t.ppf(0.975, int(effective) - 1)
        * float(np.std(rates, ddof=1))
        * math.sqrt((1 + honest) / (1 - honest) / k)
    )
    return honest, effective, half


def test_positive_correlation_widens_the_interval_by_the_honest_ar1_factor():
    # 16 queries of 1 s: 16 blocks (one query each) whose lag-1 is 0.2, raised to 0.3 + sqrt(0.91 / 16)
    assert _lag1_by_hand(RATES) == 0.2
    honest, effective, half = _by_hand(RATES)
    assert honest == pytest.approx(0.3 + math.sqrt(0.91 / 16)) and int(effective) == 4
    interval = throughput_interval(Timeline.tiled([(k + 1) * 1e9 for k in range(16)], RATES))
    assert (interval.batches, interval.value, interval.lag1) == (16, 4.0, pytest.approx(0.2))
    assert interval.effective == pytest.approx(effective) and (interval.lo, interval.hi) == pytest.approx(
        (4.0 - half, 4.0 + half), rel=1e-4
    )


def test_too_few_effective_blocks_or_too_much_correlation_gives_no_interval(monkeypatch):
    timeline = Timeline.tiled([(k + 1) * 1e9 for k in range(16)], RATES)
    honest, effective, _ = _by_hand(RATES)
    monkeypatch.setattr(precision, "MIN_EFFECTIVE_BLOCKS", effective * (1 - 1e-9))
    assert throughput_interval(timeline) is not None  # exactly enough blocks
    monkeypatch.setattr(precision, "MIN_EFFECTIVE_BLOCKS", effective * (1 + 1e-9))
    assert throughput_interval(timeline) is None
    monkeypatch.setattr(precision, "MIN_EFFECTIVE_BLOCKS", 1.0)
    monkeypatch.setattr(precision, "MAX_LAG1", honest * (1 + 1e-9))
    assert throughput_interval(timeline) is not None
    monkeypatch.setattr(precision, "MAX_LAG1", honest)
    assert throughput_interval(timeline) is None  # a lag-1 at the limit is too much
    # a rate that climbs across the whole window (1, 1, 2, 2, ..., 8, 8) is correlated across it: no interval
    monkeypatch.undo()
    assert (
        throughput_interval(
            Timeline.tiled([(k + 1) * 1e9 for k in range(16)], [r for r in range(1, 9) for _ in range(2)])
        )
        is None
    )


# ---- precision, the stop rule and its sentences ------------------------------------------------------
def test_a_width_equal_to_its_precision_is_precise():
    assert (
        imprecise(Target(precision=0.02), Figures({"qps": Interval(100.0, 98.0, 102.0, 8, 0.0)})) == {}
    )  # ±2 % exactly
    assert imprecise(Target(precision=0.02), Figures({"qps": Interval(100.0, 97.0, 103.0, 8, 0.0)})) == {"qps": 0.03}
    # the headline percentile is judged on its own precision, not the throughputs'
    target = Target(precision=0.02, percentile="p90", latency_precision=0.05)
    assert imprecise(target, Figures({}, {"p90": (10.0, [9.7, 10.3])})) == {}
    assert imprecise(target, Figures({}, {"p90": (10.0, [9.4, 10.6])})) == {"p90": pytest.approx(0.06)}


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def test_the_stop_rule_looks_again_exactly_check_every_s_later():
    looks = []
    rule = StopRule(Target(check_every_s=2.0), Clock(), max_s=1e9)
    for now in (0, 1_999_999_999, 2_000_000_000, 3_000_000_000, 3_999_999_999, 4_000_000_000):
        rule.decide(now, now, lambda now=now: looks.append(now) or Figures({"qps": Interval(1.0, 0.9, 1.1, 8, 0.0)}))
    assert looks == [0, 2_000_000_000, 4_000_000_000] and rule.checks == 3


def test_out_of_reach_at_the_exact_bound():
    # ±25 % asked to reach 12.5 %: four times the time so far; max_s 15 allows 4 x 15 = 60 s
    wide = Figures({"qps": Interval(1.0, 0.75, 1.25, 8, 0.0)})
    rule = StopRule(Target(precision=0.125, check_every_s=0.0), Clock(), max_s=15)
    assert rule.decide(0, 15 * 10**9, lambda: wide) is None  # 60 s needed: not beyond the bound
    assert rule.decide(1, 15 * 10**9 + 1, lambda: wide) == OUT_OF_REACH  # 60.000000004 s
    # the headline percentile's own precision decides: ±20 % to 10 % after 10 s needs 40 s
    target = Target(precision=0.02, percentile="p90", latency_precision=0.1, check_every_s=0.0)
    p90 = Figures({}, {"p90": (10.0, [8.0, 12.0])})
    assert StopRule(target, Clock(), max_s=11).decide(0, 10 * 10**9, lambda: p90) is None  # 40 <= 44
    assert StopRule(target, Clock(), max_s=9.9).decide(0, 10 * 10**9, lambda: p90) == OUT_OF_REACH  # 40 > 39.6


def test_reasons_for_a_percentile_out_of_reach_and_for_drifts():
    target = Target(throughput=("qps",), precision=0.02, percentile="p90", latency_precision=0.05)
    wide = Figures({"qps": Interval(100.0, 95.2, 104.8, 8, 0.0)}, {"p90": (10.0, [9.0, 12.0])})
    assert precision_reasons(target, wide, {}, 6.0, OUT_OF_REACH)[1] == (
        "not precise enough: p90 ±15.0% after 6 s (precision 5%; out of reach: about 54 s needed)"  # 6 x (15 / 5)^2
    )
    steady = Interval(100.0, 100.0, 100.0, 8, 0.0)
    drifts = {
        "qps": Drift(-0.5, steady, steady, True),
        "core qps": None,
        "whole qps": Drift(0.01, steady, steady, False),
    }
    assert precision_reasons(Target(), Figures({"qps": steady}), drifts, 1.0) == [
        "drifting: qps fell 50% from the first to the last third"
    ]


# ---- drift ------------------------------------------------------------------------------------------
def _thirds(timeline: Timeline) -> tuple[Interval, Interval]:
    third = timeline.span_ns / 3
    return throughput_interval(timeline.part(0.0, third)), throughput_interval(
        timeline.part(timeline.span_ns - third, timeline.span_ns)
    )


def _noisy(last_samples: float) -> Timeline:
    """Three equal thirds of the same 48 noisy query times (1, 2 or 3 ms); the last third's queries carry
    ``last_samples`` samples instead of 1, so its rate and its interval both scale by that factor."""
    rng = random.Random(4)
    times = [rng.choice([MS, 2 * MS, 3 * MS]) for _ in range(48)]
    return Timeline.tiled(np.cumsum(times * 3), [1.0] * 96 + [last_samples] * 48)


@pytest.mark.parametrize("ratio", [0.95, 1.05])
def test_drift_just_inside_and_just_outside_the_thirds_intervals(ratio):
    """The last third's rate is set so that the thirds' gap is ``ratio`` x the sum of their half-widths."""
    first, _ = _thirds(_noisy(1.0))
    r = first.value / ((first.hi - first.lo) / 2)
    timeline = _noisy((r + ratio) / (r - ratio))
    first, last = _thirds(timeline)
    first_half, last_half = (first.hi - first.lo) / 2, (last.hi - last.lo) / 2
    gap = last.value - first.value
    assert (
        gap / (first_half + last_half) == pytest.approx(ratio) and last_half > first_half > 0
    )  # the case is what it says
    found = drift(timeline, None)
    assert [found.first.value, found.first.lo, found.last.value, found.last.hi] == pytest.approx(
        [first.value, first.lo, last.value, last.hi]
    )
    assert found.change == pytest.approx(gap / first.value)
    assert found.drifting is (ratio > 1)
    # the precision asked for must be exceeded, not met
    assert drift(timeline, abs(found.change)).drifting is False
    assert drift(timeline, abs(found.change) * (1 - 1e-9)).drifting is (ratio > 1)
    if ratio > 1:
        assert drift_reason("qps", found) == f"drifting: qps rose {found.change:.0%} from the first to the last third"
        assert drift_reason("qps", found).startswith("drifting: qps rose 51%")


def test_drift_needs_both_thirds_and_a_first_third_that_did_work():
    fast_then_slow = Timeline.tiled(np.cumsum([MS] * 48 + [16 * MS] * 3), 1)  # the last third holds 2 queries
    slow_then_fast = Timeline.tiled(np.cumsum([16 * MS] * 3 + [MS] * 48), 1)  # the first third holds 2 queries
    assert [(f is None, t is None) for f, t in (_thirds(fast_then_slow), _thirds(slow_then_fast))] == [
        (False, True),
        (True, False),
    ]
    assert drift(fast_then_slow, 0.02) is None and drift(slow_then_fast, 0.02) is None
    idle_first = Timeline.tiled(np.cumsum([MS] * 60), [0] * 21 + [1] * 39)  # no samples in the first third
    assert _thirds(idle_first)[0].value == 0.0 and drift(idle_first, 0.02) is None


def test_drift_within_the_precision_is_judged_where_a_third_has_no_interval():
    """A slow wave across the window leaves each third too correlated for an interval; drifting needs a
    change over the precision, so thirds within it are judged steady, and thirds that differ by more stay
    not judged (None): the intervals that would decide are missing."""

    def wave(amplitude: float) -> Timeline:
        return Timeline.tiled(np.cumsum([MS * (1 + amplitude * np.sin(2 * np.pi * i / 150)) for i in range(300)]), 1)

    gentle, strong = wave(0.02), wave(0.3)
    assert _thirds(gentle) == (None, None) and _thirds(strong) == (None, None)
    steady = drift(gentle, 0.10)
    assert steady is not None and not steady.drifting and abs(steady.change) <= 0.10
    assert steady.to_dict()["first_third"] is None and drift_reason("qps", steady) is None
    assert drift(gentle, abs(steady.change) * (1 - 1e-9)) is None  # just over the precision: not judged
    assert drift(gentle, None) is None and drift(strong, 0.10) is None


def test_drift_of_slow_and_of_nanosecond_timelines():
    slow = drift(Timeline.tiled(np.cumsum([2e9] * 60), 1), 0.02)  # half a sample per second, steady
    assert (
        slow.first.value == pytest.approx(0.5)
        and slow.change == pytest.approx(0.0, abs=1e-12)
        and slow.drifting is False
    )
    # 48 queries of 1 ns: each third holds exactly 16, the least an interval needs
    tiny = drift(Timeline.tiled(range(1, 49), 1), 0.02)
    assert (
        (tiny.first.batches, tiny.last.batches) == (16, 16)
        and tiny.first.value == pytest.approx(1e9)
        and tiny.drifting is False
    )


# ---- settle -------------------------------------------------------------------------------------------
def test_block_noise_of_a_mean_below_one_nanosecond():
    assert precision._block_noise([0, 2]) == 1.0  # mean 1 ns, variance 2: sqrt(2 / 2) / 1


def test_settled_compares_only_the_last_two_blocks():
    assert settled([MS, MS, MS, 10 * MS, 10 * MS], 1) == (True, 0.0)
    # a block of no measurable time counts as 1 ns
    assert settled([0, 3], 1) == (False, pytest.approx(-2 / 3)) and settled([3, 0], 1) == (False, pytest.approx(2.0))
    # a change exactly as large as the noise has settled: [3, 5] has noise 2 x 1/4, and 8 + 8 is half the rate of 3 + 5
    assert 2 * precision._block_noise([3, 5]) == 0.5 and settled([3, 5, 8, 8], 2) == (True, -0.5)


def test_settled_adds_the_two_blocks_noise_in_quadrature():
    # previous block steady (noise 0), latest [1, 3] ms (noise 1/2): the limit is 2 x sqrt(0 + 1/4) = 1.
    # A rate 85 % above the previous block's is within it; with the latest noise cubed (2 x 0.35) it would not be.
    steady = 3_700_000
    assert settled([steady, steady, MS, 3 * MS], 2) == (True, pytest.approx(0.85))


def test_settle_stops_exactly_at_its_bound():
    clock = Clock()
    calls = []

    def slower_and_slower() -> int:  # 20 % slower a call from 25 ms (never settles); the clock moves 100 ms a call
        calls.append(int(25 * MS * 1.2 ** len(calls)))
        clock.now += 100 * MS
        return calls[-1]

    found = settle(slower_and_slower, clock, 1.0)
    assert found.settled is False and found.block == 10  # ceil(0.25 s / 25 ms)
    assert (found.queries, found.seconds, found.last_change) == (
        10,
        1.0,
        None,
    )  # one block done, none to compare it with
    assert found.to_dict() == {
        "settle_s": 1.0,
        "settle_queries": 10,
        "settled": False,
        "settle_block": 10,
        "settle_change": None,
    }


# ---- the precision block ---------------------------------------------------------------------------
def test_precision_block_latency_target_achieved_and_drift():
    steady = Interval(100.0, 99.0, 101.0, 8, 0.0)
    assert precision_block(Target(), Figures({"qps": steady}), Settle(), {}, 0, "x")["latency_target"] is None
    own = precision_block(
        Target(percentile="p90", latency_precision=0.05),
        Figures({"qps": steady}, {"p90": (None, None)}),
        Settle(),
        {},
        0,
        "x",
    )
    assert own["latency_target"] == 0.05 and own["achieved"] is None and own["figures"] == {"qps": 0.01, "p90": None}
    found = Drift(-0.25, steady, Interval(75.0, 74.0, 76.0, 8, 0.0), True)
    block = precision_block(Target(), Figures({"qps": steady}), Settle(), {"qps": found, "core qps": None}, 0, "x")
    assert block["drift"] == {
        "qps": {"change": -0.25, "first_third": [99.0, 101.0], "last_third": [74.0, 76.0], "drifting": True},
        "core qps": None,
    }
    assert block["achieved"] == 0.01


# ---- tools.measure.rows ------------------------------------------------------------------------------
def _run(scenario: str, durations_ns: list[int], clients: int = 1, **extra) -> ScenarioRun:
    completions = np.cumsum(durations_ns).tolist() if durations_ns else []
    return ScenarioRun(
        scenario=scenario,
        batch_size=1,
        clients=clients,
        queries=len(durations_ns),
        samples=len(durations_ns),
        duration_s=(completions[-1] / 1e9) if completions else 0.0,
        latencies_ns=list(durations_ns),
        completions_ns=completions,
        foo_time_s=0.0,
        stop_reason="precision reached",
        checks=5,
        **extra,
    )


def test_row_intervals_of_an_offline_run_that_slowed_by_one_percent():
    durations = [MS] * 300 + [1_010_000] * 300
    run = _run("offline", durations)
    config = SimpleNamespace(precision=0.02, latency_precision=None)
    out = row_intervals(run, config, Settle(0.5, 10, True, 2, 0.01), qps=123.0)
    # one step and no noise: the blocks' lag-1 is near 1, the window is correlated across its length: no interval
    assert throughput_interval(Timeline.tiled(np.cumsum(durations), 1)) is None and out["qps_ci95"] is None
    noisy = [MS + 1000 * (k % 7) for k in range(600)]
    interval = throughput_interval(Timeline.tiled(np.cumsum(noisy), 1))
    assert interval.hi > interval.lo and row_intervals(_run("offline", noisy), config, qps=123.0)[
        "qps_ci95"
    ] == pytest.approx([123.0 * interval.lo / interval.value, 123.0 * interval.hi / interval.value])
    own = _run("offline", noisy)  # no figure given: the interval is around the run's own rate
    assert row_intervals(own, config)["qps_ci95"] == pytest.approx(
        [own.qps * interval.lo / interval.value, own.qps * interval.hi / interval.value]
    )
    stats = LatencyStats.from_ns(durations)
    assert (
        out["latency_ci95"] == {name: stats.ci95[name] for name in PERCENTILES}
        and out["latency_ci95"]["p50"] is not None
    )
    # below 512 queries the same step leaves p50 without an honest interval: ranks correlated across the window
    # ("± n/a")
    assert LatencyStats.from_ns(durations[100:500]).ci95["p50"] is None
    block = out["precision"]
    assert (block["target"], block["checks"], block["stop_reason"], block["settle_s"], block["settle_block"]) == (
        0.02,
        5,
        "precision reached",
        0.5,
        2,
    )
    # 1 % slower: outside the thirds' (zero-width) intervals but within the 2 % asked for; asked for nothing, it drifts
    assert block["drift"]["qps"]["drifting"] is False and block["drift"]["qps"]["change"] == pytest.approx(
        -1 / 101, rel=1e-6
    )
    assert (
        row_intervals(run, SimpleNamespace(precision=None, latency_precision=None))["precision"]["drift"]["qps"][
            "drifting"
        ]
        is True
    )


def test_row_intervals_of_single_stream_server_and_empty_runs():
    config = SimpleNamespace(precision=0.05, latency_precision=0.1)
    single = row_intervals(_run("single_stream", [MS + 1000 * (k % 7) for k in range(100)]), config)["precision"]
    assert (
        set(single["figures"]) == {"qps", "p90"}
        and single["figures"]["p90"] is not None
        and single["latency_target"] == 0.1
    )
    server = row_intervals(_run("server", [2 * MS] * 700, clients=2), config)["precision"]  # p99 needs 662
    assert server["drift"] == {} and set(server["figures"]) == {"p99"} and server["figures"]["p99"] is not None
    empty = row_intervals(_run("offline", []), config)
    assert (
        empty["qps_ci95"] is None
        and empty["latency_ci95"] == dict.fromkeys(PERCENTILES)
        and empty["precision"]["drift"] == {"qps": None}
    )
    assert empty["precision"]["settle_s"] == 0.0 and empty["precision"]["figures"] == {"qps": None}


def test_setting_falls_back_to_the_framework_default():
    assert setting(SimpleNamespace(), "settle_max_s") == MEASUREMENT_DEFAULTS["settle_max_s"] == 10.0
    assert setting(SimpleNamespace(settle_max_s=0.0), "settle_max_s") == 0.0


# ---- a drifted window measured once more ---------------------------------------------------------
def test_drifting_reads_only_the_drifting_figures_of_a_block():
    assert precision.drifting(None) == {} and precision.drifting({}) == {} and precision.drifting({"drift": None}) == {}
    block = {
        "drift": {
            "core qps": {"change": -0.25, "drifting": True},
            "whole qps": {"change": 0.01, "drifting": False},
            "qps": None,
        }
    }
    assert precision.drifting(block) == {"core qps": -0.25}
    assert precision.drifting({"drift": {"qps": {"change": 0.4}}}) == {}  # no verdict: not drifting


def _attempts(*blocks):
    """A measure() handing out one result per call: (its precision block, its reasons)."""
    results = iter([{"block": block, "reasons": [f"reason {n}"]} for n, block in enumerate(blocks)])
    calls = []

    def measure():
        calls.append(1)
        return next(results)

    return measure, calls


def test_only_drift_measures_once_more_only_a_window_whose_every_reason_is_its_drift():
    moved = {"drift": {"qps": {"change": -0.3, "drifting": True}}}
    steady = {"drift": {"qps": {"change": 0.0, "drifting": False}}}
    drift_only = ["drifting: qps fell 30% from the first to the last third"]

    def attempts(first_reasons):
        results = iter([{"block": moved, "reasons": first_reasons}, {"block": dict(steady), "reasons": []}])
        calls = []
        return (lambda: calls.append(1) or next(results)), calls

    measure, calls = attempts(drift_only)
    found = precision.measured_once_more_on_drift(
        measure, lambda r: r["block"], lambda r: r["reasons"], only_drift=True
    )
    assert len(calls) == 2 and found["block"]["remeasured"]["reasons"] == drift_only
    measure, calls = attempts([*drift_only, "contention: other processes used 50% of the 2 CPU(s)"])
    found = precision.measured_once_more_on_drift(
        measure, lambda r: r["block"], lambda r: r["reasons"], only_drift=True
    )
    assert len(calls) == 1 and found["block"] is moved
    measure, calls = attempts(["contention: other processes used 50% of the 2 CPU(s)", *drift_only])
    found = precision.measured_once_more_on_drift(measure, lambda r: r["block"], lambda r: r["reasons"])
    assert len(calls) == 2  # without only_drift: any drifted window


def test_a_steady_window_is_measured_once_and_a_drifted_one_twice():
    steady = {"drift": {"qps": {"change": 0.3, "drifting": False}}}
    moved = {"drift": {"qps": {"change": -0.3, "drifting": True}}}
    discarded = []

    measure, calls = _attempts(steady, steady)
    found = precision.measured_once_more_on_drift(
        measure, lambda r: r["block"], lambda r: r["reasons"], discarded.append
    )
    assert (
        len(calls) == 1 and found["reasons"] == ["reason 0"] and "remeasured" not in found["block"] and discarded == []
    )

    measure, calls = _attempts(moved, dict(steady))
    found = precision.measured_once_more_on_drift(
        measure, lambda r: r["block"], lambda r: r["reasons"], discarded.append
    )
    assert len(calls) == 2 and found["reasons"] == ["reason 1"]
    assert found["block"]["remeasured"] == {"drift": {"qps": -0.3}, "reasons": ["reason 0"]}
    assert [d["reasons"] for d in discarded] == [["reason 0"]]

    # The second window drifts too: it is still the result (INVALID by its own reasons), measured no third time.
    measure, calls = _attempts(moved, {"drift": {"qps": {"change": -0.2, "drifting": True}}})
    found = precision.measured_once_more_on_drift(measure, lambda r: r["block"], lambda r: r["reasons"])
    assert (
        len(calls) == 2 and found["reasons"] == ["reason 1"] and found["block"]["remeasured"]["drift"] == {"qps": -0.3}
    )

    # A result without a precision block (a case that timed itself) is measured once more, nothing recorded.
    measure, calls = _attempts(moved, None)
    assert (
        precision.measured_once_more_on_drift(measure, lambda r: r["block"], lambda r: r["reasons"])["block"] is None
        and len(calls) == 2
    )
