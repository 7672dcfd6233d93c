"""The base tier's measurement: a kernel's rate (FLOP/s, bytes/s) measured until precise.

A base case (``benchmarks/base_*``) measures the chip, not a model. Its kernels (a GEMM, a
STREAM copy or triad, a host<->device copy, an all-reduce) are timed here with the same
machinery as the model cases (``tools/measure/precision.py``): warm-up and settle, then calls
until the minimums are met and the rate's 95 % interval is within ``precision``, or
``max_duration_s`` passes; then the verdict (minimums, precision, drift, contention).

Terms:
  work      what one call does, in the figure's unit: FLOP for a GEMM, bytes moved for a
            memory or transfer kernel (a GEMM's, a STREAM kernel's and an all-reduce's are
            defined once in ``contract/kernels.py``, beside the kernels: ``gemm_flop``,
            ``stream_bytes``, ``allreduce_bandwidth``);
  rate      work x calls / measured time (FLOP/s, bytes/s): the timeline's throughput with
            every call carrying ``work``.
A base case reaches ``measure_kernel`` and ``measure_collective`` through the contract
(``contract/measuring.py``), never by importing this module.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

from contract.kernels import KernelRate, KernelSettings
from contract.phase import Verdict
from contract.settings import MAX_DURATION_REACHED, MIN_QUERIES, MINIMUMS_MET, PRECISION_REACHED
from tools.measure.contention import CpuContention
from tools.measure.precision import (
    Settle,
    StopRule,
    Target,
    Timeline,
    drift,
    imprecise,
    measure_figures,
    measured_once_more_on_drift,
    precision_block,
    precision_reasons,
    settle,
)
from tools.measure.verdict import (
    accelerator_reason,
    contention_reason,
    drift_not_judged,
    minimum_reasons,
    minimums_met,
)

RATE = "rate"  # the one throughput figure a kernel measurement judges
JUDGED_CALLS = 3 * MIN_QUERIES  # a window of this many calls has MIN_QUERIES in each third: its drift is judged


class _NoContention:
    """For tests on a fake clock: no reading of the real machine."""

    def start(self) -> "_NoContention":
        return self

    def stop(self) -> None:
        return None


def measure_kernel(
    call: Callable[[], Any],
    work: float,
    settings: KernelSettings,
    sync: Callable[[], None] = lambda: None,
    clock: Callable[[], int] = time.perf_counter_ns,
    contention: Any = None,
) -> KernelRate:
    """Time ``call()`` (one kernel invocation doing ``work``) until its rate is precise.

    Warm-up, settle, then the measured window. A window that drifted (its first and last thirds
    disagree), with no other reason to be INVALID, is measured once more, right after it, and the
    second window is the figure, its ``precision.remeasured`` keeping the first one's drift and
    reasons (``precision.py::measured_once_more_on_drift``): the rate stepped once (a frequency
    settling, a fresh kernel warming up) and the window after the step is the chip's; a rate that
    keeps moving drifts again and stays INVALID. Both only where a precision is asked (a judged
    figure): the window then holds at least ``JUDGED_CALLS`` calls, so that each third has the
    queries its drift is judged on.

    ``sync()`` waits for the device (a no-op on CPU); ``clock`` is a nanosecond clock (a fake
    one in tests); ``contention`` has ``start()`` and ``stop() -> ContentionReading | None``
    (default: ``CpuContention`` on ``settings.device``)."""
    if not work > 0:
        raise ValueError(f"a kernel's work per call must be positive, got {work}")
    for _ in range(settings.warmup):
        call()
    sync()

    def one_call() -> int:
        t0 = clock()
        call()
        sync()
        return clock() - t0

    settled: Settle = settle(one_call, clock, settings.settle_max_s)
    monitor = contention if contention is not None else CpuContention(settings.device)
    if settings.precision is None:  # information (a GEMM's size sweep): one window, nothing to measure again for
        return _window(call, work, settings, sync, clock, monitor, settled)
    return measured_once_more_on_drift(
        lambda: _window(call, work, settings, sync, clock, monitor, settled),
        lambda rate: rate.precision,
        lambda rate: rate.verdict.reasons,
        only_drift=True,
    )


def _window(
    call: Callable[[], Any],
    work: float,
    settings: KernelSettings,
    sync: Callable[[], None],
    clock: Callable[[], int],
    contention: Any,
    settled: Settle,
) -> KernelRate:
    """One measured window: calls until the minimums (and ``JUDGED_CALLS`` where a precision is
    asked) are met and the rate is precise, or ``max_duration_s`` passes; then its verdict."""
    target = Target(throughput=(RATE,), precision=settings.precision)
    rule = StopRule(target, clock, settings.max_duration_s)
    monitor = contention.start()
    least = max(settings.min_queries, JUDGED_CALLS if settings.precision is not None else 0)
    ends: list[int] = []
    stop = MAX_DURATION_REACHED
    max_ns = int(settings.max_duration_s * 1e9)
    start = clock()
    while True:
        call()
        sync()
        now = clock()
        elapsed = now - start
        ends.append(elapsed)
        if minimums_met(len(ends), elapsed / 1e9, least, settings.min_duration_s):
            decision = rule.decide(now, elapsed, lambda: measure_figures(target, {RATE: Timeline.tiled(ends, work)}))
            if decision is not None:
                stop = decision
                break
        if elapsed >= max_ns:
            break
    return _rate(ends, work, settings, target, settled, rule.checks, stop, monitor.stop())


def _rate(
    ends: list[int],
    work: float,
    settings: KernelSettings,
    target: Target,
    settled: Settle,
    checks: int,
    stop: str,
    reading: Any,
) -> KernelRate:
    """The measured window's rate, interval and verdict (minimums, precision, drift, contention)."""
    span_ns = ends[-1]
    timeline = Timeline.tiled(ends, work)
    figures = measure_figures(target, {RATE: timeline})
    drifts = {RATE: drift(timeline, settings.precision)}
    verdict = Verdict().extend(minimum_reasons(len(ends), span_ns / 1e9, settings.min_queries, settings.min_duration_s))
    verdict.extend(precision_reasons(target, figures, drifts, span_ns / 1e9, stop))
    if reading is not None:
        verdict.add(contention_reason(reading.share, reading.cpus, settings.contention_limit))
        verdict.add(accelerator_reason(reading.gpu_other_processes))
    verdict.skip(drift_not_judged(drifts))
    value = work * len(ends) / (span_ns / 1e9) if span_ns > 0 else None
    interval = figures.throughput.get(RATE)
    return KernelRate(
        value=value,
        ci95=interval.around(value) if interval is not None else None,
        calls=len(ends),
        seconds=span_ns / 1e9,
        work_per_call=float(work),
        verdict=verdict,
        precision=precision_block(target, figures, settled, drifts, checks, stop),
        contention=reading.to_dict() if reading is not None else None,
    )


def measure_collective(
    call: Callable[[], Any],
    work: float,
    settings: KernelSettings,
    agree: Callable[[bool, bool], bool],
    sync: Callable[[], None] = lambda: None,
    clock: Callable[[], int] = time.perf_counter_ns,
    contention: Any = None,
) -> KernelRate:
    """``measure_kernel`` for a collective (an all-reduce), whose every rank must make the same
    number of calls: calls run in rounds of ``settings.min_queries``; after each round every rank
    says whether it wants more (its minimums or precision not met) and whether it passed
    ``max_duration_s``, and ``agree(wants_more, out_of_time) -> go_on`` (an all-reduce of the
    two flags) gives every rank the same answer. No settle phase: its length is each rank's own."""
    if not work > 0:
        raise ValueError(f"a kernel's work per call must be positive, got {work}")
    for _ in range(settings.warmup):
        call()
    sync()
    target = Target(throughput=(RATE,), precision=settings.precision)
    monitor = (contention if contention is not None else CpuContention(settings.device)).start()
    ends: list[int] = []
    checks = 0
    start = clock()
    while True:
        for _ in range(max(settings.min_queries, 1)):
            call()
            sync()
            ends.append(clock() - start)
        elapsed = ends[-1]
        checks += 1
        met = minimums_met(len(ends), elapsed / 1e9, settings.min_queries, settings.min_duration_s)
        precise = settings.precision is None or not imprecise(
            target, measure_figures(target, {RATE: Timeline.tiled(ends, work)})
        )
        if not agree(not (met and precise), elapsed >= settings.max_duration_s * 1e9):
            break
    stop = (
        PRECISION_REACHED
        if settings.precision is not None and precise
        else MINIMUMS_MET
        if met and settings.precision is None
        else MAX_DURATION_REACHED
    )
    return _rate(ends, work, settings, target, Settle(), checks, stop, monitor.stop())


def fits(needed_bytes: float, available_bytes: float | None, share: float = 0.8) -> bool:
    """Whether ``needed_bytes`` fits in ``share`` of ``available_bytes`` (unknown: assume it does)."""
    return available_bytes is None or needed_bytes <= share * available_bytes


def gib(value: float) -> str:
    return f"{value / 2**30:.3g} GiB"


def finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
