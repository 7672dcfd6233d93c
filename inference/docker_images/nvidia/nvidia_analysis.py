"""Reads nvidia_monitor.py's JSONL log (spec §4.1.1):

    analysis_log(path) -> (max_mem_used_GiB, total_mem_GiB, peak_flops)

max_mem_used is the largest memory use seen on any one monitored GPU and
total_mem that GPU's capacity. peak_flops is {precision: FLOP/s} for ONE GPU,
dense (no 2:4 sparsity), looked up by device name; None for a device not in
the table. FlagPerf hard-coded the A100's figure for every GPU; here an
unknown GPU gives no MFU rather than a wrong one.
"""

from __future__ import annotations

import re
from pathlib import Path

from loguru import logger

from common.sampler import read_samples

GIB = float(1 << 30)
T = 1e12


def _peaks(*, fp32: float, tf32: float, fp16: float, fp8: float) -> dict[str, float]:
    """An fp8-capable part's row (TFLOP/s in, FLOP/s out): bf16 runs at the fp16 rate, int8 at the fp8 rate."""
    return {"fp32": fp32 * T, "tf32": tf32 * T, "fp16": fp16 * T, "bf16": fp16 * T, "fp8": fp8 * T, "int8": fp8 * T}


# Dense peak throughput per GPU in FLOP/s (int8: OP/s), from NVIDIA's datasheets.
# Datasheets print tensor-core figures "with sparsity"; the dense figure is half
# of it (NVIDIA's footnote: "Specifications are one-half lower without
# sparsity"). fp32 is the non-tensor-core FP32 rate.
#   A100:  NVIDIA A100 Tensor Core GPU datasheet (SXM4 and PCIe, 40GB and 80GB
#          share the peak figures; the PCIe board's lower TDP limits sustained clocks)
#   H100:  NVIDIA H100 Tensor Core GPU datasheet (SXM, PCIe and NVL columns;
#          NVL per single GPU, as the current datasheet prints it, not per pair)
#   H200:  NVIDIA H200 Tensor Core GPU datasheet (SXM and NVL columns)
#   L40S:  NVIDIA L40S GPU datasheet
#   L4:    NVIDIA L4 Tensor Core GPU datasheet
#   A10:   NVIDIA A10 Tensor Core GPU datasheet
# Patterns are matched against NVML's device name with word boundaries (so
# "A10" never matches "A100" or "A10G", nor "H200" "GH200"), most specific first.
PEAK_FLOPS: list[tuple[str, str, dict[str, float]]] = [
    ("H100 NVL", r"\bH100\b.*\bNVL\b", _peaks(fp32=60, tf32=417.5, fp16=835.5, fp8=1670.5)),
    ("H100 PCIe", r"\bH100\b.*\bPCIe\b", _peaks(fp32=51, tf32=378, fp16=756.5, fp8=1513)),
    # NVML calls the SXM part "NVIDIA H100 80GB HBM3" (or "... SXM5 ..."): the remaining H100s.
    ("H100 SXM", r"\bH100\b", _peaks(fp32=67, tf32=494.5, fp16=989.5, fp8=1979)),
    ("H200 NVL", r"\bH200\b.*\bNVL\b", _peaks(fp32=60, tf32=417.5, fp16=835.5, fp8=1670.5)),
    ("H200 SXM", r"\bH200\b", _peaks(fp32=67, tf32=494.5, fp16=989.5, fp8=1979)),
    ("A100", r"\bA100\b", {"fp32": 19.5 * T, "tf32": 156 * T, "fp16": 312 * T, "bf16": 312 * T, "int8": 624 * T}),
    ("L40S", r"\bL40S\b", _peaks(fp32=91.6, tf32=183, fp16=362.05, fp8=733)),
    ("L4", r"\bL4\b", _peaks(fp32=30.3, tf32=60, fp16=121, fp8=242.5)),
    ("A10", r"\bA10\b", {"fp32": 31.2 * T, "tf32": 62.5 * T, "fp16": 125 * T, "bf16": 125 * T, "int8": 250 * T}),
]


def match_device(name: str) -> tuple[str, dict[str, float]] | None:
    """(table label, peak FLOP/s by precision) for an NVML device name, or None."""
    for label, pattern, peaks in PEAK_FLOPS:
        if re.search(pattern, name, flags=re.IGNORECASE):
            return label, dict(peaks)
    return None


def peak_flops(name: str) -> dict[str, float] | None:
    found = match_device(name)
    if found is None:
        logger.warning(
            f"nvidia_analysis: no peak-FLOPS entry for GPU '{name}'; MFU will not be computed (add it to PEAK_FLOPS)"
        )
        return None
    return found[1]


def analysis_log(path: str) -> tuple[float | None, float | None, dict[str, float] | None]:
    if not Path(path).is_file():
        logger.warning(f"nvidia_analysis: monitor log {path} does not exist")
        return None, None, None
    max_used = total = None
    names: set[str] = set()
    # read_samples skips a last line cut short by a kill and the monitor's error records.
    for record in read_samples(path):
        for device in record.get("devices") or []:
            if device.get("name"):
                names.add(str(device["name"]))
            used, capacity = device.get("memory_used_bytes"), device.get("memory_total_bytes")
            if used is not None and (max_used is None or used > max_used):
                max_used, total = used, capacity
            elif total is None and capacity is not None:
                total = capacity
    if not names:
        logger.warning(f"nvidia_analysis: {path} holds no device samples")
        return None, None, None
    if len(names) > 1:
        # Mixed GPUs in one run: the slowest one bounds the result, so use the smallest peak.
        logger.warning(f"nvidia_analysis: several GPU models in {path}: {sorted(names)}")
    peaks = [peak_flops(name) for name in sorted(names)]
    peak = None
    if all(p is not None for p in peaks):
        shared = set.intersection(*(set(p) for p in peaks))
        peak = {precision: min(p[precision] for p in peaks) for precision in sorted(shared)}
    return (
        max_used / GIB if max_used is not None else None,
        total / GIB if total is not None else None,
        peak,
    )
