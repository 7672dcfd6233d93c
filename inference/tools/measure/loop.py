"""The one timing loop shared by framework validation and engine inference.

Definitions (the same for every case and every engine):
  core  = wall time of the model/engine call alone, device-synchronised,
          minus the engine's declared ``foo_time`` (time unrelated to inference);
  whole = wall time of the measured loop: data loading, host<->device copies,
          the call and evaluation, minus ``foo_time`` as well.
Warm-up calls run on the first batch (and once on a batch cut to the size of
the last, partial batch) before the measured loop and are excluded from both.

A query is one call on one batch. The loop makes ``repeat`` passes over the
data (FlagPerf's minimum) and then keeps making passes until at least
``min_query_count`` queries and ``min_duration_s`` of wall time are measured,
or until ``max_duration_s`` of wall time has passed; minimums are checked at
pass boundaries so every pass covers the whole data set. Every query's core
latency is kept raw for percentiles, and its completion on the cumulative core
clock for the throughput windows that judge stability (``tools.measure.verdict``).
Contention from other processes is read over exactly the measured loop.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from loguru import logger

from common.errors import EngineError
from common.stats import LatencyStats
from tools.measure.contention import ContentionReading, CpuContention
from tools.measure.phase_progress import PhaseProgress
from tools.measure.settings import MEASUREMENT_DEFAULTS
from tools.measure.verdict import (
    Verdict,
    accelerator_reason,
    contention_reason,
    minimum_reasons,
    minimums_met,
    stability_reason,
    window_throughputs,
)
from tools.torch_sync import sync_for_config

Step = Callable[[list], "tuple[list, float]"]


@dataclass
class PhaseResult:
    phase: str
    samples: int
    batches: int
    whole_time_s: float
    core_time_s: float
    foo_time_s: float
    warmup_batches: int
    accuracy: float | None
    latency: LatencyStats | None
    core_latencies_ns: list[int] = field(default_factory=list, repr=False)
    passes: int = 1
    window_qps: list[float] = field(default_factory=list)
    contention: ContentionReading | None = None
    verdict: Verdict = field(default_factory=Verdict)
    span_unix: tuple[float, float] | None = None  # wall-clock (time.time) start and end of the measured loop

    @property
    def whole_qps(self) -> float | None:
        return self.samples / self.whole_time_s if self.whole_time_s > 0 else None

    @property
    def core_qps(self) -> float | None:
        return self.samples / self.core_time_s if self.core_time_s > 0 else None


def as_input_list(x: Any) -> list:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _batch_len(y: Any, inputs: Sequence) -> int:
    for candidate in (y, inputs[0] if inputs else None):
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
        raise EngineError(f"{phase}: the engine call must return (list_of_outputs, foo_time), got {type(result).__name__}")
    outputs, foo_time = result
    if not isinstance(outputs, (list, tuple)):
        raise EngineError(f"{phase}: the engine's outputs must be a list of tensors, got {type(outputs).__name__}")
    if isinstance(foo_time, bool) or not isinstance(foo_time, (int, float)) or foo_time < 0:
        raise EngineError(f"{phase}: the engine's foo_time must be a non-negative number of seconds, got {foo_time!r}")
    return list(outputs), float(foo_time)


def timed_forward(
    step: Step,
    dataloader: Iterable,
    evaluator: Callable[[list, Any], float] | None,
    config: Any,
    phase: str,
) -> PhaseResult:
    """Run ``step`` over passes of ``dataloader`` until the minimums are met, and measure it.

    ``step(inputs) -> (outputs, foo_time)`` takes a list of CPU tensors and
    returns a list of CPU tensors; ``evaluator(outputs, y)`` returns the
    batch accuracy in [0, 1], weighted here by the batch size.
    """
    sync = sync_for_config(config)
    warmup = int(getattr(config, "warmup", 0))
    repeat = int(getattr(config, "repeat", 1))
    log_freq = int(getattr(config, "log_freq", 0)) or 0
    clock = time.perf_counter_ns

    if warmup > 0:
        first_x, _ = next(iter(dataloader))
        warm_inputs = as_input_list(first_x)
        for _ in range(warmup):
            _check_step_result(step(warm_inputs), phase)
        # Shape-specialising engines must also meet the short last batch before
        # the clock starts, or its first call would be timed as a compile.
        tail = _tail_batch_size(dataloader)
        if tail:
            _check_step_result(step([t[:tail] for t in warm_inputs]), phase)
        sync()

    min_queries = int(getattr(config, "min_query_count", MEASUREMENT_DEFAULTS["min_query_count"]))
    min_duration_s = float(getattr(config, "min_duration_s", MEASUREMENT_DEFAULTS["min_duration_s"]))
    max_duration_ns = int(float(getattr(config, "max_duration_s", MEASUREMENT_DEFAULTS["max_duration_s"])) * 1e9)
    contention_limit = float(getattr(config, "contention_limit", MEASUREMENT_DEFAULTS["contention_limit"]))

    core_ns: list[int] = []
    core_elapsed_ns: list[int] = []  # completion of each query on the cumulative core clock
    batch_sizes: list[int] = []
    core_total = 0
    foo_ns = 0
    samples = 0
    correct = 0.0
    evaluated = 0
    passes = 0
    progress = PhaseProgress.for_passes(phase, config, dataloader)  # PROGRESS lines, at most every 0.5 s
    contention = CpuContention(str(getattr(config, "device", "cpu"))).start()
    started_unix = time.time()
    start = clock()
    due = progress.begin(start)
    while True:
        for x, y in dataloader:
            inputs = as_input_list(x)
            t0 = clock()
            result = step(inputs)
            sync()
            t1 = clock()
            outputs, foo_time = _check_step_result(result, phase)
            foo = int(foo_time * 1e9)
            foo_ns += foo
            core = max(t1 - t0 - foo, 0)
            core_ns.append(core)
            core_total += core
            core_elapsed_ns.append(core_total)
            n = _batch_len(y, inputs)
            batch_sizes.append(n)
            samples += n
            if evaluator is not None:
                correct += float(evaluator(outputs, y)) * n
                evaluated += n
            if log_freq and len(core_ns) % log_freq == 0:
                logger.info(f"{phase}: batch {len(core_ns)}, core {core / 1e6:.2f} ms, running acc {correct / evaluated if evaluated else float('nan'):.4f}")
            if t1 >= due:
                due = progress.update(len(core_ns), t1)
        passes += 1
        if not core_ns:
            raise EngineError(f"{phase}: the data loader yielded no batch")
        elapsed = clock() - start
        if passes >= repeat and minimums_met(len(core_ns), elapsed / 1e9, min_queries, min_duration_s):
            break
        if elapsed >= max_duration_ns:
            break
    whole_ns = clock() - start - foo_ns
    span_unix = (started_unix, time.time())
    reading = contention.stop()
    progress.finish(len(core_ns), (whole_ns + foo_ns) / 1e9)
    if passes > repeat:
        logger.info(f"{phase}: {passes} passes over the data ({len(core_ns)} queries) to reach the measurement minimums")

    window_qps = window_throughputs(core_elapsed_ns, batch_sizes)
    verdict = Verdict().extend(minimum_reasons(len(core_ns), (whole_ns + foo_ns) / 1e9, min_queries, min_duration_s))
    verdict.add(stability_reason(window_qps))
    verdict.add(contention_reason(reading.share, reading.cpus, contention_limit))
    verdict.add(accelerator_reason(reading.gpu_other_processes))
    if foo_ns:
        logger.warning(f"{phase}: engine declared {foo_ns / 1e9:.3f} s of foo_time (excluded from whole and core)")
    return PhaseResult(
        phase=phase,
        samples=samples,
        batches=len(core_ns),
        whole_time_s=whole_ns / 1e9,
        core_time_s=sum(core_ns) / 1e9,
        foo_time_s=foo_ns / 1e9,
        warmup_batches=warmup,
        accuracy=(correct / evaluated) if evaluated else None,
        latency=LatencyStats.from_ns(core_ns),
        core_latencies_ns=core_ns,
        passes=passes,
        window_qps=window_qps,
        contention=reading,
        verdict=verdict,
        span_unix=span_unix,
    )
