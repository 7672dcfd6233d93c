"""MLPerf's MultiStream (``tools.measure.scenarios._multi_stream``) on a fake clock and a fake engine,
pinned to the nanosecond (mutation testing, docs/testing.md).

A query is ``samples_per_query / batch_size`` engine calls on consecutive pool batches, back to
back, with one ``sync()`` after the last; its latency runs from the first call to that completion,
less the foo_time its calls declared. The engine's calls cost a known time each, so every
figure below is worked out by hand: which batches each query ran, each query's latency and
completion, the stop rule's boundaries, the row's counts, and the headline p99 of 662 queries
(LoadGen's floor for p99). tests/test_scenario_records.py runs the same scenario on a real
engine, and under LoadGen.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from common.scenario import MULTI_STREAM
from contract.phase import ContentionReading
from tests.infra.clocks import MS, FakeClock
from tools.measure.precision import Target
from tools.measure.scenarios import (
    MAX_DURATION_REACHED,
    MINIMUMS_MET,
    OUT_OF_REACH,
    PRECISION_REACHED,
    ScenarioSpec,
    run_scenario,
)
from tools.measure.stage import row_record

US = 1_000
COSTS = (1, 2, 3, 4, 5)  # ms per call on pool batch 0..4
SYNC = 500 * US  # what each sync() costs: once per query, after its last call


class Engine:
    """An engine on a fake clock whose call on pool batch b costs COSTS[b] ms (plus ``creep`` ns
    times the number of calls made before it), declaring ``foo`` s of each call unrelated."""

    def __init__(self, foo: float | None = 0.0, creep: int = 0) -> None:
        self.clock = FakeClock(7_000_000_000)
        self.foo, self.creep = foo, creep
        self.calls: list[int] = []  # the pool batch of every call, in order
        self.syncs: list[int] = []  # the number of calls made when each sync() ran

    def step(self, inputs: list) -> tuple[list, float | None]:
        batch = inputs[0]
        self.clock.advance(COSTS[batch] * MS + self.creep * len(self.calls))
        self.calls.append(batch)
        return [f"out{batch}"], self.foo

    def sync(self) -> None:
        self.clock.advance(SYNC)
        self.syncs.append(len(self.calls))


def run(engine: Engine, **kwargs):
    kwargs.setdefault("batch_size", 2)
    kwargs.setdefault("samples_per_query", 6)
    kwargs.setdefault("min_query_count", 5)
    kwargs.setdefault("min_duration_s", 0.0)
    kwargs.setdefault("max_duration_s", 1000.0)
    return run_scenario(
        engine.step,
        [[b] for b in range(len(COSTS))],
        ScenarioSpec(scenario="multi_stream", sync=engine.sync, clock=engine.clock, sleep=engine.clock.sleep, **kwargs),
    )


# Queries of 3 calls over a pool of 5 batches: query i runs batches 3i, 3i+1, 3i+2 (mod 5).
BATCHES = [[0, 1, 2], [3, 4, 0], [1, 2, 3], [4, 0, 1], [2, 3, 4]]
LATENCIES_MS = [1 + 2 + 3, 4 + 5 + 1, 2 + 3 + 4, 5 + 1 + 2, 3 + 4 + 5]  # 6, 10, 9, 8, 12


def test_a_query_is_samples_per_query_over_batch_size_calls_on_consecutive_batches_with_one_sync():
    engine = Engine()
    done = run(engine)
    assert engine.calls == [b for query in BATCHES for b in query]
    assert engine.syncs == [3, 6, 9, 12, 15]  # one sync per query, after its third call
    assert done.latencies_ns == [ms * MS + SYNC for ms in LATENCIES_MS]
    ends, total = [], 0
    for ms in LATENCIES_MS:
        total += ms * MS + SYNC
        ends.append(total)
    assert done.completions_ns == ends == [6_500_000, 17_000_000, 26_500_000, 35_000_000, 47_500_000]
    assert (done.queries, done.samples, done.samples_per_query, done.batch_size) == (5, 30, 6, 2)
    assert done.duration_s == pytest.approx(0.0475, abs=1e-12) and done.qps == pytest.approx(30 / 0.0475)
    assert (done.stop_reason, done.foo_time_s, done.clients) == (MINIMUMS_MET, 0.0, 1)
    assert done.timeline().samples.tolist() == [6.0] * 5  # the throughput interval counts a query's samples


def test_samples_per_query_defaults_to_loadgens_eight():
    engine = Engine()
    done = run(engine, samples_per_query=None, min_query_count=2)
    assert engine.calls == [0, 1, 2, 3, 4, 0, 1, 2] and engine.syncs == [4, 8]  # 8 samples / batch 2 = 4 calls
    assert (done.samples_per_query, done.samples) == (8, 16)
    assert done.latencies_ns == [(1 + 2 + 3 + 4) * MS + SYNC, (5 + 1 + 2 + 3) * MS + SYNC]


def test_foo_time_is_summed_over_a_querys_calls_and_taken_from_its_latency_and_the_window():
    engine = Engine(foo=0.0002)  # 0.2 ms of each call declared unrelated: 0.6 ms per query
    done = run(engine)
    assert done.latencies_ns == [ms * MS + SYNC - 600 * US for ms in LATENCIES_MS]
    assert done.foo_time_s == pytest.approx(5 * 0.0006)
    assert done.completions_ns[-1] == 47_500_000  # the window's clock is not reduced ...
    assert done.duration_s == pytest.approx(0.0475 - 0.003)  # ... its duration is
    none = run(Engine(foo=None))  # an engine that declares nothing
    assert none.latencies_ns == [ms * MS + SYNC for ms in LATENCIES_MS] and none.foo_time_s == 0.0


@pytest.mark.parametrize(
    ("limits", "queries", "reason"),
    [
        (dict(min_query_count=4), 4, MINIMUMS_MET),
        (dict(min_query_count=1, min_duration_s=0.035), 4, MINIMUMS_MET),  # 35 ms completes query 4 exactly
        (dict(min_query_count=1, min_duration_s=0.0351), 5, MINIMUMS_MET),
        (dict(min_query_count=10**6, max_duration_s=0.035), 4, MAX_DURATION_REACHED),
        (dict(min_query_count=10**6, max_duration_s=0.0349), 4, MAX_DURATION_REACHED),
        (dict(min_query_count=10**6, max_duration_s=0.0351), 5, MAX_DURATION_REACHED),
    ],
)
def test_the_stop_rule_is_looked_at_before_each_query_at_its_exact_boundaries(limits, queries, reason):
    done = run(Engine(), **limits)
    assert (done.queries, done.stop_reason) == (queries, reason)


def test_sampled_outputs_are_numbered_by_engine_call():
    engine = Engine()
    done = run(engine, sample_pool_indices={1}, max_sampled=8)
    # pool batch 1 is calls 1, 6 and 11 of queries 0, 2 and 3 (BATCHES)
    assert done.sampled_outputs == {1: (1, ["out1"]), 6: (1, ["out1"]), 11: (1, ["out1"])}


def test_with_a_target_it_stops_on_the_p99_floor_and_its_precision():
    target = Target(throughput=("qps",), precision=0.5, percentile="p99", latency_precision=0.5)
    engine = Engine()
    done = run(
        engine, samples_per_query=None, min_query_count=MULTI_STREAM.min_query_count(24), target=target, batch_size=4
    )
    # LoadGen's 8 samples a query are 2 calls of batch 4; p99 needs 662 queries, and then both are precise
    assert (done.queries, done.samples, done.stop_reason) == (662, 662 * 8, PRECISION_REACHED)
    assert len(engine.calls) == 2 * 662 and done.checks >= 1


CONFIG = SimpleNamespace(min_query_count=662, min_duration_s=0.0, contention_limit=0.1, precision=None)
QUIET = ContentionReading(0.0, 2, 1.0, None)


def test_the_row_of_662_queries_has_their_counts_and_the_p99_of_per_query_latency_as_its_headline():
    # Each call costs 1 us more than the one before it, so no two queries last the same: query i
    # (calls 3i..3i+2 on batches 3i..3i+2 mod 5) lasts its batches' COSTS + (9i + 3) us + the sync.
    engine = Engine(creep=US)
    done = run(engine, min_query_count=662)
    expected = [sum(COSTS[b] for b in BATCHES[i % 5]) * MS + (9 * i + 3) * US + SYNC for i in range(662)]
    assert done.latencies_ns == expected
    row = row_record(done, CONFIG, QUIET, None)
    assert (row.scenario, row.batch_size, row.clients, row.samples_per_query) == ("multi_stream", 2, 1, 6)
    assert (row.queries, row.samples) == (662, 662 * 6)
    assert row.duration_s == pytest.approx(sum(expected) / 1e9)
    assert row.qps == pytest.approx(662 * 6 * 1e9 / sum(expected))
    # p99 of the 662 per-query latencies, linear between ranks 654 and 655 (numpy's default)
    ordered = sorted(expected)
    p99_ns = ordered[654] + 0.39 * (ordered[655] - ordered[654])
    assert row.latency_ms.p99 == pytest.approx(p99_ns / 1e6, abs=1e-9)
    # by hand: the 7 slowest queries are 629, 634, ..., 659 (batches 2, 3, 4: 12 ms), rank 654 is query 624:
    # 12 + (9 x 624 + 3) us + 0.5 = 18.119 ms, rank 655 query 629: 18.164 ms; p99 = 18.119 + 0.39 x 0.045
    assert row.latency_ms.p99 == pytest.approx(18.13655, abs=1e-9)
    assert row.latency_ms.p99_9 is None  # below p99.9's floor of 6620 queries
    assert row.window_qps and all(w > 0 for w in row.window_qps)


def test_a_precision_out_of_reach_stops_it_early_on_the_elapsed_time_it_is_given():
    # queries of 6-12 ms never give a rate within 1e-9: the rule extrapolates from the elapsed time and gives up
    done = run(Engine(), min_query_count=20, max_duration_s=10.0, target=Target(throughput=("qps",), precision=1e-9))
    assert done.stop_reason == OUT_OF_REACH and 20 <= done.queries < 100 and done.checks >= 1


@pytest.mark.parametrize("scenario, extra", [("offline", {}), ("server", {"target_qps": 100.0})])
def test_several_clients_give_the_stop_rule_the_elapsed_time_too(scenario, extra):
    # The same out-of-reach precision with two clients (tools.measure.scenarios._threads, queries of one call):
    # the rule extrapolates from the elapsed time it is given, and gives up long before max_duration_s.
    engine = Engine()
    done = run_scenario(
        engine.step,
        [[b] for b in range(len(COSTS))],
        ScenarioSpec(
            scenario=scenario,
            batch_size=1,
            clients=2,
            min_query_count=20,
            min_duration_s=0.0,
            max_duration_s=10.0,
            target=Target(throughput=("qps",), precision=1e-9),
            sync=engine.sync,
            clock=engine.clock,
            sleep=engine.clock.sleep,
            **extra,
        ),
    )
    assert done.stop_reason == OUT_OF_REACH and 20 <= done.queries < 1000 and done.checks >= 1
