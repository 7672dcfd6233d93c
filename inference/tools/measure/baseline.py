"""The base tier's measurement: a kernel's rate (FLOP/s, bytes/s) measured until precise.

A base case (``benchmarks/base_*``) measures the chip, not a model. Its kernels (a GEMM, a
STREAM copy or triad, a host<->device copy, an all-reduce) are timed here with the same
machinery as the model cases (``tools/measure/precision.py``): warm-up and settle, then calls
until the minimums are met and the rate's 95 % interval is within ``precision``, or
``max_duration_s`` passes; then the verdict (minimums, precision, drift, contention).

Terms (defined here once):
  work      what one call does, in the figure's unit: FLOP for a GEMM, bytes moved for a
            memory or transfer kernel;
  rate      work x calls / measured time (FLOP/s, bytes/s): the timeline's throughput with
            every call carrying ``work``;
  GEMM      C[m,n] = A[m,k] @ B[k,n] costs 2 x m x n x k FLOP (a multiply and an add per
            term), as FlagPerf's ``computation-*`` cases count it;
  STREAM    bytes moved as STREAM counts them (McCalpin): every array read or written once
            per element, no write-allocate traffic: copy ``c = a`` moves 2 arrays, scale 2,
            add ``c = a + b`` 3, triad ``a = b + s * c`` 3;
  all-reduce  nccl-tests' figures: algbw = bytes / time; busbw = algbw x 2 (n - 1) / n over
            n ranks (the bytes each rank's link carries in a ring, so busbw compares with a
            link's bandwidth whatever n is).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Final

from common.record import as_json
from contract.config import CaseView, setting
from contract.settings import MAX_DURATION_REACHED, MEASUREMENT_DEFAULTS, MINIMUMS_MET, PRECISION_REACHED
from tools.measure.contention import CpuContention
from tools.measure.precision import (
    Settle,
    StopRule,
    Target,
    Timeline,
    drift,
    imprecise,
    measure_figures,
    precision_block,
    precision_reasons,
    settle,
)
from tools.measure.verdict import Verdict, accelerator_reason, contention_reason, minimum_reasons, minimums_met

STREAM_ARRAYS = {"copy": 2, "scale": 2, "add": 3, "triad": 3}
RATE = "rate"  # the one throughput figure a kernel measurement judges


def gemm_flop(m: int, n: int, k: int) -> int:
    """FLOP of one C[m,n] = A[m,k] @ B[k,n]."""
    return 2 * m * n * k


def stream_bytes(kernel: str, elements: int, itemsize: int) -> int:
    """Bytes one STREAM ``kernel`` call moves over arrays of ``elements`` items of ``itemsize`` bytes."""
    return STREAM_ARRAYS[kernel] * elements * itemsize


def allreduce_bandwidth(size_bytes: float, seconds: float, ranks: int) -> tuple[float, float]:
    """(algbw, busbw) in bytes/s of an all-reduce of ``size_bytes`` per rank taking ``seconds``
    over ``ranks`` ranks (nccl-tests, doc/PERFORMANCE.md)."""
    if ranks < 1 or not seconds > 0:
        raise ValueError(f"an all-reduce needs ranks >= 1 and a positive time, got {ranks} ranks and {seconds} s")
    algbw = size_bytes / seconds
    return algbw, algbw * 2 * (ranks - 1) / ranks


@dataclass(frozen=True)
class KernelSettings:
    """The measurement keys a base case reads (the framework defaults where its config lacks one)."""

    warmup: int = 2
    min_queries: int = 16
    min_duration_s: float = 1.0
    max_duration_s: float = 20.0
    precision: float | None = 0.02
    settle_max_s: float = 2.0
    contention_limit: float = MEASUREMENT_DEFAULTS["contention_limit"]
    device: str = "cpu"

    @classmethod
    def from_config(cls, config: CaseView) -> "KernelSettings":
        def value(key: str) -> Any:
            return setting(config, key)

        precision = value("precision")
        return cls(
            warmup=int(value("warmup")),
            min_queries=int(value("min_query_count")),
            min_duration_s=float(value("min_duration_s")),
            max_duration_s=float(value("max_duration_s")),
            precision=None if precision is None else float(precision),
            settle_max_s=float(value("settle_max_s")),
            contention_limit=float(value("contention_limit")),
            device=str(value("device")),
        )


@dataclass
class KernelRate:
    """One kernel's measured rate: the figure, its interval and verdict, and how it was measured."""

    value: float | None  # work units per second
    ci95: list[float] | None
    calls: int
    seconds: float
    work_per_call: float
    verdict: Verdict = field(default_factory=Verdict)
    precision: dict | None = None
    contention: dict | None = None

    @property
    def relative(self) -> float | None:
        if self.value is None or self.ci95 is None or not self.value > 0:
            return None
        return (self.ci95[1] - self.ci95[0]) / 2 / self.value

    def to_dict(self) -> dict:
        return {**as_json(self, _RATE_KEYS), "verdict": self.verdict.to_dict()}  # the verdict keeps its place


# KernelRate's keys in order (``as_json``: a pair is key, attribute).
_RATE_KEYS: Final = (
    "value",
    "ci95",
    ("relative_half_width", "relative"),
    "calls",
    "seconds",
    "work_per_call",
    "verdict",
    "precision",
    "contention",
)


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
    target = Target(throughput=(RATE,), precision=settings.precision)
    rule = StopRule(target, clock, settings.max_duration_s)
    monitor = (contention if contention is not None else CpuContention(settings.device)).start()
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
        if minimums_met(len(ends), elapsed / 1e9, settings.min_queries, settings.min_duration_s):
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


def group_decision(wants_more: list[bool], out_of_time: list[bool]) -> bool:
    """The ranks' common answer: go on while any rank wants more and none is out of time."""
    return any(wants_more) and not any(out_of_time)


def fits(needed_bytes: float, available_bytes: float | None, share: float = 0.8) -> bool:
    """Whether ``needed_bytes`` fits in ``share`` of ``available_bytes`` (unknown: assume it does)."""
    return available_bytes is None or needed_bytes <= share * available_bytes


def gib(value: float) -> str:
    return f"{value / 2**30:.3g} GiB"


def finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
