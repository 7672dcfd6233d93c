"""What the CPU monitor records (docker_images/cpu/cpu_monitor.py): a CPU's description and a monitor log."""

from __future__ import annotations

import json
from pathlib import Path

from docker_images.cpu.cpu_monitor import simd_summary


def cpu_record(vendor, family, model, name, flags, mhz, cores, **extra) -> dict:
    """A CPU description as cpu_monitor.cpu_description records it."""
    flag_set = set(flags)
    return {
        "device": name,
        "model_name": name,
        "vendor_id": vendor,
        "cpu_family": family,
        "model": model,
        "cpu_flags": list(flags),
        "simd": simd_summary(flag_set),
        "mhz": mhz,
        "mhz_source": "cpufreq_max",
        "logical_cpus": cores * 2,
        "cores": cores,
        "cgroup_cpus": None,
        **extra,
    }


def write_monitor_log(path: Path, description: dict, used=(1.5, 3.25, 2.0), total=16.0) -> str:
    """A monitor JSONL file of three samples, plus an error record and a line cut short."""
    lines = [
        json.dumps(
            {"timestamp": 1.0 + i, **description, "utilization": 50.0, "mem_used_gib": u, "mem_total_gib": total}
        )
        for i, u in enumerate(used)
    ]
    lines.insert(1, json.dumps({"timestamp": 1.5, "error": "OSError: boom"}))
    path.write_text("\n".join(lines) + '\n{"timestamp": 9, "mem_us', encoding="utf-8")
    return str(path)


AVX512 = ("sse", "sse2", "avx", "avx2", "fma", "avx512f")


AVX2 = ("sse", "sse2", "avx", "avx2", "fma")


ZEN4_EPYC = cpu_record(
    "AuthenticAMD", 25, 0x11, "AMD EPYC 9654 96-Core Processor", AVX512 + ("avx512_bf16",), 3000.0, 2
)
