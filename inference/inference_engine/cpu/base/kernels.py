"""The cpu vendor's base-tier kernels (benchmarks/base_common.py, docs/vendor_guide.md).

PyTorch's CPU kernels (oneDNN/MKL GEMMs, vectorised copies) as they are; what this vendor
states is which GEMM dtypes it runs and that it has no device memory apart from host RAM.
"""

from benchmarks.base_common import TorchKernels


class Kernels(TorchKernels):
    name = "torch (cpu)"
    gemm_dtypes = ("fp32", "bf16", "fp16")  # no int8 torch.mm on CPU
    transfer_not_applicable = "the cpu vendor has no device memory apart from host RAM: see base_stream for its bandwidth"
