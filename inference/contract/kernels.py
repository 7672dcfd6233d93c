"""The base tier's kernels, the part of the base tier a vendor builds on: ``TorchKernels``, the
framework's default kernels in PyTorch, which a vendor's ``inference_engine/<vendor>/base/kernels.py``
subclasses as ``Kernels`` (docs/vendor_guide.md, base tier). The base-tier cases that time them
are ``benchmarks/base_common.py``; the registry finds a vendor's kernels (``vendor_kernels``).

A call's work, defined here once (``tools/measure/baseline.py`` times the calls until the rate
is precise, with ``KernelSettings``):
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

from dataclasses import dataclass, field
from typing import Any, Callable, Final

from common.errors import ConfigError
from common.record import as_json
from contract.config import CaseView, setting
from contract.phase import Verdict
from contract.settings import MEASUREMENT_DEFAULTS

# dtype name -> (torch dtype name, bytes per element of A and B, bytes per element of C)
DTYPES: dict[str, tuple[str, int, int]] = {
    "fp64": ("float64", 8, 8),
    "fp32": ("float32", 4, 4),
    "tf32": ("float32", 4, 4),
    "bf16": ("bfloat16", 2, 2),
    "fp16": ("float16", 2, 2),
    "int8": ("int8", 1, 4),  # int8 x int8 accumulates into int32
}


class TorchKernels:
    """The framework's default kernels, in PyTorch (FlagPerf's ``torch.mm``). A vendor overrides
    any method in ``inference_engine/<vendor>/base/kernels.py``; each factory returns a
    no-argument callable that runs the kernel once (asynchronously is fine: ``sync`` waits)."""

    name = "torch"
    gemm_dtypes: tuple[str, ...] = ("fp32", "bf16", "fp16")
    # None: host<->device transfer applies; else the one line saying why it does not
    transfer_not_applicable: str | None = None

    def sync(self, device: str) -> None:
        if device.startswith("cuda"):
            import torch

            torch.cuda.synchronize(device)

    def free_memory(self, device: str) -> int | None:
        """Bytes free where the kernels allocate (None: unknown)."""
        if device.startswith("cuda"):
            import torch

            return int(torch.cuda.mem_get_info(device)[0])
        try:
            import psutil

            return int(psutil.virtual_memory().available)
        except ImportError:
            return None

    def gemm(self, dtype: str, m: int, n: int, k: int, device: str) -> Callable[[], Any]:
        import torch

        if device.startswith("cuda"):
            torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        generator = torch.Generator().manual_seed(0)
        a = torch.randn(m, k, generator=generator).to(getattr(torch, DTYPES[dtype][0])).to(device)
        b = torch.randn(k, n, generator=generator).to(getattr(torch, DTYPES[dtype][0])).to(device)
        out = torch.empty(m, n, dtype=a.dtype, device=device)
        return lambda: torch.mm(a, b, out=out)

    def stream(self, kernel: str, elements: int, device: str) -> Callable[[], Any]:
        """STREAM's ``copy`` (c = a) or ``triad`` (a = b + s * c) over float64 arrays, as STREAM."""
        import torch

        a = torch.full((elements,), 1.0, dtype=torch.float64, device=device)
        b = torch.full((elements,), 2.0, dtype=torch.float64, device=device)
        c = torch.zeros(elements, dtype=torch.float64, device=device)
        if kernel == "copy":
            return lambda: c.copy_(a)
        if kernel == "triad":
            return lambda: torch.add(b, c, alpha=3.0, out=a)
        raise ConfigError(f"unknown STREAM kernel {kernel!r} (copy, triad)")

    def transfer(self, direction: str, nbytes: int, pinned: bool, device: str) -> Callable[[], Any]:
        """One copy of ``nbytes`` host->device (``h2d``) or device->host (``d2h``), from or to
        pinned (page-locked) or pageable host memory."""
        import torch

        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
        dev = torch.empty(nbytes, dtype=torch.uint8, device=device)
        if direction == "h2d":
            return lambda: dev.copy_(host, non_blocking=pinned)
        return lambda: host.copy_(dev, non_blocking=pinned)


# ---- a call's work, and how a base case is measured (tools/measure/baseline.py times the calls) ----
STREAM_ARRAYS = {"copy": 2, "scale": 2, "add": 3, "triad": 3}


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


def group_decision(wants_more: list[bool], out_of_time: list[bool]) -> bool:
    """The ranks' common answer: go on while any rank wants more and none is out of time."""
    return any(wants_more) and not any(out_of_time)


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
    sustained: dict | None = None  # a call-by-call kernel's mean rate beside its median one: value, ci95

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
    "sustained",
)
