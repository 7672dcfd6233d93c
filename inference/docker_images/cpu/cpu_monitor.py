"""The cpu vendor's device monitor: the CPU is the device, so memory is system memory.

Run from inference/:  python3 -m docker_images.cpu.cpu_monitor --output FILE --interval 1
"""
from __future__ import annotations

import os

from utils.sampler import monitor_args, run_sampler

_GIB = 1024**3


def cpu_description() -> dict:
    """What the analysis needs to estimate peak FLOPS, recorded on the measured host."""
    import psutil

    flags: set[str] = set()
    mhz = None
    model = "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "flags" and not flags:
                    flags = set(value.split())
                elif key == "cpu MHz" and mhz is None:
                    mhz = float(value)
                elif key == "model name" and model == "unknown":
                    model = value.strip()
    except OSError:
        pass
    frequency = psutil.cpu_freq()
    if frequency is not None and frequency.max:
        mhz = frequency.max
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    physical = psutil.cpu_count(logical=False) or usable
    return {
        "device": model,
        "mhz": mhz,
        "cores": min(usable, physical),
        "simd": "avx512f" if "avx512f" in flags else "avx2_fma" if {"avx2", "fma"} <= flags else "avx" if "avx" in flags else "sse",
    }


def make_sampler():
    import psutil

    psutil.cpu_percent(interval=None)
    description = cpu_description()

    def sample() -> dict:
        memory = psutil.virtual_memory()
        return {
            **description,
            "utilization": psutil.cpu_percent(interval=None),
            "mem_used_gib": (memory.total - memory.available) / _GIB,
            "mem_total_gib": memory.total / _GIB,
        }

    return sample


def main(argv: list[str] | None = None) -> int:
    args = monitor_args(__doc__.splitlines()[0], argv)
    return run_sampler(make_sampler(), args.output, args.interval)


if __name__ == "__main__":
    raise SystemExit(main())
