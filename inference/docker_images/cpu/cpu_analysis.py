"""analysis_log for the cpu vendor: memory from the monitor, and an ESTIMATED peak FLOPS.

Peak fp32 FLOPS = cores x clock x FLOPs per cycle, with 2 FMA units per core:
AVX-512 64, AVX2+FMA 32, AVX 16, SSE 8 fp32 FLOPs/cycle. It is an upper bound
(turbo, FMA unit count and SMT vary), so CPU MFU is a lower bound.
"""
from __future__ import annotations

from loguru import logger

from utils.sampler import read_samples

FP32_FLOPS_PER_CYCLE = {"avx512f": 64, "avx2_fma": 32, "avx": 16, "sse": 8}


def analysis_log(path: str) -> tuple[float | None, float | None, dict | None]:
    samples = read_samples(path)
    if not samples:
        logger.warning(f"{path}: no monitor samples; memory and MFU unknown")
        return None, None, None
    max_used = max(s["mem_used_gib"] for s in samples)
    total = samples[-1]["mem_total_gib"]
    last = samples[-1]
    per_cycle = FP32_FLOPS_PER_CYCLE.get(last.get("simd"))
    if not last.get("mhz") or not last.get("cores") or per_cycle is None:
        logger.warning(f"{path}: CPU clock or core count unknown; peak FLOPS and MFU unknown")
        return max_used, total, None
    fp32 = last["cores"] * last["mhz"] * 1e6 * per_cycle
    # No fp16 math units are assumed on x86: fp16 work runs at fp32 rate at best.
    return max_used, total, {"fp32": fp32, "fp16": fp32}
