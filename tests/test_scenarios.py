"""tools.measure.scenarios: stop rule, timing, server schedule, sampled outputs, search, validation.

Most tests drive the runner with a fake clock that only the engine step (and the
fake sleep) advance, so every expected number is exact.
"""

from __future__ import annotations

import math
import random
import statistics
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.infra.clocks import MS, FakeClock
from tools.measure.scenarios import SCENARIOS, ScenarioRun, ScenarioSpec, poisson_arrivals, run_scenario, server_search


def costing(clock: FakeClock, ns: int, foo_s: float = 0.0, calls: list | None = None):
    """A step that takes exactly ``ns`` of fake time and declares ``foo_s``."""

    def step(inputs: list):
        if calls is not None:
            calls.append((clock(), inputs))
        clock.advance(ns)
        return [inputs[0]], foo_s

    return step


def make_pool(n: int) -> list[list]:
    return [[f"batch{i}"] for i in range(n)]


def run(step, pool, clock, **kwargs) -> ScenarioRun:
    kwargs.setdefault("min_duration_s", 0.0)
    kwargs.setdefault("max_duration_s", 1000.0)
    kwargs.setdefault("batch_size", 4)
    return run_scenario(step, pool, ScenarioSpec(clock=clock, sleep=clock.sleep, **kwargs))


# --- offline / single_stream with one client ---------------------------------


@pytest.mark.parametrize("scenario", ["offline", "single_stream"])
def test_fixed_cost_step_gives_exact_counts_latencies_and_qps(scenario):
    clock = FakeClock()
    calls: list = []
    pool = make_pool(3)
    result = run(costing(clock, 2 * MS, calls=calls), pool, clock, scenario=scenario, batch_size=4, min_query_count=10)
    assert result.scenario.name == scenario
    assert result.queries == 10
    assert result.samples == 40
    assert result.clients == 1
    assert result.duration_s == pytest.approx(0.020, rel=1e-12)
    assert result.qps == pytest.approx(4 / 0.002, rel=1e-12)  # 2000 samples/s
    assert result.latencies_ns == [2 * MS] * 10
    assert result.completions_ns == [2 * MS * (k + 1) for k in range(10)]
    assert result.stop_reason == "minimums met"
    assert result.foo_time_s == 0.0
    assert result.target_qps is None and result.issued_qps is None
    # round robin over the pool: query i gets pool[i % 3], issued back to back
    assert [inputs is pool[k % 3] for k, (_, inputs) in enumerate(calls)] == [True] * 10
    assert [t - calls[0][0] for t, _ in calls] == [2 * MS * k for k in range(10)]


def test_min_duration_dominates_min_query_count():
    clock = FakeClock()
    result = run(costing(clock, 2 * MS), make_pool(2), clock, scenario="offline", min_query_count=1, min_duration_s=0.1)
    assert result.queries == 50  # 50 * 2 ms = 100 ms
    assert result.stop_reason == "minimums met"
    assert result.duration_s == pytest.approx(0.1, rel=1e-12)


def test_max_duration_caps_the_run():
    clock = FakeClock()
    result = run(
        costing(clock, 2 * MS),
        make_pool(2),
        clock,
        scenario="single_stream",
        min_query_count=1000,
        min_duration_s=1.0,
        max_duration_s=0.05,
    )
    assert result.queries == 25
    assert result.stop_reason == "max_duration_s reached"
    assert result.qps == pytest.approx(25 * 4 / 0.05, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(
    scenario=st.sampled_from(["offline", "single_stream"]),
    cost_us=st.integers(100, 5000),
    min_queries=st.integers(1, 200),
    min_ms=st.integers(0, 300),
    max_ms=st.integers(1, 300),
)
def test_stop_rule_property(scenario, cost_us, min_queries, min_ms, max_ms):
    clock = FakeClock()
    cost = cost_us * 1000
    result = run(
        costing(clock, cost),
        make_pool(3),
        clock,
        scenario=scenario,
        min_query_count=min_queries,
        min_duration_s=min_ms / 1e3,
        max_duration_s=max_ms / 1e3,
    )
    # minimums are met after k_min queries, the cap is hit after k_max queries
    k_min = max(min_queries, math.ceil(min_ms * MS / cost))
    k_max = math.ceil(max_ms * MS / cost)
    assert result.queries == min(k_min, k_max)
    assert result.stop_reason == ("minimums met" if k_min <= k_max else "max_duration_s reached")
    assert result.duration_s == pytest.approx(result.queries * cost / 1e9, rel=1e-12)


def test_zero_cost_step_has_no_qps():
    clock = FakeClock()
    result = run(lambda inputs: (inputs, 0.0), make_pool(1), clock, scenario="offline", min_query_count=3)
    assert result.queries == 3 and result.duration_s == 0.0 and result.qps is None


@pytest.mark.parametrize("scenario", ["offline", "single_stream"])
def test_foo_time_is_subtracted_from_latency_and_duration(scenario):
    clock = FakeClock()
    result = run(
        costing(clock, 2 * MS, foo_s=0.0005), make_pool(2), clock, scenario=scenario, batch_size=2, min_query_count=8
    )
    assert result.latencies_ns == [1_500_000] * 8
    assert result.foo_time_s == pytest.approx(0.004, rel=1e-12)
    assert result.duration_s == pytest.approx(8 * 0.0015, rel=1e-12)
    assert result.qps == pytest.approx(16 / 0.012, rel=1e-12)
    assert result.completions_ns[-1] == 16 * MS  # completions stay raw wall clock


def test_sync_runs_after_each_call_before_the_completion_time():
    clock = FakeClock()
    events: list[str] = []

    def step(inputs):
        events.append("step")
        clock.advance(MS)
        return inputs, 0.0

    def sync():
        events.append("sync")
        clock.advance(3 * MS)  # the device finishes later than the call returns

    result = run_scenario(
        step,
        make_pool(1),
        ScenarioSpec(
            scenario="offline",
            batch_size=1,
            min_query_count=3,
            min_duration_s=0,
            max_duration_s=10,
            sync=sync,
            clock=clock,
        ),
    )
    assert events == ["step", "sync"] * 3
    assert result.latencies_ns == [4 * MS] * 3


# --- server -------------------------------------------------------------------


def expected_server(offsets_ns: list[int], cost: int, foo: int = 0):
    """Independent model of a one-worker server: issue = max(arrival, previous completion)."""
    issues, latencies, completions = [], [], []
    free = 0
    for arrival in offsets_ns:
        issue = max(arrival, free)
        free = issue + cost
        issues.append(issue)
        completions.append(free)
        latencies.append(free - arrival - foo)
    return issues, latencies, completions


def schedule_ns(rate_queries: float, seed: int, count: int) -> list[int]:
    arrivals = poisson_arrivals(rate_queries, random.Random(seed))
    return [int(next(arrivals) * 1e9) for _ in range(count)]


def test_server_fast_step_follows_the_schedule():
    clock = FakeClock()
    calls: list = []
    n, bs, target = 200, 2, 2000.0  # 1000 queries/s: mean gap 1 ms, step 0.1 ms
    result = run(
        costing(clock, 100_000, calls=calls),
        make_pool(3),
        clock,
        scenario="server",
        batch_size=bs,
        target_qps=target,
        seed=7,
        min_query_count=n,
    )
    offsets = schedule_ns(target / bs, 7, n)
    issues, latencies, completions = expected_server(offsets, 100_000)
    start = clock.t - completions[-1]
    assert result.queries == n and result.samples == n * bs
    assert [t - start for t, _ in calls] == issues
    assert result.latencies_ns == latencies
    assert result.completions_ns == completions
    assert result.target_qps == target
    assert result.issued_qps == pytest.approx((n - 1) * bs / (offsets[-1] / 1e9), rel=1e-6)
    assert result.duration_s == pytest.approx(completions[-1] / 1e9, rel=1e-12)
    # it slept exactly once per arrival that was still in the future, and never spun
    assert len(clock.sleeps) == sum(1 for k in range(1, n) if offsets[k] > completions[k - 1])
    assert sum(1 for issue, arrival in zip(issues, offsets) if issue == arrival) > n * 0.8


def test_server_slow_step_queues_and_latency_counts_from_arrival():
    clock = FakeClock()
    n = 100  # arrivals every ~1 ms on average, each query takes 2 ms: a growing backlog
    result = run(
        costing(clock, 2 * MS, foo_s=0.0002),
        make_pool(2),
        clock,
        scenario="server",
        batch_size=1,
        target_qps=1000.0,
        seed=3,
        min_query_count=n,
    )
    offsets = schedule_ns(1000.0, 3, n)
    _, latencies, completions = expected_server(offsets, 2 * MS, foo=200_000)
    assert result.latencies_ns == latencies
    assert result.completions_ns == completions
    assert result.latencies_ns[-1] > 0.5 * n * MS  # queueing shows up as latency
    assert result.latencies_ns[-1] > 20 * result.latencies_ns[0]
    assert result.foo_time_s == pytest.approx(n * 0.0002, rel=1e-12)
    assert result.duration_s == pytest.approx((completions[-1] - n * 200_000) / 1e9, rel=1e-12)


def test_server_stops_at_min_duration_by_schedule():
    clock = FakeClock()
    result = run(
        costing(clock, 10_000),
        make_pool(1),
        clock,
        scenario="server",
        batch_size=1,
        target_qps=1000.0,
        seed=11,
        min_query_count=1,
        min_duration_s=0.05,
    )
    offsets = schedule_ns(1000.0, 11, 200)
    assert result.queries == sum(1 for a in offsets if a < 50 * MS)
    assert result.stop_reason == "minimums met"


def test_server_max_duration_under_backlog():
    clock = FakeClock()
    result = run(
        costing(clock, 10 * MS),
        make_pool(1),
        clock,
        scenario="server",
        batch_size=1,
        target_qps=1000.0,
        min_query_count=10_000,
        max_duration_s=0.1,
    )
    assert result.queries == 10  # always backlogged: the 10th completes at 100 ms
    assert result.stop_reason == "max_duration_s reached"


class OversleepingClock(FakeClock):
    """A fake clock whose sleep, like a real one, returns late: 0.3 ms after it was due, every time."""

    LATE_NS = 300_000

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        self.t += self.LATE_NS


def test_server_schedule_does_not_accumulate_sleep_error():
    """A real sleep returns late. The server schedule is absolute (each arrival at its own offset from
    the start), so a late wake-up delays only the query it was for: every latency is one sleep's lateness,
    the last no later than the first. (A schedule that slept gap after gap would push the 150th query
    about 150 x 0.3 ms late.) On the fake clock, so the lateness is exact whatever the machine."""
    n = 150
    clock = OversleepingClock()
    result = run_scenario(
        lambda inputs: (inputs, 0.0),
        make_pool(2),
        ScenarioSpec(
            scenario="server",
            batch_size=1,
            target_qps=1500.0,
            seed=5,
            min_query_count=n,
            min_duration_s=0,
            max_duration_s=10,
            clock=clock,
            sleep=clock.sleep,
        ),
    )
    offsets = schedule_ns(1500.0, 5, n)
    assert result.queries == n
    arrivals = [c - lat for c, lat in zip(result.completions_ns, result.latencies_ns)]
    assert arrivals == offsets  # latency counts from the scheduled arrival
    # an absolute schedule: a query waited for wakes one lateness after its arrival; one that arrived
    # while its predecessor was still late starts at once (the first, due at the start, is not late)
    expected, free = [], 0
    for arrival in offsets:
        free = arrival + OversleepingClock.LATE_NS if arrival > free else free
        expected.append(free - arrival)
    assert result.latencies_ns == expected and expected[0] == 0
    assert (
        statistics.median(result.latencies_ns) == OversleepingClock.LATE_NS
        and max(result.latencies_ns) < 4 * OversleepingClock.LATE_NS
    )


class InFlight:
    """A step that sleeps 2 ms (real threads: concurrency is the point) and counts the queries in
    flight at once. With ``gather`` > 1 its first ``gather`` calls wait for each other at a barrier:
    they can only all return if that many clients hold a query at the same time (a runner that
    serialised its clients breaks the barrier, and the error reaches the caller). Nothing here asks
    how fast anything ran."""

    def __init__(self, gather: int = 1) -> None:
        self.lock = threading.Lock()
        self.now = self.most = self.calls = 0
        self.barrier = threading.Barrier(gather, timeout=60) if gather > 1 else None

    def __call__(self, inputs):
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.calls += 1
            first = self.calls <= (self.barrier.parties if self.barrier else 0)
        try:
            if first:
                self.barrier.wait()
            time.sleep(0.002)
        finally:
            with self.lock:
                self.now -= 1
        return inputs, 0.0


def test_server_several_clients_serve_a_backlog_concurrently():
    n = 40  # 2000 queries/s, each query sleeps 2 ms: one worker would fall behind, four serve the backlog together
    runs, steps = {}, {}
    for clients in (1, 4):
        steps[clients] = InFlight(gather=clients)
        runs[clients] = run_scenario(
            steps[clients],
            make_pool(3),
            ScenarioSpec(
                scenario="server",
                batch_size=1,
                clients=clients,
                target_qps=2000.0,
                seed=1,
                min_query_count=n,
                min_duration_s=0,
                max_duration_s=10,
            ),
        )
    offsets = schedule_ns(2000.0, 1, n)
    for result in runs.values():
        assert result.queries == n
        assert result.completions_ns == sorted(result.completions_ns)
        assert sorted(c - lat for c, lat in zip(result.completions_ns, result.latencies_ns)) == offsets
        assert result.issued_qps == pytest.approx((n - 1) / (offsets[-1] / 1e9), rel=1e-6)
    assert steps[1].most == 1 and steps[4].most == 4  # four queries of the backlog in flight at once


# --- poisson_arrivals ---------------------------------------------------------


def test_poisson_arrivals_statistics():
    rate, n = 250.0, 20000
    arrivals = poisson_arrivals(rate, random.Random(1234))
    offsets = [next(arrivals) for _ in range(n + 1)]
    assert offsets[0] == 0.0
    gaps = [b - a for a, b in zip(offsets, offsets[1:])]
    assert min(gaps) >= 0.0
    mean = statistics.fmean(gaps)
    assert abs(mean * rate - 1) < 3 / math.sqrt(n)  # 3 sigma of the mean of n exponentials
    cv = statistics.pstdev(gaps) / mean
    assert abs(cv - 1) < 0.04  # exponential: CV 1; constant gaps: 0; uniform gaps: 0.58
    # memoryless shape: P(gap > mean) = 1/e
    assert abs(sum(g > 1 / rate for g in gaps) / n - math.exp(-1)) < 0.015


@settings(max_examples=25, deadline=None)
@given(rate=st.floats(1.0, 1e6), seed=st.integers(0, 2**32))
def test_poisson_arrivals_mean_property(rate, seed):
    n = 4000
    arrivals = poisson_arrivals(rate, random.Random(seed))
    offsets = [next(arrivals) for _ in range(n + 1)]
    assert offsets[0] == 0.0
    assert all(b >= a for a, b in zip(offsets, offsets[1:]))
    assert abs(offsets[-1] / n * rate - 1) < 5 / math.sqrt(n)


def test_poisson_arrivals_is_seeded_and_rejects_bad_rates():
    a, b = poisson_arrivals(10.0, random.Random(9)), poisson_arrivals(10.0, random.Random(9))
    assert [next(a) for _ in range(50)] == [next(b) for _ in range(50)]
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="rate_per_s"):
            poisson_arrivals(bad, random.Random(0))


# --- several clients ----------------------------------------------------------


def test_offline_clients_run_concurrently():
    kwargs = dict(scenario="offline", batch_size=2, min_query_count=1, min_duration_s=0.12, max_duration_s=5)
    one_step, four_step = InFlight(), InFlight(gather=4)
    run_scenario(one_step, make_pool(4), ScenarioSpec(clients=1, **kwargs))
    four = run_scenario(four_step, make_pool(4), ScenarioSpec(clients=4, **kwargs))
    assert four.clients == 4
    assert one_step.most == 1 and four_step.most == 4  # four clients hold four queries at once (InFlight's barrier)
    assert four.completions_ns == sorted(four.completions_ns)
    assert min(four.latencies_ns) >= 2 * MS
    assert four.duration_s >= 0.12


def test_offline_clients_issue_exactly_min_query_count():
    seen: list[int] = []
    pool = make_pool(5)

    def step(inputs):
        seen.append(pool.index(inputs))
        time.sleep(0.001)
        return inputs, 0.0005

    result = run_scenario(
        step,
        pool,
        ScenarioSpec(
            scenario="offline",
            batch_size=3,
            clients=4,
            min_query_count=37,
            min_duration_s=0,
            max_duration_s=10,
            sample_pool_indices={2},
            max_sampled=100,
        ),
    )
    assert result.queries == 37 == len(seen)
    assert sorted(seen) == sorted(i % 5 for i in range(37))
    assert result.foo_time_s == pytest.approx(37 * 0.0005)
    # the window less total foo_time / clients
    assert result.duration_s == pytest.approx((result.completions_ns[-1] - 37 * 500_000 / 4) / 1e9, rel=1e-12)
    assert sorted(result.sampled_outputs) == [i for i in range(37) if i % 5 == 2]
    assert all(lat >= 500_000 for lat in result.latencies_ns)


def test_errors_in_client_threads_reach_the_caller():
    def step(inputs):
        raise RuntimeError("engine broke")

    with pytest.raises(RuntimeError, match="engine broke"):
        run_scenario(
            step,
            make_pool(1),
            ScenarioSpec(
                scenario="offline", batch_size=1, clients=3, min_query_count=5, min_duration_s=0, max_duration_s=5
            ),
        )


# --- sampled outputs ----------------------------------------------------------


class FakeTensor:
    def __init__(self, value: list, clock: FakeClock) -> None:
        self.value, self.clock = value, clock

    def clone(self) -> "FakeTensor":
        self.clock.advance(7 * MS)  # an expensive copy: must not land in any latency
        return FakeTensor(list(self.value), self.clock)


def test_sampled_outputs_are_eligible_bounded_spread_copies():
    clock = FakeClock()
    produced: dict[int, list] = {}

    def step(inputs):
        clock.advance(2 * MS)
        query = len(produced)
        produced[query] = [{"query": query}, FakeTensor([query], clock)]
        return produced[query], 0.0

    result = run(
        step, make_pool(5), clock, scenario="offline", min_query_count=200, sample_pool_indices={1, 3}, max_sampled=4
    )
    assert result.queries == 200
    assert result.latencies_ns == [2 * MS] * 200  # copies are made after the completion time
    samples = result.sampled_outputs
    assert 2 <= len(samples) <= 4
    for query, (pool_index, outputs) in samples.items():
        assert pool_index == query % 5 and pool_index in {1, 3}
        assert outputs[0] == {"query": query} and outputs[1].value == [query]
        produced[query][0]["query"] = -1  # mutating the original leaves the copy alone
        produced[query][1].value.append(-1)
        assert outputs[0] == {"query": query} and outputs[1].value == [query]
    assert min(samples) == 1  # the first eligible query
    assert max(samples) >= 100  # and the rest spread over the run, not bunched at the start


@settings(max_examples=60, deadline=None)
@given(queries=st.integers(1, 300), limit=st.integers(1, 10))
def test_sampled_outputs_property(queries, limit):
    clock = FakeClock()
    result = run(
        costing(clock, MS),
        make_pool(1),
        clock,
        scenario="single_stream",
        min_query_count=queries,
        sample_pool_indices={0},
        max_sampled=limit,
    )
    kept = sorted(result.sampled_outputs)
    assert 1 <= len(kept) <= limit
    assert len(kept) >= min(queries, math.ceil(limit / 2))
    assert kept[0] == 0
    gaps = {b - a for a, b in zip(kept, kept[1:])}
    assert len(gaps) <= 1  # evenly spaced ...
    if gaps:
        assert kept[-1] > queries - 1 - gaps.pop()  # ... up to the end of the run
        assert kept[-1] >= (queries - 1) / 2
    assert all(result.sampled_outputs[q] == (0, ["batch0"]) for q in kept)


def test_no_sampling_by_default_or_with_max_sampled_zero():
    clock = FakeClock()
    assert run(costing(clock, MS), make_pool(2), clock, scenario="offline", min_query_count=5).sampled_outputs == {}
    assert (
        run(
            costing(clock, MS),
            make_pool(2),
            clock,
            scenario="offline",
            min_query_count=5,
            sample_pool_indices={0, 1},
            max_sampled=0,
        ).sampled_outputs
        == {}
    )


# --- server_search ------------------------------------------------------------


def fake_run_at(p99_of):
    def run_at(qps):
        return ScenarioRun("server", 1, 1, 1, 1, 1.0, [p99_of(qps)], [1], 0.0, "minimums met", target_qps=qps)

    return run_at, lambda r: r.latencies_ns[0]


def test_server_search_bisects_to_the_threshold():
    run_at, p99 = fake_run_at(lambda q: q / 100)  # p99 10 ms at 1000 qps: the 7 ms bound is met up to 700
    result = server_search(run_at, upper_qps=1000.0, latency_bound_ms=7.0, p99_ms=p99, iterations=6)
    assert [t[0] for t in result.trials] == [1000.0, 500.0, 750.0, 625.0, 687.5, 718.75, 703.125]
    assert [t[2] for t in result.trials] == [False, True, False, True, True, False, False]
    assert [t[1] for t in result.trials] == [q / 100 for q, _, _ in result.trials]
    assert result.best.target_qps == 687.5
    assert 700 - 1000 / 2**6 < result.best.target_qps <= 700


@settings(max_examples=40, deadline=None)
@given(threshold=st.floats(1.0, 999.0), iterations=st.integers(1, 12))
def test_server_search_resolution_property(threshold, iterations):
    run_at, p99 = fake_run_at(lambda q: 5.0 * q / threshold)  # bound 5 ms met iff q <= threshold
    result = server_search(run_at, upper_qps=1000.0, latency_bound_ms=5.0, p99_ms=p99, iterations=iterations)
    assert len(result.trials) == iterations + 1
    if result.best is None:
        assert threshold < 1000 / 2**iterations
    else:
        assert threshold - 1000 / 2**iterations < result.best.target_qps <= threshold
        assert result.best.target_qps == max(q for q, _, met in result.trials if met)


def test_server_search_met_at_upper_and_none_counts_as_not_met():
    run_at, p99 = fake_run_at(lambda q: 1.0)
    result = server_search(run_at, upper_qps=800.0, latency_bound_ms=5.0, p99_ms=p99)
    assert result.best.target_qps == 800.0 and result.trials == [(800.0, 1.0, True)]

    run_at, p99 = fake_run_at(lambda q: None if q > 300 else 1.0)  # e.g. too few queries for a p99
    result = server_search(run_at, upper_qps=1000.0, latency_bound_ms=5.0, p99_ms=p99, iterations=6)
    assert result.trials[0] == (1000.0, None, False)
    assert 300 - 1000 / 64 < result.best.target_qps <= 300

    run_at, p99 = fake_run_at(lambda q: None)
    result = server_search(run_at, upper_qps=1000.0, latency_bound_ms=5.0, p99_ms=p99, iterations=3)
    assert result.best is None and len(result.trials) == 4 and not any(t[2] for t in result.trials)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(upper_qps=0.0), "upper_qps"),
        (dict(latency_bound_ms=-1.0), "latency_bound_ms"),
        (dict(iterations=-1), "iterations"),
    ],
)
def test_server_search_validation(kwargs, match):
    base = dict(upper_qps=100.0, latency_bound_ms=5.0, p99_ms=lambda r: 1.0)
    with pytest.raises(ValueError, match=match):
        server_search(lambda q: None, **{**base, **kwargs})


# --- validation ---------------------------------------------------------------

BASE = dict(scenario="offline", batch_size=2, min_query_count=1, min_duration_s=0.0, max_duration_s=1.0)


@pytest.mark.parametrize(
    "changes, pool, match",
    [
        (
            dict(scenario="multi-stream"),
            None,
            "unknown scenario 'multi-stream': expected one of offline, single_stream, multi_stream, server",
        ),
        (dict(clients=0), None, "clients must be"),
        (dict(scenario="single_stream", clients=2), None, "clients must be 1"),
        (
            dict(scenario="multi_stream", clients=2),
            None,
            "multi_stream: issues one query at a time, so clients must be 1, got 2",
        ),
        (
            dict(scenario="multi_stream", samples_per_query=5),
            None,
            "samples_per_query must be a positive multiple of batch_size 2, got 5",
        ),
        (dict(min_query_count=0), None, "min_query_count"),
        (dict(min_duration_s=-0.1), None, "min_duration_s"),
        (dict(max_duration_s=-1.0), None, "max_duration_s"),
        (dict(max_duration_s=0.0), None, "max_duration_s"),
        (dict(batch_size=0), None, "batch_size"),
        (dict(scenario="server"), None, "target_qps"),
        (dict(scenario="server", target_qps=0.0), None, "target_qps"),
        (dict(scenario="server", target_qps=-5.0), None, "target_qps"),
        (dict(), [], "pool of batches is empty"),
        (dict(), [["a"], ("b",)], "pool batch 1 must be a list"),
        (dict(max_sampled=-1), None, "max_sampled"),
        (dict(sample_pool_indices={3}), None, "sample_pool_indices"),
    ],
)
def test_run_scenario_validation(changes, pool, match):
    called = []
    with pytest.raises(ValueError, match=match):
        run_scenario(
            lambda inputs: called.append(1), make_pool(2) if pool is None else pool, ScenarioSpec(**{**BASE, **changes})
        )
    assert called == []  # nothing ran


def test_target_qps_is_ignored_outside_the_server_scenario():
    clock = FakeClock()
    result = run(costing(clock, MS), make_pool(1), clock, scenario="offline", min_query_count=4, target_qps=123.0)
    assert result.queries == 4 and result.target_qps is None and result.issued_qps is None


def test_scenario_names():
    assert tuple(SCENARIOS) == ("offline", "single_stream", "multi_stream", "server")
