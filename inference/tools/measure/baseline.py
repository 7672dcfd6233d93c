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
  rate      a kernel timed call by call (``measure_kernel``: a GEMM, STREAM, a transfer): the
            rate of its median call, work / the median call time (FLOP/s, bytes/s), as
            torch.utils.benchmark heads its figures with the median. A chip's peak is what it
            reaches undisturbed: a minority of calls slowed by something else on the host (a
            virtual machine's neighbour, an interrupt) lowers a mean but not the median, and
            the median's interval is narrower on such a host, so the window reaches its
            precision sooner. Its interval is the median call time's, as a latency
            percentile's (``common.stats.percentile_ci``), inverted. The mean rate, work x calls /
            measured time, is kept beside it as ``sustained`` (information), and drift is
            judged on it, as on every measured window (its thirds' means): a trend in the
            chip's speed moves both, and the thirds' medians, whose intervals leave out the
            host's slower swings, would call every such swing a drift. An all-reduce
            (``measure_collective``), whose ranks call in lock step, is the mean rate, as
            nccl-tests reports it.
A base case reaches ``measure_kernel`` and ``measure_collective`` through the contract
(``contract/measuring.py``), never by importing this module.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from common.stats import (
    MIN_SAMPLES_FOR_PERCENTILE,
    effective_size,
    honest_lag1,
    lag1,
    percentile,
    percentile_ci,
)
from contract.kernels import KernelRate, KernelSettings
from contract.phase import Verdict
from contract.settings import MAX_DURATION_REACHED, MIN_QUERIES, MINIMUMS_MET, PRECISION_REACHED
from tools.measure.contention import CpuContention
from tools.measure.precision import (
    Figures,
    Interval,
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
MEDIAN = 50.0
MEDIAN_METHOD = (
    "rate of the median call (work / median call time); its interval: the median call time's, binomial order "
    "statistics at the effective sample size widened by block medians, inverted"
)


class _NoContention:
    """For tests on a fake clock: no reading of the real machine."""

    def start(self) -> "_NoContention":
        return self

    def stop(self) -> None:
        return None


def _monitor(contention: Any, clock: Callable[[], int], device: str) -> Any:
    """The contention reading a window takes: the one given, else the machine's CPUs, except on a fake
    clock (a test's), whose instant windows say nothing of the real machine's load."""
    if contention is not None:
        return contention
    return CpuContention(device) if clock is time.perf_counter_ns else _NoContention()


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
    (default: ``CpuContention`` on ``settings.device``; none on a fake clock: ``_monitor``)."""
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
    monitor = _monitor(contention, clock, settings.device)
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
            decision = rule.decide(now, elapsed, lambda: median_figures(ends, work))
            if decision is not None:
                stop = decision
                break
        if elapsed >= max_ns:
            break
    return _rate(ends, work, settings, target, settled, _Stopped(rule.checks, stop), monitor.stop(), by_median=True)


def median_call_rate(durations_ns: Sequence[float] | np.ndarray, work: float) -> tuple[float | None, Interval | None]:
    """The rate of the median call, ``work`` over the median call time (None without calls, or when
    the median call took no measurable time), and its 95 % interval: the median call time's
    (``common.stats.percentile_ci``), inverted; None below ``MIN_QUERIES`` calls or where the
    calls are too correlated for a bounded one."""
    ordered = [float(d) for d in durations_ns]
    if not ordered:
        return None, None
    values = sorted(ordered)
    middle = percentile(values, MEDIAN)
    if not middle > 0:
        return None, None
    value = work / middle * 1e9
    if len(ordered) < MIN_QUERIES:
        return value, None
    bounds = percentile_ci(ordered, values, MEDIAN, MIN_SAMPLES_FOR_PERCENTILE["p50"][1])
    if bounds is None or not bounds[0] > 0:
        return value, None
    rho = lag1(ordered)
    independent = effective_size(len(ordered), honest_lag1(rho, len(ordered)))
    return value, Interval(value, work / bounds[1] * 1e9, work / bounds[0] * 1e9, len(ordered), rho, independent)


def _durations(ends: Sequence[int]) -> np.ndarray:
    """Each call's time, from the window's call ends (sequential calls: each began where the last ended)."""
    return np.diff(np.asarray(ends, dtype=np.float64), prepend=0.0)


def median_figures(ends: Sequence[int], work: float) -> Figures:
    """The window's judged figure, the median call's rate (``RATE``); timeless where no call took any time."""
    if len(ends) >= MIN_QUERIES and not ends[-1] > 0:
        return Figures(timeless=[RATE])
    return Figures({RATE: median_call_rate(_durations(ends), work)[1]})


@dataclass(frozen=True)
class _Stopped:
    """How a measured window ended: the stop rule's checks and its reason (``contract.settings``)."""

    checks: int
    reason: str


def _rate(
    ends: list[int],
    work: float,
    settings: KernelSettings,
    target: Target,
    settled: Settle,
    stopped: _Stopped,
    reading: Any,
    by_median: bool = False,
) -> KernelRate:
    """The measured window's rate, interval and verdict (minimums, precision, drift, contention):
    the median call's (``by_median``, the mean rate kept as ``sustained``) or the mean's."""
    span_ns = ends[-1]
    timeline = Timeline.tiled(ends, work)
    mean_figures = measure_figures(target, {RATE: timeline})
    mean = work * len(ends) / (span_ns / 1e9) if span_ns > 0 else None
    drifts = {RATE: drift(timeline, settings.precision)}
    value, figures = mean, mean_figures
    if by_median:
        figures = median_figures(ends, work)
        found = figures.throughput.get(RATE)  # the median call's rate, unless it has no interval
        value = found.value if found is not None else median_call_rate(_durations(ends), work)[0]
    verdict = Verdict().extend(minimum_reasons(len(ends), span_ns / 1e9, settings.min_queries, settings.min_duration_s))
    verdict.extend(precision_reasons(target, figures, drifts, span_ns / 1e9, stopped.reason))
    if reading is not None:
        verdict.add(contention_reason(reading.share, reading.cpus, settings.contention_limit))
        verdict.add(accelerator_reason(reading.gpu_other_processes))
    verdict.skip(drift_not_judged(drifts))
    interval = figures.throughput.get(RATE)
    block = precision_block(target, figures, settled, drifts, stopped.checks, stopped.reason)
    sustained = None
    if by_median:
        block["method"] = MEDIAN_METHOD
        around = mean_figures.throughput.get(RATE)
        sustained = {"value": mean, "ci95": around.around(mean) if around is not None else None}
    return KernelRate(
        value=value,
        ci95=interval.around(value) if interval is not None else None,
        calls=len(ends),
        seconds=span_ns / 1e9,
        work_per_call=float(work),
        verdict=verdict,
        precision=block,
        contention=reading.to_dict() if reading is not None else None,
        sustained=sustained,
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
    monitor = _monitor(contention, clock, settings.device).start()
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
    return _rate(ends, work, settings, target, Settle(), _Stopped(checks, stop), monitor.stop())


def fits(needed_bytes: float, available_bytes: float | None, share: float = 0.8) -> bool:
    """Whether ``needed_bytes`` fits in ``share`` of ``available_bytes`` (unknown: assume it does)."""
    return available_bytes is None or needed_bytes <= share * available_bytes


def gib(value: float) -> str:
    return f"{value / 2**30:.3g} GiB"


def finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
