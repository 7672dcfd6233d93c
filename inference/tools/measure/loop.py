"""The one timing loop shared by framework validation and engine inference.

Definitions (the same for every case and every engine):
  core  = wall time of the model/engine call alone, device-synchronised,
          minus the engine's declared ``foo_time`` (time unrelated to inference,
          ``contract.settings.minus_foo``);
  whole = wall time of the measured loop: data loading, host<->device copies,
          the call and evaluation, minus ``foo_time`` as well.

A phase runs three steps:
  1. warm-up and settle  ``warmup`` untimed calls on the first batch (and once on a
     batch cut to the size of the last, partial batch), then the settle phase on
     the first batch: blocks of calls until the rate stops trending, at most
     ``settle_max_s`` (``tools.measure.precision.settle``). Neither is measured.
  2. the measured loop   ``repeat`` passes over the data (FlagPerf's minimum), then
     more passes until ``min_query_count`` queries and ``min_duration_s`` of wall
     time are measured and core and whole throughput are each within ±``precision``
     (their 95 % batch-means intervals, checked at pass boundaries, at most every
     ``CHECK_EVERY_S``), or until ``max_duration_s`` of wall time has passed. Every
     pass covers the whole data set, so accuracy is weighted evenly. With
     ``precision: null`` (no precision asked) it stops at ``repeat`` and the
     minimums: ``repeat: 1, min_query_count: 1, min_duration_s: 0`` is one pass.
  3. the verdict         minimums, precision, drift (first against last third),
     contention read over exactly the measured loop (``tools.measure.verdict``).

An engine that declares ``call_numpy`` (``contract/engine_base.py``) is called on numpy arrays:
the pass reads a chunk of batches (``CHUNK_BATCHES``, or ``CHUNK_BYTES`` of inputs) and converts
them before the clock, times the calls back to back, then records each query and evaluates its
outputs (as tensors), so neither the conversions nor the case's loader and evaluator run between
timed calls. The timing of a call is the same either way; whole time still counts everything.
Where the last call took under ``REWARM_BELOW_NS``, ``REWARM_CALLS`` untimed calls on the chunk's
last batch come before its timed ones (not before the first chunk, which follows the warm-up):
the pass's own work between chunks (reading, evaluating, the stop rule) leaves the caches cold.
On calls of tens of microseconds (digits) the first calls of a chunk are measurably slower than
the same calls back to back (docs/measurement.md, "The harness's overhead"); a call of a
millisecond or more hides it.

A query is one call on one batch; every query's core latency is kept raw for
percentiles and their intervals, and its end on the core and whole clocks for
the throughput intervals.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence

from loguru import logger

from common.errors import EngineError
from common.stats import LatencyStats
from contract.config import CaseView, setting
from contract.phase import PhaseResult
from contract.settings import MAX_DURATION_REACHED, minus_foo
from tools.measure.contention import CpuContention
from tools.measure.phase_progress import PhaseProgress
from tools.measure.precision import (
    Figures,
    Settle,
    StopRule,
    Target,
    Timeline,
    drift,
    measure_figures,
    precision_block,
    precision_reasons,
    settle,
)
from tools.measure.verdict import minimums_met, window_throughputs, window_verdict
from tools.torch_sync import sync_for_config

Step = Callable[[list], "tuple[list, float]"]
PHASE_FIGURES = ("core qps", "whole qps")  # the throughputs a phase reports, both judged
# An engine with call_numpy: the batches the pass reads and converts before its clock, at most.
CHUNK_BATCHES = 64
CHUNK_BYTES = 64 << 20
# ... and the untimed calls before a chunk's timed ones, where the last call was shorter than REWARM_BELOW_NS
REWARM_CALLS = 2
REWARM_BELOW_NS = 1_000_000


@dataclass(frozen=True)
class LoopSettings:
    """The measurement keys a phase reads, with the framework defaults for configs that lack them."""

    warmup: int
    repeat: int
    log_freq: int
    min_queries: int
    min_duration_s: float
    max_duration_s: float
    contention_limit: float
    precision: float | None  # None: no precision asked, the loop stops at repeat and the minimums
    settle_max_s: float
    device: str

    @classmethod
    def from_config(cls, config: CaseView) -> "LoopSettings":
        def value(key: str) -> Any:
            return setting(config, key)

        return cls(
            warmup=int(value("warmup")),
            repeat=int(value("repeat")),
            log_freq=int(value("log_freq")) or 0,
            min_queries=int(value("min_query_count")),
            min_duration_s=float(value("min_duration_s")),
            max_duration_s=float(value("max_duration_s")),
            contention_limit=float(value("contention_limit")),
            precision=None if value("precision") is None else float(value("precision")),
            settle_max_s=float(value("settle_max_s")),
            device=str(value("device")),
        )

    def target(self) -> Target:
        return Target(throughput=PHASE_FIGURES, precision=self.precision)


def as_input_list(x: Any) -> list:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _batch_len(y: Any, inputs: Sequence) -> int:
    for candidate in (y, inputs[0] if inputs else None):
        if candidate is None:
            continue
        try:
            return len(candidate)
        except TypeError:
            continue
    return 1


def _tail_batch_size(dataloader: Any) -> int:
    """Size of the last, partial batch, or 0 when batches divide the data set evenly."""
    try:
        size, batch = len(dataloader.dataset), dataloader.batch_size
    except (AttributeError, TypeError):
        return 0
    if not batch or getattr(dataloader, "drop_last", False):
        return 0
    return size % batch


def _check_step_result(result: Any, phase: str) -> tuple[list, float]:
    if not (isinstance(result, tuple) and len(result) == 2):
        raise EngineError(
            f"{phase}: the engine call must return (list_of_outputs, foo_time), got {type(result).__name__}"
        )
    outputs, foo_time = result
    if not isinstance(outputs, (list, tuple)):
        raise EngineError(f"{phase}: the engine's outputs must be a list of tensors, got {type(outputs).__name__}")
    if isinstance(foo_time, bool) or not isinstance(foo_time, (int, float)) or foo_time < 0:
        raise EngineError(f"{phase}: the engine's foo_time must be a non-negative number of seconds, got {foo_time!r}")
    return list(outputs), float(foo_time)


@dataclass
class _Raw:
    """What the measured loop collects, query by query."""

    core_ns: list[int] = field(default_factory=list)
    core_ends: list[int] = field(default_factory=list)  # each query's end on the cumulative core clock
    whole_ends: list[int] = field(
        default_factory=list
    )  # ... and on the wall clock since the start, minus foo_time so far
    batch_sizes: list[int] = field(default_factory=list)
    core_total: int = 0
    foo_ns: int = 0
    samples: int = 0
    correct: float = 0.0
    evaluated: int = 0
    passes: int = 0
    stop: str = MAX_DURATION_REACHED
    start: int = 0  # the measured loop's first clock reading: whole_ends count from it

    def record(self, t0: int, t1: int, foo_time: float, n: int) -> int:
        core, foo = minus_foo(t1 - t0, foo_time)
        self.foo_ns += foo
        self.core_ns.append(core)
        self.core_total += core
        self.core_ends.append(self.core_total)
        self.whole_ends.append(t1 - self.start - self.foo_ns)
        self.batch_sizes.append(n)
        self.samples += n
        return core

    def timelines(self) -> dict[str, Timeline]:
        return {
            "core qps": Timeline.tiled(self.core_ends, self.batch_sizes),
            "whole qps": Timeline.tiled(self.whole_ends, self.batch_sizes),
        }

    def figures(self, target: Target) -> Figures:
        return measure_figures(target, self.timelines())


def _warm_up_and_settle(step: Step, dataloader: Iterable, settings: LoopSettings, phase: str, sync, clock) -> Settle:
    """Step 1: warm-up calls, then the settle phase, on the first batch; neither is measured."""
    if settings.warmup <= 0 and not settings.settle_max_s > 0:
        return Settle()
    first = next(iter(dataloader), None)
    if first is None:
        raise EngineError(f"{phase}: the data loader yielded no batch")
    inputs = as_input_list(first[0])
    for _ in range(settings.warmup):
        _check_step_result(step(inputs), phase)
    # Shape-specialising engines must also meet the short last batch before
    # the clock starts, or its first call would be timed as a compile.
    tail = _tail_batch_size(dataloader)
    if settings.warmup > 0 and tail:
        _check_step_result(step([t[:tail] for t in inputs]), phase)
    sync()

    def one_query() -> int:
        t0 = clock()
        result = step(inputs)
        sync()
        t1 = clock()
        return minus_foo(t1 - t0, _check_step_result(result, phase)[1])[0]

    return settle(one_query, clock, settings.settle_max_s)


@dataclass(frozen=True)
class _Pass:
    """What every pass of the measured loop shares; a pass binds each field to a local before its loop."""

    dataloader: Iterable
    raw: _Raw
    sync: Callable[[], Any]
    clock: Callable[[], int]
    query_done: Callable[[int, tuple, Any, Any, Any], int]  # _query_recorder's


def _one_pass(step, job: _Pass, due: int) -> int:
    dataloader, sync, clock, query_done = job.dataloader, job.sync, job.clock, job.query_done
    for x, y in dataloader:
        inputs = as_input_list(x)
        t0 = clock()
        result = step(inputs)
        sync()
        t1 = clock()
        due = query_done(due, (t0, t1, result), y, inputs, None)
    return due


def _query_recorder(
    raw: _Raw, phase: str, evaluator, log_freq: int, progress
) -> Callable[[int, tuple, Any, Any, Any], int]:
    """The work after each query's clock, with what stays the same for the whole loop bound once."""

    def query_done(due: int, timed, y, inputs, convert) -> int:
        """After one query's clock: check and record it, evaluate its outputs (each through ``convert``
        first, when given), log every ``log_freq``-th and report progress when due; the next due time."""
        t0, t1, result = timed
        outputs, foo_time = _check_step_result(result, phase)
        n = _batch_len(y, inputs)
        core = raw.record(t0, t1, foo_time, n)
        if evaluator is not None:
            raw.correct += float(evaluator(outputs if convert is None else [convert(o) for o in outputs], y)) * n
            raw.evaluated += n
        if log_freq and len(raw.core_ns) % log_freq == 0:
            accuracy = raw.correct / raw.evaluated if raw.evaluated else float("nan")
            logger.info(f"{phase}: batch {len(raw.core_ns)}, core {core / 1e6:.2f} ms, running acc {accuracy:.4f}")
        return progress.update(len(raw.core_ns), t1) if t1 >= due else due

    return query_done


def numpy_call(step: Any) -> Callable[[list], Any] | None:
    """The engine's ``call_numpy`` when it declares one (``contract/engine_base.py``), else None."""
    from contract.engine_base import EngineBase

    return step.call_numpy if isinstance(step, EngineBase) and step.implements("call_numpy") else None


def _chunk(batches: Iterator) -> list[tuple[list, Any]]:
    """The next batches of the pass as numpy arrays, up to ``CHUNK_BATCHES`` of them or ``CHUNK_BYTES``
    of inputs (at least one batch); empty at the end of the data."""
    import numpy as np

    chunk: list[tuple[list, Any]] = []
    size = 0
    for x, y in batches:
        arrays = [np.asarray(t) for t in as_input_list(x)]  # a CPU tensor's own memory, as Tensor.numpy gives
        chunk.append((arrays, y))
        size += sum(int(a.nbytes) for a in arrays)
        if len(chunk) >= CHUNK_BATCHES or size >= CHUNK_BYTES:
            break
    return chunk


def _one_pass_numpy(call, job: _Pass, due: int) -> int:
    """``_one_pass`` for an engine with ``call_numpy``: per chunk, the batches are read and converted
    before the clock, the calls run back to back, then each query is recorded and its outputs, as
    tensors, evaluated. What is timed is the same (one call, device-synchronised); what runs between
    the timed calls is only the loop."""
    from torch import from_numpy

    raw, sync, clock, query_done = job.raw, job.sync, job.clock, job.query_done
    batches = iter(job.dataloader)
    while chunk := _chunk(batches):
        if raw.core_ns and raw.core_ns[-1] < REWARM_BELOW_NS:  # the caches the pass's own work left cold
            for _ in range(REWARM_CALLS):
                call(chunk[-1][0])
            sync()
        timed = []
        for arrays, _ in chunk:
            t0 = clock()
            result = call(arrays)
            sync()
            timed.append((t0, clock(), result))
        for (arrays, y), query in zip(chunk, timed):
            due = query_done(due, query, y, arrays, from_numpy)
    return due


def _measured_loop(
    step, dataloader, evaluator, config: CaseView, settings: LoopSettings, phase: str, sync, clock
) -> tuple[_Raw, int, StopRule]:
    """Step 2: passes until repeat, the minimums and the precision are met, or max_duration_s passes.
    Returns what was collected, the wall time of the loop in ns (foo_time included) and the stop rule."""
    raw = _Raw()
    target = settings.target()
    rule = StopRule(target, clock, settings.max_duration_s)
    max_ns = int(settings.max_duration_s * 1e9)
    progress = PhaseProgress.for_passes(phase, config, dataloader)  # PROGRESS lines, at most every 0.5 s
    call = numpy_call(step)
    one_pass = _one_pass if call is None else _one_pass_numpy
    job = _Pass(dataloader, raw, sync, clock, _query_recorder(raw, phase, evaluator, settings.log_freq, progress))
    start = raw.start = clock()
    due = progress.begin(start)
    while True:
        due = one_pass(call or step, job, due)
        raw.passes += 1
        if not raw.core_ns:
            raise EngineError(f"{phase}: the data loader yielded no batch")
        now = clock()
        elapsed = now - start
        if raw.passes >= settings.repeat and minimums_met(
            len(raw.core_ns), elapsed / 1e9, settings.min_queries, settings.min_duration_s
        ):
            decision = rule.decide(now, elapsed, lambda: raw.figures(target))
            if decision is not None:
                raw.stop = decision
                break
        if elapsed >= max_ns:
            break
    wall_ns = clock() - start
    progress.finish(len(raw.core_ns), wall_ns / 1e9)
    return raw, wall_ns, rule


def timed_forward(
    step: Step,
    dataloader: Iterable,
    evaluator: Callable[[list, Any], float] | None,
    config: CaseView,
    phase: str,
) -> PhaseResult:
    """Run ``step`` over passes of ``dataloader`` until its figures are precise, and measure it.

    ``step(inputs) -> (outputs, foo_time)`` takes a list of CPU tensors and
    returns a list of CPU tensors; ``evaluator(outputs, y)`` returns the
    batch accuracy in [0, 1], weighted here by the batch size.
    """
    settings = LoopSettings.from_config(config)
    sync = sync_for_config(config)
    clock = time.perf_counter_ns
    settled = _warm_up_and_settle(step, dataloader, settings, phase, sync, clock)
    contention = CpuContention(settings.device).start()
    started_unix = time.time()
    raw, wall_ns, rule = _measured_loop(step, dataloader, evaluator, config, settings, phase, sync, clock)
    span_unix = (started_unix, time.time())
    reading = contention.stop()
    if raw.passes > settings.repeat:
        logger.info(
            f"{phase}: {raw.passes} passes over the data ({len(raw.core_ns)} queries) "
            "to reach the measurement minimums and precision"
        )
    if raw.foo_ns:
        logger.warning(f"{phase}: engine declared {raw.foo_ns / 1e9:.3f} s of foo_time (excluded from whole and core)")
    return _phase_result(raw, wall_ns, settings, phase, settled, reading, span_unix, rule.checks)


def _phase_result(
    raw: _Raw, wall_ns: int, settings: LoopSettings, phase: str, settled: Settle, reading, span_unix, checks: int
) -> PhaseResult:
    """Step 3: figures, intervals and the verdict."""
    target = settings.target()
    timelines = raw.timelines()
    figures = measure_figures(target, timelines)
    drifts = {name: drift(timeline, settings.precision) for name, timeline in timelines.items()}
    verdict = window_verdict(
        len(raw.core_ns),
        wall_ns / 1e9,
        (settings.min_queries, settings.min_duration_s),
        precision_reasons(target, figures, drifts, wall_ns / 1e9, raw.stop),
        drifts,
        reading,
        settings.contention_limit,
    )
    result = PhaseResult(
        phase=phase,
        samples=raw.samples,
        batches=len(raw.core_ns),
        whole_time_s=(wall_ns - raw.foo_ns) / 1e9,
        core_time_s=raw.core_total / 1e9,
        foo_time_s=raw.foo_ns / 1e9,
        warmup_batches=settings.warmup,
        accuracy=(raw.correct / raw.evaluated) if raw.evaluated else None,
        latency=LatencyStats.from_ns(raw.core_ns),
        core_latencies_ns=raw.core_ns,
        passes=raw.passes,
        window_qps=window_throughputs(raw.core_ends, raw.batch_sizes),
        contention=reading,
        verdict=verdict,
        span_unix=span_unix,
    )
    core, whole = figures.throughput.get("core qps"), figures.throughput.get("whole qps")
    result.core_qps_ci95 = core.around(result.core_qps) if core else None
    result.whole_qps_ci95 = whole.around(result.whole_qps) if whole else None
    result.precision = precision_block(target, figures, settled, drifts, checks, raw.stop)
    return result
