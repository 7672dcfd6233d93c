"""The base tier's kernels, the part of the base tier a vendor builds on: ``TorchKernels``, the
framework's default kernels in PyTorch, which a vendor's ``inference_engine/<vendor>/base/kernels.py``
subclasses as ``Kernels`` (docs/vendor_guide.md, base tier). The base-tier cases that time them
are ``benchmarks/base_common.py``; the registry finds a vendor's kernels (``vendor_kernels``).
"""

from __future__ import annotations

from typing import Any, Callable

from common.errors import ConfigError

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
