"""The nvidia vendor's base-tier kernels (contract/kernels.py::TorchKernels, docs/vendor_guide.md).

cuBLAS through PyTorch: fp32 with TF32 off, tf32 with it on, bf16 and fp16 on the tensor
cores, int8 with ``torch._int_mm`` (int8 x int8 -> int32, cuBLASLt). Host<->device copies
from pinned and pageable memory are the framework's (``TorchKernels.transfer``).
Unproven here: written for an H100, not yet run on one (docs/baselines.md).
"""

from contract.kernels import TorchKernels


class Kernels(TorchKernels):
    name = "torch (cuBLAS)"
    gemm_dtypes = ("fp32", "tf32", "bf16", "fp16", "int8")

    def gemm(self, dtype, m, n, k, device):
        if dtype != "int8":
            return super().gemm(dtype, m, n, k, device)
        import torch

        generator = torch.Generator().manual_seed(0)
        a = torch.randint(-64, 64, (m, k), generator=generator, dtype=torch.int8).to(device)
        b = torch.randint(-64, 64, (k, n), generator=generator, dtype=torch.int8).to(device)
        return lambda: torch._int_mm(a, b)
