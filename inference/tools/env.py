"""An environment fingerprint for every result: what produced these numbers."""

from __future__ import annotations

import os
import platform
import socket
import sys
from importlib import metadata
from pathlib import Path

_PACKAGES = ("torch", "onnx", "onnxruntime", "numpy", "tensorrt", "nvidia-ml-py")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def package_versions() -> dict[str, str]:
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def accelerator() -> dict | None:
    """The GPU this process runs on (model, memory, driver, max SM clock): part of the host
    fingerprint that measured peaks are cached under (utils/results/baselines.py). Only when
    torch is already loaded and sees a GPU; None otherwise."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    info = {"name": props.name, "memory_gib": round(props.total_memory / 2**30, 1), "cuda": torch.version.cuda}
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        info["driver"] = pynvml.nvmlSystemGetDriverVersion()
        info["max_sm_clock_mhz"] = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)
        info["power_limit_w"] = pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000
    except Exception:  # noqa: BLE001 - NVML is optional: the fingerprint keeps what torch knows
        pass
    return info


def environment(threads: dict | None = None, oversubscribed: list[dict] | None = None) -> dict:
    """``threads``: the thread settings run with; ``oversubscribed``: the config's thread and worker
    counts above ``cpus_usable`` ({key, value, cpus, run_with}: contract.config.values.oversubscribed)."""
    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    return {
        "hostname": socket.gethostname(),
        "in_container": Path("/.dockerenv").exists(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(affinity) if affinity is not None else os.cpu_count(),
        "accelerator": accelerator(),
        "packages": package_versions(),
        "threads": threads or {},
        "oversubscribed": oversubscribed or [],
    }
