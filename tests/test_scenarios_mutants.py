"""tools.measure.scenarios, pinned to the nanosecond on every runner (mutation testing, docs/testing.md).

The several-client runner (``_threads``) is driven on the fake clock by running
its workers one after another (``_run_threads`` replaced): the first worker
does all the work, the others find the stop reason and return. Its results must
then equal the one-client runners' exactly, which checks the shared arithmetic
(stop rule, arrivals, foo_time, latency from the scheduled arrival) without a
race. Real threads are used only where threads are the point (their names, and
that one client uses none).
"""

from __future__ import annotations

import random
import threading

import pytest

from tools.measure import scenarios
from tools.measure.scenarios import ScenarioRun, ScenarioSpec, poisson_arrivals, run_scenario, server_search

MS = 1_000_000


class FakeClock:
    def __init__(self, t: int = 7_000_000_000) -> None:
        self.t = t
        self.sleeps: list[float] = []

    def __call__(self) -> int:
        return self.t

    def sleep(self, seconds: float) -> None:
        assert seconds > 0, "the runner must not sleep for a non-positive time"
        self.sleeps.append(seconds)
        self.t += round(seconds * 1e9)


def costing(clock, ns, foo=0.0, log=None):
    def step(inputs):
        if log is not None:
            log.append(inputs[0])
        clock.t += ns
        return [inputs[0]], foo

    return step


def pool(n):
    return [[f"b{i}"] for i in range(n)]


def sequential(worker, clients):
    errors = []
    for _ in range(clients):
        try:
            worker()
        except BaseException as exc:  # noqa: BLE001 - re-raised below, as _run_threads does
            errors.append(exc)
    if errors:
        raise errors[0]


def go(cost, clients=1, foo=0.0, n_pool=3, **kwargs):
    clock = FakeClock()
    kwargs.setdefault("batch_size", 2)
    kwargs.setdefault("min_duration_s", 0.0)
    kwargs.setdefault("max_duration_s", 1000.0)
    run = run_scenario(
        costing(clock, cost, foo), pool(n_pool), ScenarioSpec(clients=clients, clock=clock, sleep=clock.sleep, **kwargs)
    )
    return run, clock


SAME_FIELDS = (
    "scenario",
    "batch_size",
    "queries",
    "samples",
    "latencies_ns",
    "completions_ns",
    "foo_time_s",
    "stop_reason",
    "target_qps",
    "issued_qps",
    "sampled_outputs",
)

CASES = {
    "offline": dict(cost=2 * MS, scenario="offline", min_query_count=10),
    "offline foo": dict(cost=2 * MS, foo=0.0005, scenario="offline", min_query_count=9),
    "offline foo None": dict(cost=3 * MS, foo=None, scenario="offline", min_query_count=4),
    "offline min duration": dict(cost=3 * MS, scenario="offline", min_query_count=1, min_duration_s=0.1),
    "offline max duration": dict(cost=3 * MS, scenario="offline", min_query_count=10**6, max_duration_s=0.05),
    "offline sampled": dict(cost=MS, scenario="offline", min_query_count=40, sample_pool_indices={1}, max_sampled=4),
    "server fast": dict(cost=100_000, scenario="server", target_qps=2000.0, seed=7, min_query_count=150),
    "server backlog foo": dict(
        cost=2 * MS, foo=0.0002, scenario="server", batch_size=1, target_qps=1000.0, seed=3, min_query_count=60
    ),
    "server min duration": dict(
        cost=10_000, scenario="server", batch_size=1, target_qps=1000.0, seed=11, min_query_count=1, min_duration_s=0.05
    ),
    "server max duration": dict(
        cost=10 * MS, scenario="server", batch_size=1, target_qps=1000.0, min_query_count=10**6, max_duration_s=0.1
    ),
    "server slow arrivals": dict(cost=MS, scenario="server", batch_size=1, target_qps=0.1, seed=2, min_query_count=6),
    "server sampled": dict(
        cost=MS,
        scenario="server",
        target_qps=500.0,
        seed=4,
        min_query_count=50,
        sample_pool_indices={0, 2},
        max_sampled=5,
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_several_client_runner_equals_the_one_client_runner(monkeypatch, name):
    case = dict(CASES[name])
    one, one_clock = go(**case)
    monkeypatch.setattr(scenarios, "_run_threads", sequential)
    two, two_clock = go(clients=2, **case)
    for field in SAME_FIELDS:
        assert getattr(two, field) == getattr(one, field), field
    assert two.clients == 2 and one.clients == 1
    window = one.completions_ns[-1]
    foo_ns = round(one.foo_time_s * 1e9)
    assert one.duration_s == max(window - foo_ns, 0) / 1e9
    assert two.duration_s == max(window - foo_ns / 2, 0) / 1e9
    assert two_clock.sleeps == one_clock.sleeps


def expected_server(offsets, cost, foo_ns=0):
    """One worker: issue at max(arrival, previous completion); latency from the arrival, less foo."""
    latencies, completions, free = [], [], 0
    for arrival in offsets:
        free = max(arrival, free) + cost
        completions.append(free)
        latencies.append(max(free - arrival - foo_ns, 0))
    return latencies, completions


def offsets_s(rate, seed, count):
    arrivals = poisson_arrivals(rate, random.Random(seed))
    return [next(arrivals) for _ in range(count)]


def offsets_ns(rate, seed, count):
    return [int(offset * 1e9) for offset in offsets_s(rate, seed, count)]


@pytest.mark.parametrize("clients", [1, 2])
def test_server_arrivals_seconds_apart_are_exact_and_slept_to_once(monkeypatch, clients):
    monkeypatch.setattr(scenarios, "_run_threads", sequential)
    run, clock = go(
        cost=MS, clients=clients, scenario="server", batch_size=1, target_qps=0.1, seed=2, min_query_count=6
    )
    offsets = offsets_ns(0.1, 2, 6)
    assert offsets[-1] > 20 * 10**9  # tens of seconds: a 1e-9 relative error is tens of ns
    assert (run.latencies_ns, run.completions_ns) == expected_server(offsets, MS)
    assert len(clock.sleeps) == 5  # one sleep per future arrival, each to the nanosecond
    assert run.issued_qps == 5 / offsets_s(0.1, 2, 6)[-1]


@pytest.mark.parametrize("clients", [1, 2])
@pytest.mark.parametrize("scenario", ["offline", "server"])
def test_foo_longer_than_the_call_gives_zero_latency_and_exact_foo_time(monkeypatch, clients, scenario):
    monkeypatch.setattr(scenarios, "_run_threads", sequential)
    extra = dict(target_qps=1e6) if scenario == "server" else {}
    run, _ = go(cost=MS, foo=1.0, clients=clients, scenario=scenario, batch_size=1, min_query_count=3, **extra)
    assert run.latencies_ns == [0, 0, 0]
    assert run.foo_time_s == 3.0
    assert run.duration_s == 0.0 and run.qps is None


def test_single_stream_foo_at_one_second_resolution():
    run, _ = go(cost=1_500_000_000, foo=1.0, scenario="single_stream", min_query_count=2)
    assert run.latencies_ns == [500_000_000] * 2 and run.foo_time_s == 2.0


@pytest.mark.parametrize("clients", [1, 2])
@pytest.mark.parametrize("scenario, extra", [("offline", {}), ("server", dict(target_qps=1e6, batch_size=1))])
def test_minimums_are_met_at_exactly_min_duration(monkeypatch, clients, scenario, extra):
    monkeypatch.setattr(scenarios, "_run_threads", sequential)
    run, _ = go(cost=10 * MS, clients=clients, scenario=scenario, min_query_count=1, min_duration_s=0.01, **extra)
    assert run.queries == 1 and run.stop_reason == "minimums met"
    run, _ = go(cost=10 * MS, clients=clients, scenario=scenario, min_query_count=10**6, max_duration_s=0.01, **extra)
    assert run.queries == 1 and run.stop_reason == "max_duration_s reached"


def test_limits_are_whole_nanoseconds_at_one_second():
    run, _ = go(cost=500 * MS, scenario="offline", min_query_count=1, min_duration_s=1.0)
    assert run.queries == 2
    run, _ = go(cost=500 * MS, scenario="offline", min_query_count=10**6, max_duration_s=1.0)
    assert run.queries == 2 and run.stop_reason == "max_duration_s reached"


def test_issued_qps_needs_two_arrivals():
    run, _ = go(cost=MS, scenario="server", batch_size=3, target_qps=300.0, seed=5, min_query_count=2)
    assert run.queries == 2 and run.issued_qps == 1 * 3 / offsets_s(100.0, 5, 2)[1]
    run, _ = go(cost=10 * MS, scenario="server", batch_size=1, target_qps=1e6, min_query_count=1, min_duration_s=0.01)
    assert run.queries == 1 and run.issued_qps is None
    assert run.batch_size == 1 and run.samples == 1


def test_completions_are_put_in_completion_order_with_their_latencies(monkeypatch):
    monkeypatch.setattr(scenarios, "_run_threads", sequential)
    # clock reads, in order: start; query 0: lock, issue, completion; query 1: lock, issue, completion; stop
    script = iter([0, 0, 0, 50, 50, 10, 30, 60])
    run = run_scenario(
        lambda inputs: (inputs, 0.0),
        pool(2),
        ScenarioSpec(
            scenario="offline",
            batch_size=1,
            clients=2,
            min_query_count=2,
            min_duration_s=0,
            max_duration_s=10,
            clock=lambda: next(script),
        ),
    )
    assert run.completions_ns == [30, 50] and run.latencies_ns == [20, 50]


def test_an_error_stops_every_client(monkeypatch):
    monkeypatch.setattr(scenarios, "_run_threads", sequential)
    calls = []

    def step(inputs):
        calls.append(inputs)
        raise RuntimeError("engine broke")

    with pytest.raises(RuntimeError, match="engine broke"):
        run_scenario(
            step,
            pool(2),
            ScenarioSpec(
                scenario="offline", batch_size=1, clients=3, min_query_count=5, min_duration_s=0, max_duration_s=5
            ),
        )
    assert len(calls) == 1


@pytest.mark.parametrize("scenario, extra", [("offline", {}), ("server", dict(target_qps=1e5))])
def test_threads_only_for_several_clients_named_and_daemon(scenario, extra):
    seen = set()

    def step(inputs):
        thread = threading.current_thread()
        seen.add((thread.name, thread.daemon, thread is threading.main_thread()))
        return inputs, 0.0

    kwargs = dict(scenario=scenario, batch_size=1, min_query_count=40, min_duration_s=0, max_duration_s=10, **extra)
    run_scenario(step, pool(2), ScenarioSpec(clients=1, **kwargs))
    assert seen == {(threading.current_thread().name, threading.current_thread().daemon, True)}
    seen.clear()
    run_scenario(step, pool(2), ScenarioSpec(clients=2, **kwargs))
    assert seen and seen <= {("scenario-client-0", True, False), ("scenario-client-1", True, False)}


# --- sampled outputs -------------------------------------------------------------------
class Cloneable:
    def __init__(self, tag):
        self.tag = tag

    def clone(self):
        return Cloneable(self.tag + "'")

    def __deepcopy__(self, memo):
        raise AssertionError("objects with clone() are cloned, not deep-copied")


def test_outputs_are_cloned_or_deep_copied():
    nested = [[1, 2], {"k": [3]}]
    copies = scenarios._copy_outputs([Cloneable("t"), nested])
    assert copies[0].tag == "t'"
    nested[0].append(9)
    nested[1]["k"].append(9)
    assert copies[1] == [[1, 2], {"k": [3]}]


def test_sampled_outputs_are_in_query_order():
    clock = FakeClock()
    produced = iter(range(10**6))

    def step(inputs):
        clock.t += MS
        return [next(produced)], 0.0

    run = run_scenario(
        step,
        pool(5),
        ScenarioSpec(
            scenario="offline",
            batch_size=1,
            min_query_count=100,
            min_duration_s=0,
            max_duration_s=100,
            sample_pool_indices={3, 1},
            max_sampled=100,
            clock=clock,
        ),
    )
    keys = list(run.sampled_outputs)
    assert keys == [5 * k + j for k in range(20) for j in (1, 3)]  # every eligible query, in query order
    assert all(run.sampled_outputs[q] == (q % 5, [q]) for q in keys)


def test_server_sampling_matches_single_stream_and_respects_max_sampled_zero():
    server, _ = go(
        cost=MS,
        scenario="server",
        target_qps=500.0,
        seed=4,
        min_query_count=50,
        sample_pool_indices={0, 2},
        max_sampled=5,
    )
    stream, _ = go(cost=MS, scenario="single_stream", min_query_count=50, sample_pool_indices={0, 2}, max_sampled=5)
    assert server.queries == stream.queries == 50
    assert server.sampled_outputs == stream.sampled_outputs and len(server.sampled_outputs) >= 3
    none, _ = go(
        cost=MS, scenario="server", target_qps=500.0, min_query_count=5, sample_pool_indices={0}, max_sampled=0
    )
    assert none.sampled_outputs == {}


def test_defaults_seed_zero_and_eight_samples():
    base = dict(cost=MS, scenario="server", target_qps=500.0, min_query_count=200, sample_pool_indices={0, 1, 2})
    default, _ = go(**base)
    assert default.completions_ns == go(seed=0, **base)[0].completions_ns
    assert default.completions_ns != go(seed=1, **base)[0].completions_ns
    # 9 eligible queries: 8 kept at most leaves every other one, 9 would keep them all
    nine = dict(base, min_query_count=9)
    assert sorted(go(**nine)[0].sampled_outputs) == [0, 2, 4, 6, 8]
    assert sorted(go(max_sampled=9, **nine)[0].sampled_outputs) == list(range(9))


# --- validation -------------------------------------------------------------------------
BASE = dict(scenario="offline", batch_size=2, min_query_count=1, min_duration_s=0.0, max_duration_s=1.0)


@pytest.mark.parametrize(
    "changes, the_pool, message",
    [
        (
            dict(scenario="multi"),
            None,
            "unknown scenario 'multi': expected one of offline, single_stream, multi_stream, server",
        ),
        (dict(), [["a"], ("b",)], "offline: pool batch 1 must be a list of inputs, got tuple"),
        (
            dict(sample_pool_indices={2, -1}),
            None,
            "offline: sample_pool_indices ['-1', '2'] are not indices of the pool (0..1)",
        ),
        (dict(scenario="server", target_qps=None), None, "server: target_qps (samples/s) must be > 0, got None"),
    ],
)
def test_validation_messages(changes, the_pool, message):
    with pytest.raises(ValueError) as info:
        run_scenario(
            lambda inputs: None, pool(2) if the_pool is None else the_pool, ScenarioSpec(**{**BASE, **changes})
        )
    assert str(info.value) == message


def test_a_target_below_one_sample_per_second_is_valid():
    run, _ = go(cost=MS, scenario="server", batch_size=1, target_qps=0.5, min_query_count=1)
    assert run.queries == 1 and run.target_qps == 0.5


# --- server_search ---------------------------------------------------------------------
def _search(p99_of, **kwargs):
    def run_at(qps):
        return ScenarioRun("server", 1, 1, 1, 1, 1.0, [], [1], 0.0, "minimums met", target_qps=qps)

    return server_search(run_at, p99_ms=lambda r: p99_of(r.target_qps), **kwargs)


def test_server_search_defaults_bounds_and_equality():
    found = _search(lambda q: 99.0, upper_qps=100.0, latency_bound_ms=5.0)
    assert len(found.trials) == 7 and found.best is None  # 1 + 6 iterations by default
    found = _search(lambda q: 5.0, upper_qps=0.5, latency_bound_ms=5.0)
    assert found.trials == [(0.5, 5.0, True)] and found.best.target_qps == 0.5  # p99 == bound meets it
    found = _search(lambda q: 0.1, upper_qps=10.0, latency_bound_ms=0.5, iterations=0)
    assert found.trials == [(10.0, 0.1, True)]
    found = _search(lambda q: 1.0, upper_qps=10.0, latency_bound_ms=0.5, iterations=0)
    assert found.trials == [(10.0, 1.0, False)] and found.best is None


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(upper_qps=0.0), "server_search: upper_qps must be > 0, got 0.0"),
        (dict(latency_bound_ms=0.0), "server_search: latency_bound_ms must be > 0, got 0.0"),
        (dict(iterations=-1), "server_search: iterations must be an integer >= 0, got -1"),
        (dict(iterations=2.0), "server_search: iterations must be an integer >= 0, got 2.0"),
    ],
)
def test_server_search_messages(kwargs, message):
    base = dict(upper_qps=10.0, latency_bound_ms=5.0)
    with pytest.raises(ValueError) as info:
        _search(lambda q: 1.0, **{**base, **kwargs})
    assert str(info.value) == message


# --- the window's timeline (tools.measure.scenarios.timeline_of) --------------------------------------------


def one_client(step, clock: FakeClock, pool: list[list], **kwargs) -> ScenarioRun:
    """``run_scenario`` with one client on ``clock``, no minimum duration and 10 s at most."""
    return run_scenario(
        step, pool, ScenarioSpec(min_duration_s=0.0, max_duration_s=10.0, clock=clock, sleep=clock.sleep, **kwargs)
    )


@pytest.mark.parametrize("scenario", ["offline", "single_stream"])
def test_one_client_s_queries_tile_the_window_even_where_foo_time_was_taken_out(scenario):
    # calls of 10 ms of which 4 ms are declared foo: latencies of 6 ms, completions every 10 ms. One client's
    # queries follow each other, so each begins where the one before ended (not 6 ms before its end).
    clock = FakeClock()
    done = one_client(
        costing(clock, 10 * MS, foo=0.004), clock, pool(2), scenario=scenario, batch_size=1, min_query_count=3
    )
    assert done.latencies_ns == [6 * MS] * 3 and done.completions_ns == [10 * MS, 20 * MS, 30 * MS]
    assert done.timeline().begin_ns.tolist() == [0.0, 10 * MS, 20 * MS]
    assert done.timeline().end_ns.tolist() == [10 * MS, 20 * MS, 30 * MS]


def test_a_server_s_queries_begin_at_their_arrival_not_where_the_one_before_ended():
    # one client at 10 queries/s of 1 ms calls: it waits for each arrival, so a query spans its own latency
    clock = FakeClock()
    done = one_client(
        costing(clock, MS), clock, pool(2), scenario="server", batch_size=1, target_qps=10.0, min_query_count=4
    )
    ends = done.completions_ns
    assert done.latencies_ns == [MS] * 4 and ends[0] == MS
    assert done.timeline().begin_ns.tolist() == [end - MS for end in ends]
    assert done.timeline().end_ns.tolist() == ends


def test_samples_per_query_is_multi_stream_s_alone():
    # offline ignores it: a query is one pool batch of batch_size samples, whatever is passed
    clock = FakeClock()
    done = one_client(
        costing(clock, MS),
        clock,
        [["a", "b"]],
        scenario="offline",
        batch_size=2,
        samples_per_query=6,
        min_query_count=3,
    )
    assert (done.queries, done.samples_per_query, done.samples) == (3, 2, 6)
