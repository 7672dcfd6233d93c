"""LoadGen-style scenarios: drive an engine over a pool of batches held in memory.

Terms (defined here once):
  query    = one engine call ``step(inputs) -> (outputs, foo_time)`` on one pool
             batch of ``batch_size`` samples; query ``i`` uses ``pool[i % len(pool)]``.
  QPS      = samples per second, as everywhere in InferPerf (never queries/s).
  window   = the measured interval: from the first issue (server: the first
             scheduled arrival, which is the same instant) to the last completion.
  elapsed  = wall time since the window start, as the stop rule sees it.
  foo_time = seconds the engine declares as unrelated to inference inside one
             call; subtracted from that query's latency, and (summed, divided by
             ``clients``) from the window duration.
  latency  = completion - issue (server: completion - scheduled arrival, so a
             backlog shows up as latency), minus the query's foo_time. The
             completion time is taken after ``sync()`` (device synchronise).

Scenarios (``common.scenario.SCENARIOS``; each one's runner in ``RUNNERS``):
  offline       ``clients`` issuers pull query indices from a shared counter and
                issue back to back; QPS = samples / window (wall clock).
  single_stream one query at a time, the next issued as the previous completes.
  multi_stream  as single_stream, but a query is ``multi_stream_samples_per_query``
                samples: that many / ``batch_size`` engine calls on consecutive
                pool batches, back to back, one ``sync()`` after the last; its
                latency is from the first call to the last completion (MLPerf's
                MultiStream, whose result is the p99 of this per-query latency).
  server        arrivals form a Poisson process at ``target_qps / batch_size``
                queries/s, an absolute schedule from the window start; each of
                ``clients`` workers takes the next arrival and sleeps until it
                (``time.sleep``: never spins, the engine may share the CPU).

Stop rule (every scenario): keep issuing until ``queries >= min_query_count``
and ``elapsed >= min_duration_s`` and, when a ``target`` is given, every figure it
judges is within its precision ("precision reached"; without a target: "minimums
met"), or until ``elapsed >= max_duration_s`` ("max_duration_s reached"). The
figures are looked at only after the minimums, at most every
``tools.measure.precision.CHECK_EVERY_S`` (``StopRule``). The rule is applied
before each issue at the moment the query would be issued (server: the later of
now and its scheduled arrival, so no worker sleeps towards an arrival the rule
rejects); nothing is issued after the decision, and queries already running
complete and count. With ``clients == 1`` no thread and no lock is used.

Timeline (the throughput interval's, ``tools.measure.precision``): one client
issuing back to back tiles the window (a query runs from the previous completion
to its own); otherwise each query ran for its latency before its completion.
"""

from __future__ import annotations

import copy
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from common.scenario import MULTI_STREAM, OFFLINE, SCENARIOS, SERVER, SINGLE_STREAM, Scenario
from common.scenario import scenario as named
from contract.settings import MAX_DURATION_REACHED, MINIMUMS_MET, OUT_OF_REACH, PRECISION_REACHED, minus_foo
from tools.measure.phase_progress import PhaseProgress
from tools.measure.precision import Figures, StopRule, Target, Timeline, measure_figures

# the stop reasons are defined in contract.settings and named here too (tools.measure.loadgen imports
# MINIMUMS_MET from here)
__all__ = [
    "MAX_DURATION_REACHED",
    "MINIMUMS_MET",
    "OUT_OF_REACH",
    "PRECISION_REACHED",
    "RUNNERS",
    "SCENARIOS",
    "ScenarioRun",
    "ScenarioSpec",
    "run_scenario",
    "server_search",
    "timeline_of",
]

Step = Callable[[list], "tuple[list, float]"]
# What a runner returns: (latencies_ns, completions_ns, foo_ns, window_ns, stop_reason,
# (arrivals issued, last issued arrival offset in s)).
_Raw = tuple[list[int], list[int], int, int, str, tuple[int, float]]


@dataclass
class ScenarioRun:
    """One scenario run. Times in ``latencies_ns``/``completions_ns`` are integer ns; ``scenario``
    may be given by name and is its record after construction."""

    scenario: Scenario
    batch_size: int
    clients: int
    queries: int
    samples: int
    duration_s: float
    latencies_ns: list[int]
    completions_ns: list[int]
    foo_time_s: float
    stop_reason: str
    target_qps: float | None = None
    issued_qps: float | None = None
    checks: int = 0  # how often the stop rule looked at the figures
    sampled_outputs: dict[int, tuple[int, list]] = field(default_factory=dict, repr=False)
    samples_per_query: int = 0  # 0: one batch (batch_size samples); multi_stream: its query's samples

    def __post_init__(self) -> None:
        self.scenario = named(self.scenario)
        self.samples_per_query = self.samples_per_query or self.batch_size

    @property
    def qps(self) -> float | None:
        """Samples per second over the wall-clock window (never from mean latency)."""
        return self.samples / self.duration_s if self.duration_s > 0 else None

    def timeline(self) -> Timeline:
        return timeline_of(self.scenario, self.clients, self.samples_per_query, self.latencies_ns, self.completions_ns)


def timeline_of(
    scenario: Scenario, clients: int, samples_per_query: int, latencies_ns: list[int], completions_ns: list[int]
) -> Timeline:
    """The run's queries on its window's clock (module docstring, "Timeline")."""
    if clients == 1 and not scenario.scheduled:
        return Timeline.tiled(completions_ns, samples_per_query)
    return Timeline.spans(completions_ns, latencies_ns, samples_per_query)


@dataclass
class _Window:
    """One run's stop rule and what it collected so far; the runner appends to the lists."""

    min_queries: int
    min_ns: int
    max_ns: int
    scenario: Scenario
    clients: int
    samples_per_query: int
    target: Target | None
    rule: StopRule | None
    latencies: list[int] = field(default_factory=list)
    completions: list[int] = field(default_factory=list)

    def figures(self) -> Figures:
        assert self.target is not None  # asked only through the rule, which exists with a target
        timeline = timeline_of(self.scenario, self.clients, self.samples_per_query, self.latencies, self.completions)
        return measure_figures(self.target, {name: timeline for name in self.target.throughput}, self.latencies)

    def stop(self, now_ns: int, elapsed_ns: int) -> str | None:
        """Called once the minimums are met: why the run stops now, or None to go on."""
        return MINIMUMS_MET if self.rule is None else self.rule.decide(now_ns, elapsed_ns, self.figures)


@dataclass
class SearchResult:
    """``best``: the highest-target_qps run that met the bound, or None.
    ``trials``: every run tried, in order, as (target_qps, p99_ms or None, met)."""

    best: ScenarioRun | None
    trials: list[tuple[float, float | None, bool]]


def poisson_arrivals(rate_per_s: float, rng: random.Random) -> Iterator[float]:
    """Arrival offsets in seconds from 0 of a Poisson process: the first is 0.0,
    then exponential inter-arrival times of mean ``1 / rate_per_s``. Endless."""
    if not rate_per_s > 0:
        raise ValueError(f"poisson_arrivals: rate_per_s must be > 0, got {rate_per_s!r}")

    def arrivals() -> Iterator[float]:
        expovariate = rng.expovariate
        t = 0.0
        while True:
            yield t
            t += expovariate(rate_per_s)

    return arrivals()


def _copy_outputs(outputs: Any) -> list:
    return [x.clone() if hasattr(x, "clone") else copy.deepcopy(x) for x in outputs]


class _Sampler:
    """Keeps copies of at most ``limit`` eligible queries' outputs, evenly spread.

    Eligible queries are numbered 0, 1, 2, ... in the order they are offered;
    those whose number is a multiple of ``stride`` are kept. When the store is
    full, the stride doubles and the kept ones that are no longer multiples are
    dropped, so at the end the samples are ``stride`` apart over the whole run
    (at least ``ceil(limit / 2)`` of them once ``limit`` eligible queries ran).
    """

    __slots__ = ("limit", "stride", "seen", "kept")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.stride = 1
        self.seen = 0
        self.kept: dict[int, tuple[int, int, list]] = {}  # eligible number -> (query, pool index, copy)

    def offer(self, query: int, pool_index: int, outputs: Any) -> None:
        number = self.seen
        self.seen += 1
        if number % self.stride:
            return
        while len(self.kept) >= self.limit:
            self.stride *= 2
            self.kept = {k: v for k, v in self.kept.items() if k % self.stride == 0}
            if number % self.stride:
                return
        self.kept[number] = (query, pool_index, _copy_outputs(outputs))

    def result(self) -> dict[int, tuple[int, list]]:
        return {
            query: (pool_index, outputs)
            for query, pool_index, outputs in sorted(self.kept.values(), key=lambda v: v[0])
        }


@dataclass(frozen=True)
class ScenarioSpec:
    """What ``run_scenario`` runs and how it is instrumented (the module docstring defines the terms).

    Every pool batch must hold exactly ``batch_size`` samples. ``sync()`` runs
    after each call, before the completion time is taken. Outputs of queries
    whose pool index is in ``sample_pool_indices`` are copied (``.clone()``
    where the object has one, else ``copy.deepcopy``) after the completion time
    is taken, at most ``max_sampled`` of them spread over the run, into
    ``sampled_outputs``. ``target_qps`` (samples/s) and ``seed`` (of the
    arrival schedule) are used by the server scenario only, ignored otherwise;
    ``samples_per_query`` (a multiple of ``batch_size``) by multi_stream only (None: LoadGen's 8);
    ``clock`` (ns) and ``sleep`` (s) are injectable for tests. ``target``: the
    figures that must be precise before the run may stop (None: the minimums only).
    """

    scenario: str | Scenario
    batch_size: int
    min_query_count: int
    min_duration_s: float
    max_duration_s: float
    clients: int = 1
    samples_per_query: int | None = None
    target_qps: float | None = None
    seed: int = 0
    sync: Callable[[], Any] = lambda: None
    sample_pool_indices: set[int] | frozenset = frozenset()
    max_sampled: int = 8
    clock: Callable[[], int] = time.perf_counter_ns
    sleep: Callable[[float], Any] = time.sleep
    target: Target | None = None


def _validate(pool, chosen: Scenario, spec: ScenarioSpec, samples_per_query: int) -> None:
    scenario, batch_size, clients = chosen.name, spec.batch_size, spec.clients
    min_query_count, min_duration_s, max_duration_s = spec.min_query_count, spec.min_duration_s, spec.max_duration_s
    target_qps, sample_pool_indices, max_sampled = spec.target_qps, spec.sample_pool_indices, spec.max_sampled
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"{scenario}: batch_size must be an integer >= 1, got {batch_size!r}")
    if not isinstance(clients, int) or clients < 1:
        raise ValueError(f"{scenario}: clients must be an integer >= 1, got {clients!r}")
    if chosen.one_query_at_a_time and clients != 1:
        raise ValueError(f"{scenario}: issues one query at a time, so clients must be 1, got {clients}")
    if chosen.samples_per_query_key is not None and not (
        isinstance(samples_per_query, int) and samples_per_query > 0 and samples_per_query % batch_size == 0
    ):
        raise ValueError(
            f"{scenario}: samples_per_query must be a positive multiple of batch_size {batch_size}, "
            f"got {samples_per_query!r}"
        )
    if not isinstance(min_query_count, int) or min_query_count < 1:
        raise ValueError(f"{scenario}: min_query_count must be an integer >= 1, got {min_query_count!r}")
    if not min_duration_s >= 0:
        raise ValueError(f"{scenario}: min_duration_s must be >= 0, got {min_duration_s!r}")
    if not max_duration_s > 0:
        raise ValueError(f"{scenario}: max_duration_s must be > 0, got {max_duration_s!r}")
    if chosen.scheduled and (target_qps is None or not target_qps > 0):
        raise ValueError(f"{scenario}: target_qps (samples/s) must be > 0, got {target_qps!r}")
    if not pool:
        raise ValueError(f"{scenario}: the pool of batches is empty")
    for index, batch in enumerate(pool):
        if not isinstance(batch, list):
            raise ValueError(f"{scenario}: pool batch {index} must be a list of inputs, got {type(batch).__name__}")
    if not isinstance(max_sampled, int) or max_sampled < 0:
        raise ValueError(f"{scenario}: max_sampled must be an integer >= 0, got {max_sampled!r}")
    bad = [i for i in sample_pool_indices if not (isinstance(i, int) and 0 <= i < len(pool))]
    if bad:
        raise ValueError(
            f"{scenario}: sample_pool_indices {sorted(map(repr, bad))} are not indices of the pool (0..{len(pool) - 1})"
        )


def run_scenario(step: Step, pool: list[list], spec: ScenarioSpec) -> ScenarioRun:
    """Run one scenario (see the module docstring and ``ScenarioSpec``) and measure it.

    ``duration_s`` is the window minus total foo_time / clients: with several
    clients foo_time overlaps other clients' work, so dividing by the number of
    clients is an approximation (exact for one client, or when every client
    declares the same foo_time at the same moments).
    Server latencies include the sleep's wake-up lateness (typically tens of
    µs on Linux) since they count from the scheduled arrival.
    """
    chosen = named(spec.scenario)
    batch_size, clients, target_qps = spec.batch_size, spec.clients, spec.target_qps
    spq = (
        (spec.samples_per_query or chosen.samples_per_query_default or batch_size)
        if chosen.samples_per_query_key
        else batch_size
    )
    _validate(pool, chosen, spec, spq)
    rule = StopRule(spec.target, spec.clock, spec.max_duration_s) if spec.target is not None else None
    limits = _Window(
        spec.min_query_count,
        round(spec.min_duration_s * 1e9),
        round(spec.max_duration_s * 1e9),
        chosen,
        clients,
        spq,
        spec.target,
        rule,
    )
    sampler = _Sampler(spec.max_sampled) if spec.sample_pool_indices and spec.max_sampled else None
    # PROGRESS lines (tools/measure/phase_progress.py), at most every 0.5 s, from the clock readings the
    # runners take anyway
    progress = PhaseProgress(
        f"performance bs={batch_size} {chosen.name} clients={clients}",
        min_queries=spec.min_query_count,
        min_duration_s=spec.min_duration_s,
        max_duration_s=spec.max_duration_s,
    )
    job = _Job(
        step,
        pool,
        limits,
        clients,
        spq // batch_size,
        target_qps,
        batch_size,
        spec.seed,
        spec.sync,
        sampler,
        frozenset(spec.sample_pool_indices),
        spec.clock,
        spec.sleep,
        progress,
    )
    raw = RUNNERS[chosen](job)
    progress.finish(len(raw[0]), raw[3] / 1e9)
    return _scenario_run(chosen, spec, spq, raw, checks=rule.checks if rule is not None else 0, sampler=sampler)


def _scenario_run(
    chosen: Scenario, spec: ScenarioSpec, spq: int, raw: _Raw, checks: int, sampler: _Sampler | None
) -> ScenarioRun:
    """The run's record from what its runner collected."""
    latencies, completions, foo_ns, window_ns, reason, arrivals = raw
    batch_size, clients, target_qps = spec.batch_size, spec.clients, spec.target_qps
    if clients > 1:  # appended as threads finished; put them in completion order
        order = sorted(range(len(completions)), key=completions.__getitem__)
        latencies = [latencies[i] for i in order]
        completions = [completions[i] for i in order]
    queries = len(latencies)
    issued_qps = None
    if chosen.scheduled and arrivals[0] >= 2 and arrivals[1] > 0:
        issued_qps = (arrivals[0] - 1) * batch_size / arrivals[1]
    return ScenarioRun(
        scenario=chosen,
        batch_size=batch_size,
        clients=clients,
        queries=queries,
        samples=queries * spq,
        duration_s=max(window_ns - foo_ns / clients, 0) / 1e9,
        latencies_ns=latencies,
        completions_ns=completions,
        foo_time_s=foo_ns / 1e9,
        stop_reason=reason,
        target_qps=float(target_qps) if chosen.scheduled and target_qps is not None else None,
        issued_qps=issued_qps,
        checks=checks,
        sampled_outputs=sampler.result() if sampler else {},
        samples_per_query=spq,
    )


@dataclass
class _Job:
    """What a runner needs: the engine, the pool, the window's rule and the scenario's parameters."""

    step: Step
    pool: list[list]
    limits: _Window
    clients: int
    calls_per_query: int
    target_qps: float | None
    batch_size: int
    seed: int
    sync: Callable[[], Any]
    sampler: _Sampler | None
    eligible: frozenset
    clock: Callable[[], int]
    sleep: Callable[[float], Any]
    progress: PhaseProgress


def _offline(job: _Job) -> _Raw:
    return _back_to_back_one(job) if job.clients == 1 else _threads(job, None)


def _single_stream(job: _Job) -> _Raw:
    return _back_to_back_one(job)


def _server(job: _Job) -> _Raw:
    assert job.target_qps is not None  # _validate refused a server run without one
    schedule = poisson_arrivals(job.target_qps / job.batch_size, random.Random(job.seed))
    return _server_one(job, schedule) if job.clients == 1 else _threads(job, schedule)


# Each runner returns a ``_Raw``.


def _loop_parts(job: _Job) -> tuple:
    """A job's parts as the loops bind them to locals (a local is the cheapest read in the hot loop)."""
    return job.step, job.pool, job.limits, job.sync, job.sampler, job.eligible, job.clock, job.progress


def _back_to_back_one(job: _Job) -> _Raw:
    """offline with one client, and single_stream: the cheapest loop, no threads, no locks."""
    step, pool, limits, sync, sampler, eligible, clock, progress = _loop_parts(job)
    min_queries, min_ns, max_ns, stop = limits.min_queries, limits.min_ns, limits.max_ns, limits.stop
    latencies, completions = limits.latencies, limits.completions
    add_latency = latencies.append
    add_completion = completions.append
    n = len(pool)
    foo_ns = 0
    i = 0
    start = now = clock()
    due = progress.begin(start)
    while True:
        elapsed = now - start
        if i >= min_queries and elapsed >= min_ns and (reason := stop(now, elapsed)) is not None:
            break
        if elapsed >= max_ns:
            reason = MAX_DURATION_REACHED
            break
        pool_index = i % n
        t0 = clock()
        outputs, foo = step(pool[pool_index])
        sync()
        now = clock()
        latency, f = minus_foo(now - t0, foo)
        foo_ns += f
        add_latency(latency)
        add_completion(now - start)
        if sampler is not None and pool_index in eligible:
            sampler.offer(i, pool_index, outputs)
        i += 1
        if now >= due:
            due = progress.update(i, now)
    window = completions[-1] if completions else 0
    return latencies, completions, foo_ns, window, reason, (0, 0.0)


def _multi_stream(job: _Job) -> _Raw:
    """multi_stream: one query at a time, each ``calls_per_query`` engine calls on consecutive pool
    batches, one ``sync()`` after the last; its latency from the first call to that completion."""
    step, pool, limits, sync, sampler, eligible, clock, progress = _loop_parts(job)
    min_queries, min_ns, max_ns, stop = limits.min_queries, limits.min_ns, limits.max_ns, limits.stop
    latencies, completions = limits.latencies, limits.completions
    calls, n = job.calls_per_query, len(pool)
    foo_ns = 0
    i = 0
    start = now = clock()
    due = progress.begin(start)
    while True:
        elapsed = now - start
        if i >= min_queries and elapsed >= min_ns and (reason := stop(now, elapsed)) is not None:
            break
        if elapsed >= max_ns:
            reason = MAX_DURATION_REACHED
            break
        kept = []
        foo = 0.0
        t0 = clock()
        for call in range(i * calls, (i + 1) * calls):
            outputs, call_foo = step(pool[call % n])
            foo += call_foo or 0.0
            if sampler is not None and call % n in eligible:
                kept.append((call, outputs))
        sync()
        now = clock()
        latency, f = minus_foo(now - t0, foo)
        foo_ns += f
        latencies.append(latency)
        completions.append(now - start)
        for call, outputs in kept:  # numbered by engine call, so a query's two eligible batches both count
            sampler.offer(call, call % n, outputs)  # type: ignore[union-attr]  # kept only with a sampler
        i += 1
        if now >= due:
            due = progress.update(i, now)
    window = completions[-1] if completions else 0
    return latencies, completions, foo_ns, window, reason, (0, 0.0)


def _run_threads(worker, clients: int) -> None:
    """Run ``worker`` in ``clients`` threads; re-raise the first exception one raised."""
    errors: list[BaseException] = []

    def guarded() -> None:
        try:
            worker()
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller below
            errors.append(exc)

    threads = [threading.Thread(target=guarded, name=f"scenario-client-{k}", daemon=True) for k in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def _server_one(job: _Job, schedule: Iterator[float]) -> _Raw:
    """server with one worker: the calling thread sleeps until each arrival."""
    step, pool, limits, sync, sampler, eligible, clock, progress = _loop_parts(job)
    sleep = job.sleep
    min_queries, min_ns, max_ns, stop = limits.min_queries, limits.min_ns, limits.max_ns, limits.stop
    latencies, completions = limits.latencies, limits.completions
    add_latency = latencies.append
    add_completion = completions.append
    n = len(pool)
    foo_ns = 0
    i = 0
    offset = 0.0
    start = clock()
    due = progress.begin(start)
    for next_offset in schedule:
        arrival = start + int(next_offset * 1e9)
        now = clock()
        elapsed = (arrival if arrival > now else now) - start
        if i >= min_queries and elapsed >= min_ns and (reason := stop(now, elapsed)) is not None:
            break
        if elapsed >= max_ns:
            reason = MAX_DURATION_REACHED
            break
        offset = next_offset
        while arrival > now:  # absolute deadline: lateness never accumulates
            sleep((arrival - now) / 1e9)
            now = clock()
        pool_index = i % n
        outputs, foo = step(pool[pool_index])
        sync()
        t1 = clock()
        latency, f = minus_foo(t1 - arrival, foo)
        foo_ns += f
        add_latency(latency)
        add_completion(t1 - start)
        if sampler is not None and pool_index in eligible:
            sampler.offer(i, pool_index, outputs)
        i += 1
        if t1 >= due:
            due = progress.update(i, t1)
    window = completions[-1] if completions else 0
    return latencies, completions, foo_ns, window, reason, (i, offset)


def _threads(job: _Job, schedule: Iterator[float] | None) -> _Raw:
    """Several clients taking query indices (and, for server, the next arrival of
    one shared schedule; ``schedule`` None = offline, issue at once) under one lock."""
    step, pool, limits, sync, sampler, eligible, clock, progress = _loop_parts(job)
    clients, sleep, n = job.clients, job.sleep, len(pool)
    min_queries, min_ns, max_ns, stop = limits.min_queries, limits.min_ns, limits.max_ns, limits.stop
    latencies, completions = limits.latencies, limits.completions
    lock = threading.Lock()
    state: dict[str, Any] = {"next": 0, "foo_ns": 0, "reason": None, "offset": 0.0}  # shared under the lock
    start = clock()
    state["due"] = progress.begin(start)

    def worker() -> None:
        while True:
            with lock:
                if state["reason"] is not None:
                    return
                now = clock()
                arrival = None
                if schedule is not None:
                    next_offset = next(schedule)
                    arrival = start + int(next_offset * 1e9)
                i = state["next"]
                elapsed = (arrival if arrival is not None and arrival > now else now) - start
                if i >= min_queries and elapsed >= min_ns and (reason := stop(now, elapsed)) is not None:
                    state["reason"] = reason
                    return
                if elapsed >= max_ns:
                    state["reason"] = MAX_DURATION_REACHED
                    return
                state["next"] = i + 1
                if arrival is not None:
                    state["offset"] = next_offset
                if now >= state["due"]:
                    state["due"] = progress.update(i, now)
            while arrival is not None and arrival > now:
                sleep((arrival - now) / 1e9)
                now = clock()
            pool_index = i % n
            t0 = clock() if arrival is None else arrival
            try:
                outputs, foo = step(pool[pool_index])
                sync()
            except BaseException:
                with lock:
                    state["reason"] = "error"
                raise
            t1 = clock()
            latency, f = minus_foo(t1 - t0, foo)
            with lock:
                state["foo_ns"] += f
                latencies.append(latency)
                completions.append(t1 - start)
                if sampler is not None and pool_index in eligible:
                    sampler.offer(i, pool_index, outputs)

    _run_threads(worker, clients)
    window = max(completions) if completions else 0
    arrivals = (state["next"], state["offset"]) if schedule is not None else (0, 0.0)
    return latencies, completions, state["foo_ns"], window, state["reason"], arrivals


# Each scenario's runner, by its record (common/scenario.py); tests/test_scenario_records.py checks every
# scenario has one.
RUNNERS: dict[Scenario, Callable[[_Job], _Raw]] = {
    OFFLINE: _offline,
    SINGLE_STREAM: _single_stream,
    MULTI_STREAM: _multi_stream,
    SERVER: _server,
}


def server_search(
    run_at: Callable[[float], ScenarioRun],
    *,
    upper_qps: float,
    latency_bound_ms: float,
    p99_ms: Callable[[ScenarioRun], float | None],
    iterations: int = 6,
) -> SearchResult:
    """Highest target_qps in (0, upper_qps] whose run has ``p99_ms(run) <= latency_bound_ms``.

    Tries ``upper_qps`` first and stops there if it meets the bound; otherwise
    bisects (lo=0, hi=upper_qps) for ``iterations`` steps, so the answer is
    within ``upper_qps / 2**iterations`` below the threshold. A None p99 counts
    as not met. Every run is recorded in ``trials``.
    """
    if not upper_qps > 0:
        raise ValueError(f"server_search: upper_qps must be > 0, got {upper_qps!r}")
    if not latency_bound_ms > 0:
        raise ValueError(f"server_search: latency_bound_ms must be > 0, got {latency_bound_ms!r}")
    if not isinstance(iterations, int) or iterations < 0:
        raise ValueError(f"server_search: iterations must be an integer >= 0, got {iterations!r}")
    trials: list[tuple[float, float | None, bool]] = []

    def attempt(qps: float) -> tuple[ScenarioRun, bool]:
        run = run_at(qps)
        p99 = p99_ms(run)
        met = p99 is not None and p99 <= latency_bound_ms
        trials.append((qps, p99, met))
        return run, met

    run, met = attempt(float(upper_qps))
    if met:
        return SearchResult(best=run, trials=trials)
    best = None
    lo, hi = 0.0, float(upper_qps)
    for _ in range(iterations):
        mid = (lo + hi) / 2
        run, met = attempt(mid)
        if met:
            lo, best = mid, run
        else:
            hi = mid
    return SearchResult(best=best, trials=trials)
