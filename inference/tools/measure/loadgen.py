"""Performance rows under MLPerf LoadGen (``load_generator: mlperf``), the second load generator.

The same engine and the same pool of batches as InferPerf's own scenarios
(``tools.measure.scenarios``), driven by the real LoadGen (PyPI
``mlcommons-loadgen``, imported as ``mlperf_loadgen``):

  QSL     LoadGen's sample ``i`` is pool batch ``i`` (``batch_size`` samples), so a
          LoadGen query of one sample is an InferPerf query (one engine call), and
          LoadGen's rates times ``batch_size`` are samples per second. The pool is
          already in memory: loading and unloading are no-ops.
  SUT     one client (every scenario): the engine runs inside LoadGen's issue
          call, on LoadGen's thread (no thread hand-off in the timed path), and a
          query's samples complete in one call when the last is done. multi_stream:
          a LoadGen query is ``multi_stream_samples_per_query / batch_size`` pool
          batches, run back to back and timed as one query, as InferPerf's runner
          does (LoadGen's ``multi_stream_samples_per_query`` counts pool batches). For server
          this is InferPerf's one-client server exactly: one issuer that waits for
          each scheduled arrival and runs it, so a backlog delays later issues, and
          LoadGen counts latency from the scheduled arrival (checked: at twice the
          engine's rate its latencies grow to seconds). Several clients: ``clients``
          worker threads take samples from a queue, so issuing never blocks.
  probe   before the test, a short back-to-back run sets what LoadGen must be
          told in advance: ``single_stream_expected_latency_ns`` (LoadGen issues
          ``min_duration / expected latency`` queries, so a too-high guess misses
          the minimum duration) and ``offline_expected_qps`` (LoadGen issues about
          ``expected qps x min_duration x 1.1`` samples in its one query). Both
          come from the probe's median latency, the speed of an undisturbed query
          (a busy machine's stalls inflate the mean, and a test faster than its
          guess misses the minimum duration, while a slower one only runs longer),
          with ``PROBE_MARGIN`` so that a slightly faster test still meets them.
          LoadGen generates twice min_duration of queries at the expected
          latency, so a test more than about 2.2 times faster than its probe (a
          probe disturbed by the machine) misses the minimum duration: such a
          row, met on query count, is tested once more at the first test's
          median, and its block keeps the first guess (``rerun``). A guess is
          bounded so that what LoadGen generates fits in a share of the memory
          available (``generation_limit``).
  settings min_duration_s, max_duration_s and min_query_count from the case
          config (a scenario with a headline percentile raises the query count to
          its floor, as InferPerf's rows do); then the settings its record names
          (``common.scenario.LoadgenFacts``): the probe's guesses, server's
          ``target_qps / batch_size`` queries/s and ``latency_bound_ms``, the
          headline percentile, multi_stream's samples per query.

LoadGen's verdict is the row's: its VALID/INVALID with the unmet conditions,
its early-stopping estimates and its percentiles (read from its detail log,
``mlperf_log_*_detail.txt``, whose ``:::MLLOG`` lines are JSON) go into the
row's ``loadgen`` block; contention and the accuracy-in-performance-mode audit
are added as for every row. Its log files are written into the case's log_dir,
one prefix per row (``mlperf_log_bs8_offline_x1_summary.txt``, ...).
"""

from __future__ import annotations

import json
import math
import queue
import re
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from common.record import LatencyBlock, PerformanceRow
from common.scenario import Scenario
from common.scenario import scenario as named
from common.stats import MIN_SAMPLES_FOR_PERCENTILE, LatencyStats, enough_for, too_few_note
from contract.config import CaseConfig, query_samples, setting
from tools.measure.rows import RowFigures, latency_bound, latency_of, performance_row
from tools.measure.scenarios import MINIMUMS_MET, ScenarioRun, _Sampler

PERCENTILE_KEYS = {"p50": "50.00", "p90": "90.00", "p95": "95.00", "p97": "97.00", "p99": "99.00", "p99_9": "99.90"}
PROBE_QUERIES = 8
PROBE_S = 0.25
PROBE_MAX_S = 3.0
PROBE_MARGIN = 1.1
# LoadGen holds its generated queries in memory: about 0.27 kB a single_stream query and 0.43 kB an offline
# sample (peak RSS of 1M: 315 MB and 466 MB, LoadGen 6.0.17; 20M single_stream queries: 9.2 GB). A guess asks
# for at most MEMORY_SHARE of the memory available when the row starts, counted at GENERATED_BYTES a query or
# sample, and never fewer than MIN_GENERATED.
GENERATED_BYTES = 470
MEMORY_SHARE = 0.25
MIN_GENERATED = 1_000_000


def generation_limit(available: int | None = None) -> int:
    """How many queries or samples LoadGen may generate for one test, from ``available`` bytes of memory
    (default: psutil's available memory now)."""
    if available is None:
        import psutil

        available = int(psutil.virtual_memory().available)
    return max(MIN_GENERATED, int(available * MEMORY_SHARE / GENERATED_BYTES))


CONDITIONS = {  # the row's name -> (LoadGen's detail-log key, what LoadGen found unmet)
    "min_duration_met": ("result_min_duration_met", "min duration not met"),
    "min_queries_met": ("result_min_queries_met", "min queries not met"),
    "early_stopping_met": ("early_stopping_met", "early stopping not met"),
    "perf_constraints_met": ("result_perf_constraints_met", "latency constraint not met"),
}
_ESTIMATE = re.compile(r"Early stopping (\d+(?:\.\d+)?)th percentile estimate: (\d+)")

Step = Callable[[list], "tuple[list, float]"]


@dataclass
class Probe:
    queries: int
    latency_ns: int  # median per-query latency, back to back
    qps: float  # queries (pool batches) per second at the median latency


def probe(
    step: Step, pool: list[list], sync: Callable[[], Any], clock: Callable[[], int] = time.perf_counter_ns
) -> Probe:
    """At least ``PROBE_QUERIES`` queries and ``PROBE_S`` seconds back to back (at most ``PROBE_MAX_S``)."""
    latencies: list[int] = []
    start = clock()
    while True:
        t0 = clock()
        _, foo = step(pool[len(latencies) % len(pool)])
        sync()
        t1 = clock()
        latencies.append(max(t1 - t0 - int((foo or 0) * 1e9), 1))
        elapsed = t1 - start
        if (len(latencies) >= PROBE_QUERIES and elapsed >= PROBE_S * 1e9) or elapsed >= PROBE_MAX_S * 1e9:
            break
    median = int(statistics.median(latencies))
    return Probe(len(latencies), median, 1e9 / median)


def guesses(
    chosen: Scenario, config: CaseConfig, found: Probe, calls: int, clients: int, limit: int | None = None
) -> dict[str, float]:
    """What LoadGen is told in advance of the engine's speed (its TestSettings attribute -> value), from
    ``found``: single_stream's and multi_stream's expected latency (a query is ``calls`` engine calls of the
    probe's median), offline's expected qps (one client's rate, times ``clients``: a guess too high only
    lengthens the run; and enough samples for min_query_count queries). Each is bounded so that LoadGen
    generates at most ``limit`` queries (it generates twice min_duration of them at the expected latency)
    or offline samples (1.1 x min_duration at the expected qps), which it holds in memory; ``limit``
    defaults to ``generation_limit()``."""
    facts = chosen.loadgen
    limit = generation_limit() if limit is None else limit
    out: dict[str, float] = {}
    if facts.expected_latency_setting is not None:
        floor = math.ceil(2 * config.min_duration_s * 1e9 / limit)
        out[facts.expected_latency_setting] = max(1, floor, round(found.latency_ns * calls / PROBE_MARGIN))
    if facts.expected_qps_setting is not None:
        enough = config.min_query_count / max(config.min_duration_s * 1.1, 1e-3)
        ceiling = limit / max(config.min_duration_s * 1.1, 1e-3)
        out[facts.expected_qps_setting] = min(max(found.qps * clients * PROBE_MARGIN, enough), ceiling)
    return out


def loadgen_settings(
    lg: Any,
    scenario: str | Scenario,
    config: CaseConfig,
    found: Probe,
    batch_size: int,
    clients: int,
    target_qps: float | None,
) -> Any:
    """LoadGen's TestSettings for one row (see the module docstring): each setting its scenario's record names."""
    chosen = named(scenario)
    facts = chosen.loadgen
    settings = lg.TestSettings()
    settings.scenario = getattr(lg.TestScenario, facts.scenario)
    settings.mode = lg.TestMode.PerformanceOnly
    settings.min_duration_ms = round(config.min_duration_s * 1000)
    settings.max_duration_ms = round(config.max_duration_s * 1000)
    settings.min_query_count = chosen.min_query_count(int(config.min_query_count))
    settings.schedule_rng_seed = int(setting(config, "seed") or 0)
    calls = chosen.calls_per_query(query_samples(config, chosen), batch_size)  # LoadGen's samples are pool batches
    if facts.samples_per_query_setting is not None:
        setattr(settings, facts.samples_per_query_setting, calls)
    for name, value in guesses(chosen, config, found, calls, clients).items():
        setattr(settings, name, value)
    if facts.target_qps_setting is not None:
        if target_qps is None:
            raise ValueError(f"load_generator mlperf: {chosen.name} needs target_qps (samples/s)")
        setattr(settings, facts.target_qps_setting, float(target_qps) / batch_size)
    if facts.target_latency_setting is not None and chosen.bound_key is not None:
        setattr(settings, facts.target_latency_setting, int(getattr(config, chosen.bound_key) * 1e6))
    if facts.percentile_setting is not None and chosen.headline_fraction is not None:
        setattr(settings, facts.percentile_setting, chosen.headline_fraction)
    return settings


@dataclass(frozen=True)
class LoadgenTest:
    """One LoadGen test of a pool: its scenario, batch size and clients, the server scenario's target QPS
    (samples/s), the device's ``sync``, and whose outputs are kept: the queries on pool batches in
    ``sample_pool_indices``, at most ``max_sampled`` of them."""

    scenario: str | Scenario
    batch_size: int
    clients: int
    target_qps: float | None = None
    sync: Callable[[], Any] = lambda: None
    sample_pool_indices: frozenset = frozenset()
    max_sampled: int = 8


class PoolSUT:
    """LoadGen's system under test over a pool of batches; records InferPerf's own timings of each query.

    ``latencies_ns``: per query, completion minus the start of the engine call
    (server with several clients: minus LoadGen's issue, so the wait in the SUT's
    queue shows; with one client a backlog waits in LoadGen, before its issue call,
    and only LoadGen's own latencies, from the scheduled arrival, include it), less foo_time;
    ``completions_ns``: from the first issue. With ``calls_per_query`` > 1 (multi_stream, one
    client) an issue is one query of that many samples, timed as one: from the first engine call
    to the last completion. An engine error stops the work:
    every later sample is completed at once and the error is raised after the test.
    """

    def __init__(
        self, lg: Any, step: Step, pool: list[list], test: LoadgenTest, sampler, calls_per_query: int = 1
    ) -> None:
        clients = test.clients
        self.lg, self.step, self.pool, self.sync = lg, step, pool, test.sync
        self.inline = clients == 1
        self.from_issue = named(test.scenario).scheduled  # (several clients) the wait in the SUT's queue counts
        self.calls_per_query = calls_per_query
        self.whole_query = calls_per_query > 1
        self.clients = clients
        self.sampler, self.eligible = sampler, frozenset(test.sample_pool_indices)
        self.latencies_ns: list[int] = []
        self.completions_ns: list[int] = []
        self.foo_ns = 0
        self.start: int | None = None
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> "PoolSUT":
        if not self.inline:
            self._threads = [
                threading.Thread(target=self._work, name=f"loadgen-sut-{k}", daemon=True) for k in range(self.clients)
            ]
            for thread in self._threads:
                thread.start()
        return self

    def __exit__(self, *exc) -> None:
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join()

    def issue_query(self, ids: list[int], indices: list[int]) -> None:
        """LoadGen's IssueQuery (its "fast" form: sample ids and QSL indices as plain ints), on LoadGen's thread."""
        now = time.perf_counter_ns()
        if self.start is None:
            self.start = now
        if self.whole_query:
            self._serve_query(ids, indices)
            return
        if self.inline:
            self._serve_inline(ids, indices)
            return
        for sample_id, index in zip(ids, indices):
            self._queue.put((sample_id, index, now))

    def flush_queries(self) -> None:
        pass

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            self.lg.QuerySamplesComplete([self._serve(*item)])

    def _serve_inline(self, ids: list[int], indices: list[int]) -> None:
        """single_stream and offline x1, on LoadGen's thread: no other thread records, so the common
        case (no foo_time, no output to sample) appends without the lock. One completion call per
        issue: offline's one query completes as a whole."""
        step, pool, sync, clock, respond = (
            self.step,
            self.pool,
            self.sync,
            time.perf_counter_ns,
            self.lg.QuerySampleResponse,
        )
        latencies, completions, eligible = self.latencies_ns, self.completions_ns, self.eligible
        start = self.start if self.start is not None else clock()  # set by issue_query before this
        responses = []
        for sample_id, index in zip(ids, indices):
            if self.error is None:
                try:
                    t0 = clock()
                    outputs, foo = step(pool[index])
                    sync()
                    t1 = clock()
                    if foo or index in eligible:
                        self._record([(0, index, outputs)], foo, t0, t1)
                    else:
                        latencies.append(t1 - t0)
                        completions.append(t1 - start)
                except BaseException as exc:  # noqa: BLE001 - raised again after LoadGen's test ends
                    self.error = exc
            responses.append(respond(sample_id, 0, 0))
        self.lg.QuerySamplesComplete(responses)

    def _serve_query(self, ids: list[int], indices: list[int]) -> None:
        """One multi_stream query of several pool batches on LoadGen's thread: back to back, one
        ``sync()`` after the last, one latency from the first call to that completion."""
        step, pool, clock, respond = self.step, self.pool, time.perf_counter_ns, self.lg.QuerySampleResponse
        kept = []
        foo = 0.0
        if self.error is None:
            try:
                t0 = clock()
                for offset, index in enumerate(indices):
                    outputs, call_foo = step(pool[index])
                    foo += call_foo or 0.0
                    if index in self.eligible:
                        kept.append((offset, index, outputs))
                self.sync()
                t1 = clock()
                self._record(kept, foo, t0, t1)
            except BaseException as exc:  # noqa: BLE001 - raised again after LoadGen's test ends
                self.error = exc
        self.lg.QuerySamplesComplete([respond(sample_id, 0, 0) for sample_id in ids])

    def _serve(self, sample_id: int, index: int, issued: int) -> Any:
        """Run one sample's engine call (unless an earlier one failed); its response for LoadGen."""
        if self.error is None:
            try:
                t0 = time.perf_counter_ns()
                outputs, foo = self.step(self.pool[index])
                self.sync()
                t1 = time.perf_counter_ns()
                self._record([(0, index, outputs)], foo, issued if self.from_issue else t0, t1)
            except BaseException as exc:  # noqa: BLE001 - raised again after LoadGen's test ends
                self.error = self.error or exc
        return self.lg.QuerySampleResponse(sample_id, 0, 0)

    def _record(self, calls: list[tuple[int, int, list]], foo: float | None, begin: int, end: int) -> None:
        """One query's timing; ``calls``: its engine calls as (offset in the query, pool index, outputs),
        offered to the sampler numbered by engine call."""
        foo_ns = int(foo * 1e9) if foo else 0
        start = self.start if self.start is not None else begin
        with self._lock:
            self.foo_ns += foo_ns
            query = len(self.latencies_ns)
            self.latencies_ns.append(max(end - begin - foo_ns, 0))
            self.completions_ns.append(end - start)
            for offset, pool_index, outputs in calls:
                if self.sampler is not None and pool_index in self.eligible:
                    self.sampler.offer(query * self.calls_per_query + offset, pool_index, outputs)


def read_detail(path: Path) -> tuple[dict, list[str], list[str]]:
    """The values of LoadGen's detail log (``:::MLLOG {json}`` lines; the last of each key), its errors and warnings."""
    values: dict = {}
    errors: list[str] = []
    warnings: list[str] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.startswith(":::MLLOG "):
            continue
        try:
            entry = json.loads(line[len(":::MLLOG ") :])
        except json.JSONDecodeError:
            continue
        meta = entry.get("metadata") or {}
        if meta.get("is_error"):
            errors.append(f"{entry.get('key')}: {entry.get('value')}")
        elif meta.get("is_warning"):
            warnings.append(f"{entry.get('key')}: {entry.get('value')}")
        values[entry.get("key")] = entry.get("value")
    return values, errors, warnings


def _ms(value: Any) -> float | None:
    return None if value is None else value / 1e6


def summarize(values: dict, errors: list[str], warnings: list[str], scenario: str | Scenario, batch_size: int) -> dict:
    """The row's ``loadgen`` block from the detail log's values (see docs/result_schema.md)."""
    facts = named(scenario).loadgen
    early_text = values.get("early_stopping_result") or ""
    rate = values.get(facts.rate_key) if facts.rate_key is not None else None
    scheduled = values.get("result_scheduled_samples_per_sec")
    return {
        "version": values.get("loadgen_version"),
        "result_validity": values.get("result_validity"),
        "valid": values.get("result_validity") == "VALID" and not errors,
        "conditions": {name: values[key] for name, (key, _) in CONDITIONS.items() if key in values},
        "invalid_reason": " ".join(str(values.get("result_invalid_reason") or "").split()) or None,
        "early_stopping": [" ".join(part.split()) for part in re.split(r"\s\*\s", " " + early_text) if part.strip()],
        "early_stopping_estimate_ms": {
            f"p{q.removesuffix('.0')}": int(ns) / 1e6 for q, ns in _ESTIMATE.findall(early_text)
        },
        "query_count": values.get("result_query_count"),
        "loadgen_samples_per_second": rate,  # LoadGen's samples are pool batches
        "samples_per_second": None if rate is None else rate * batch_size,
        "scheduled_samples_per_second": None if scheduled is None else scheduled * batch_size,
        "latency_ms": {
            "min": _ms(values.get(f"result_min_{facts.latency_summary}_ns")),
            "mean": _ms(values.get(f"result_mean_{facts.latency_summary}_ns")),
            "max": _ms(values.get(f"result_max_{facts.latency_summary}_ns")),
            **{name: _ms(values.get(facts.latency_key.format(q=q))) for name, q in PERCENTILE_KEYS.items()},
        },
        "settings": {
            key.removeprefix("effective_"): value
            for key, value in values.items()
            if isinstance(key, str) and key.startswith("effective_")
        },
        "errors": errors,
        "warnings": warnings,
    }


def invalid_reasons(block: dict) -> list[str]:
    """LoadGen's INVALID as one reason naming what it found unmet."""
    if block["valid"]:
        return []
    unmet = [CONDITIONS[name][1] for name, met in block["conditions"].items() if met is False]
    if block["invalid_reason"]:
        unmet.append(block["invalid_reason"])
    if "early stopping not met" in unmet and block["early_stopping"]:
        unmet[unmet.index("early stopping not met")] += " (" + "; ".join(block["early_stopping"]) + ")"
    unmet += [f"error {e}" for e in block["errors"]]
    return [f"mlperf loadgen: {block['result_validity'] or 'no result'}: " + ("; ".join(unmet) or "no reason given")]


@dataclass
class LoadgenRun:
    """One row under LoadGen: InferPerf's timings of the queries (``run``) and LoadGen's own summary (``loadgen``)."""

    run: ScenarioRun
    loadgen: dict
    probe: Probe
    files: list[str] = field(default_factory=list)


def log_prefix(batch_size: int, scenario: str, clients: int) -> str:
    return f"mlperf_log_bs{batch_size}_{scenario}_x{clients}_"


def run_loadgen(step: Step, pool: list[list], spec: LoadgenTest, config: CaseConfig, log_dir: str | Path) -> LoadgenRun:
    """One performance row under LoadGen (see the module docstring); LoadGen's logs go to ``log_dir``."""
    import mlperf_loadgen as lg

    batch_size, clients, target_qps, sync = spec.batch_size, spec.clients, spec.target_qps, spec.sync
    sample_pool_indices, max_sampled = spec.sample_pool_indices, spec.max_sampled
    chosen = named(spec.scenario)
    if chosen.one_query_at_a_time and clients != 1:
        raise ValueError(f"{chosen.name}: issues one query at a time, so clients must be 1, got {clients}")
    found = probe(step, pool, sync)
    calls = chosen.calls_per_query(query_samples(config, chosen), batch_size)
    prefix = log_prefix(batch_size, chosen.name, clients)

    def test(guess: Probe) -> tuple[PoolSUT, _Sampler | None, dict]:
        sampler = _Sampler(max_sampled) if sample_pool_indices and max_sampled else None
        settings = loadgen_settings(lg, chosen, config, guess, batch_size, clients, target_qps)
        sut = PoolSUT(lg, step, pool, spec, sampler, calls_per_query=calls)
        _start_test(lg, sut, len(pool), settings, Path(log_dir), prefix)
        if sut.error is not None:
            raise sut.error
        return sut, sampler, summarize(*read_detail(Path(log_dir) / f"{prefix}detail.txt"), chosen, batch_size)

    sut, sampler, block = test(found)
    guess = rerun_guess(chosen, config, block, found, sut, calls, clients)
    if guess is not None:
        first = {"probe": asdict(found), "conditions": block["conditions"], "query_count": block["query_count"]}
        sut, sampler, block = test(guess)
        block["rerun"] = {**first, "why": "min duration not met at the probe's guess"}
        found = guess
    files = sorted(p.name for p in Path(log_dir).glob(prefix + "*"))
    return LoadgenRun(
        _scenario_run(sut, chosen, batch_size, clients, block, target_qps, sampler, calls), block, found, files
    )


def _start_test(lg: Any, sut: "PoolSUT", samples: int, settings: Any, log_dir: Path, prefix: str) -> None:
    """One LoadGen test of ``sut`` over a QSL of ``samples`` pool batches, its logs ``log_dir/prefix*``."""
    log_settings = lg.LogSettings()
    log_settings.log_output.outdir = str(log_dir)
    log_settings.log_output.prefix = prefix
    log_settings.log_output.copy_summary_to_stdout = False
    log_settings.enable_trace = False
    log_dir.mkdir(parents=True, exist_ok=True)
    handle = lg.ConstructFastSUT(sut.issue_query, sut.flush_queries)
    library = lg.ConstructQSL(samples, samples, lambda indices: None, lambda indices: None)
    try:
        with sut:
            lg.StartTestWithLogSettings(handle, library, settings, log_settings)
    finally:
        lg.DestroyQSL(library)
        lg.DestroyFastSUT(handle)


def rerun_guess(
    chosen: Scenario, config: CaseConfig, block: dict, found: Probe, sut: "PoolSUT", calls: int, clients: int
) -> Probe | None:
    """The guess for a second test, or None: only when LoadGen missed its minimum duration and met its query
    count after being told the engine's speed in advance (``guesses``), so the engine ran faster than the
    probe said. The new guess is the faster of the probe and the first test's median (per engine call), so
    the second test has more queries, unless the generation bound already held the first (then None)."""
    conditions = block["conditions"]
    if conditions.get("min_duration_met") is not False or conditions.get("min_queries_met") is False:
        return None
    if not sut.latencies_ns:
        return None
    per_call = max(1, int(statistics.median(sut.latencies_ns)) // max(calls, 1))
    latency = min(found.latency_ns, per_call)
    guess = Probe(len(sut.latencies_ns), latency, max(found.qps, 1e9 / latency))
    limit = generation_limit()  # one bound for both guesses
    before = guesses(chosen, config, found, calls, clients, limit)
    return guess if before and guesses(chosen, config, guess, calls, clients, limit) != before else None


def _scenario_run(
    sut: PoolSUT, chosen: Scenario, batch_size: int, clients: int, block: dict, target_qps, sampler, calls: int = 1
) -> ScenarioRun:
    order = sorted(range(len(sut.completions_ns)), key=sut.completions_ns.__getitem__)
    completions = [sut.completions_ns[i] for i in order]
    window = completions[-1] if completions else 0
    met = all(block["conditions"].get(k) is not False for k in ("min_duration_met", "min_queries_met"))
    return ScenarioRun(
        scenario=chosen,
        batch_size=batch_size,
        clients=clients,
        queries=len(order),
        samples=len(order) * batch_size * calls,
        duration_s=max(window - sut.foo_ns / clients, 0) / 1e9,
        latencies_ns=[sut.latencies_ns[i] for i in order],
        completions_ns=completions,
        foo_time_s=sut.foo_ns / 1e9,
        stop_reason=MINIMUMS_MET if met else "loadgen: minimums not met",
        target_qps=float(target_qps) if chosen.scheduled and target_qps is not None else None,
        issued_qps=block["scheduled_samples_per_second"],
        sampled_outputs=sampler.result() if sampler else {},
        samples_per_query=batch_size * calls,
    )


def latency_block(result: LoadgenRun) -> tuple[LatencyBlock, list[str]]:
    """The row's ``latency_ms`` and notes: LoadGen's own percentiles (per query), with InferPerf's
    floors; for offline, whose one LoadGen query has one latency, InferPerf's per-batch timings."""
    chosen = result.run.scenario
    if chosen.loadgen.one_query:
        stats = LatencyStats.from_ns(result.run.latencies_ns)
        if stats is None:
            return LatencyBlock(), []
        notes = [
            f"{chosen.name}: per-batch engine latency timed by the SUT (LoadGen times only its one query)",
            *stats.notes,
        ]
        return latency_of(stats), notes
    own = result.loadgen["latency_ms"]
    count = result.loadgen["query_count"] or 0
    block = {name: own.get(name) if enough_for(name, count) else None for name in MIN_SAMPLES_FOR_PERCENTILE}
    notes = [too_few_note(name, count) for name in MIN_SAMPLES_FOR_PERCENTILE if not enough_for(name, count)]
    return LatencyBlock(**block, mean=own.get("mean")), notes


def loadgen_row(
    stage: Any,
    step: Step,
    pool: list[list],
    batch_size: int,
    scenario: str,
    clients: int,
    references: dict,
    target_qps: float | None,
) -> PerformanceRow:
    """One row of ``tools.measure.stage.PerformanceStage`` under LoadGen, built by the same constructor as
    an InferPerf row (``tools.measure.rows.performance_row``) with ``load_generator`` mlperf and the
    ``loadgen`` block; its raw latencies are kept like every row's."""
    from contract.phase import Verdict
    from tools.measure.contention import CpuContention
    from tools.measure.verdict import accelerator_reason, contention_reason

    config = stage.config
    contention = CpuContention(str(config.device)).start()
    started = time.time()
    test = LoadgenTest(scenario, batch_size, clients, target_qps, stage.sync, frozenset(references))
    result = run_loadgen(step, pool, test, config, config.log_dir)
    finished = time.time()
    reading = contention.stop()
    run = result.run
    latency, notes = latency_block(result)
    test01 = stage.test01(run, references)
    verdict = Verdict(invalid_reasons(result.loadgen))
    verdict.add(contention_reason(reading.share, reading.cpus, config.contention_limit))
    verdict.add(accelerator_reason(reading.gpu_other_processes))
    if test01 and test01.get("passed") is False:
        verdict.add(test01["detail"])
    stage.report.raw_latencies_ns.append(list(run.latencies_ns))
    # LoadGen's rate where it logs one (not multi_stream's: InferPerf's timing of LoadGen's queries).
    qps = result.loadgen["samples_per_second"] if run.scenario.loadgen.rate_key is not None else run.qps
    # Intervals from the SUT's timings of LoadGen's queries, as information: LoadGen's verdict is the row's.
    return performance_row(
        run,
        config,
        RowFigures(
            qps=qps,
            latency=latency,
            latency_notes=notes,
            contention=reading,
            verdict=verdict.record(),
            latency_bound_met=None
            if latency_bound(run, config) is None
            else result.loadgen["conditions"].get("perf_constraints_met"),
            accuracy_in_performance_mode=test01,
            span=(started, finished),
            load_generator="mlperf",
            loadgen={**result.loadgen, "probe": asdict(result.probe), "log_files": result.files},
        ),
    )
