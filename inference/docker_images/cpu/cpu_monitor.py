"""The cpu vendor's device monitor: the CPU is the device, so memory is system memory.

Run from inference/:  python3 -m docker_images.cpu.cpu_monitor --output FILE --interval 1

Every sample repeats ``cpu_description()``: what ``cpu_analysis`` needs to name
the microarchitecture and estimate peak FLOPS (docs/cpu_peak_flops.md).
"""

from __future__ import annotations

import os
from pathlib import Path

from common.sampler import memory_gib, monitor_args, run_sampler

MONITOR_PROTOCOL = "sampler"  # how run.py drives it (common/monitor_protocol.py)


# The /proc/cpuinfo flags that matter to peak FLOPS, recorded as ``cpu_flags``.
# x86: vector width and FMA; fp16/bf16 arithmetic; AMX tiles (not counted in the
# peak, recorded so a reader can see they exist); ``hypervisor`` (a VM: "cpu MHz"
# is then the nominal clock). aarch64 ("Features"): asimd (NEON), its fp16
# arithmetic, SVE.
RELEVANT_FLAGS = (
    "sse",
    "sse2",
    "avx",
    "avx2",
    "fma",
    "avx512f",
    "avx512_fp16",
    "avx512_bf16",
    "amx_tile",
    "amx_bf16",
    "amx_fp16",
    "hypervisor",
    "asimd",
    "asimdhp",
    "sve",
    "sve2",
)


def simd_summary(flags: set[str]) -> str:
    """The widest vector extension present: avx512f, avx2_fma, avx, asimd or sse."""
    if "avx512f" in flags:
        return "avx512f"
    if {"avx2", "fma"} <= flags:
        return "avx2_fma"
    if "avx" in flags:
        return "avx"
    if "asimd" in flags:
        return "asimd"
    return "sse"


def parse_cpuinfo(text: str) -> dict:
    """Identity of the first processor in /proc/cpuinfo, and the highest "cpu MHz" of any.

    ``cpu_family`` and ``model`` are the decimal numbers cpuinfo prints (AMD
    Zen 4 Genoa: family 25 = 0x19, model 17 = 0x11); None when absent (aarch64).
    """
    info: dict = {"vendor_id": None, "cpu_family": None, "model": None, "model_name": None, "flags": set(), "mhz": None}
    seen_flags = False
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key in ("flags", "Features") and not seen_flags:
            info["flags"] = set(value.split())
            seen_flags = True
        elif key == "cpu MHz":
            try:
                mhz = float(value)
            except ValueError:
                continue
            if info["mhz"] is None or mhz > info["mhz"]:
                info["mhz"] = mhz
        elif key == "vendor_id" and info["vendor_id"] is None:
            info["vendor_id"] = value
        elif key == "model name" and info["model_name"] is None:
            info["model_name"] = value
        elif key in ("cpu family", "model") and info[key.replace(" ", "_")] is None:
            try:
                info[key.replace(" ", "_")] = int(value)
            except ValueError:
                pass
    return info


def physical_cores(cpus: set[int], sysfs_cpu: Path = Path("/sys/devices/system/cpu")) -> int | None:
    """Physical cores among the logical CPUs ``cpus``: distinct SMT sibling sets.

    Each CPU's topology/core_cpus_list (thread_siblings_list before Linux 5.7)
    names the logical CPUs sharing its core, so two hyperthreads of one core
    count once. None when the topology cannot be read for every CPU.
    """
    cores = set()
    for cpu in cpus:
        topology = sysfs_cpu / f"cpu{cpu}" / "topology"
        for name in ("core_cpus_list", "thread_siblings_list"):
            try:
                cores.add((topology / name).read_text(encoding="utf-8").strip())
                break
            except OSError:
                continue
        else:
            return None
    return len(cores) or None


def cgroup_cpu_limit(
    proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")
) -> float | None:
    """CPUs' worth of time this process's cgroup may use (docker --cpus), or None if unlimited.

    cgroup v2 ``cpu.max`` ("quota period" or "max period") and v1
    ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (quota -1 = unlimited), read in
    the process's own cgroup and every ancestor (the tightest wins). In a
    container with its own cgroup namespace the path is "/", i.e. ``root``.
    """
    try:
        lines = proc_cgroup.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    limits: list[float] = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":
            mounts = [(root, "v2")]
        elif "cpu" in controllers.split(","):
            mounts = [(root / controllers, "v1"), (root / "cpu", "v1"), (root / "cpu,cpuacct", "v1")]
        else:
            continue
        parts = [part for part in path.strip().split("/") if part]
        for mount, version in mounts:
            if not mount.is_dir():
                continue
            for depth in range(len(parts), -1, -1):
                limit = _cgroup_dir_limit(mount.joinpath(*parts[:depth]), version)
                if limit is not None:
                    limits.append(limit)
            break
    return min(limits) if limits else None


def _cgroup_dir_limit(directory: Path, version: str) -> float | None:
    try:
        if version == "v2":
            quota, period = (directory / "cpu.max").read_text(encoding="utf-8").split()[:2]
            return None if quota == "max" else int(quota) / int(period)
        quota = int((directory / "cpu.cfs_quota_us").read_text(encoding="utf-8"))
        period = int((directory / "cpu.cfs_period_us").read_text(encoding="utf-8"))
        return None if quota < 0 or period <= 0 else quota / period
    except (OSError, ValueError):
        return None


def cpu_description() -> dict:
    """What the analysis needs to estimate peak FLOPS, recorded on the measured host.

    Keys: ``device`` and ``model_name`` (cpuinfo "model name"); ``vendor_id``,
    ``cpu_family``, ``model`` (ints) and ``cpu_flags`` (the RELEVANT_FLAGS
    present), which identify the microarchitecture; ``simd`` (simd_summary);
    ``mhz`` and ``mhz_source``: psutil's maximum frequency ("cpufreq_max",
    scaling_max_freq) when known, else the highest cpuinfo "cpu MHz"
    ("cpuinfo", in a VM the nominal clock); ``logical_cpus`` usable by this
    process; ``cores``, the physical cores among them; ``cgroup_cpus``, the
    cgroup CPU quota in CPUs (None: unlimited). /proc/cpuinfo is read once.
    """
    import psutil

    try:
        info = parse_cpuinfo(Path("/proc/cpuinfo").read_text(encoding="utf-8"))
    except OSError:
        info = parse_cpuinfo("")
    mhz, mhz_source = info["mhz"], "cpuinfo" if info["mhz"] else None
    frequency = psutil.cpu_freq()
    if frequency is not None and frequency.max:
        mhz, mhz_source = frequency.max, "cpufreq_max"
    if hasattr(os, "sched_getaffinity"):
        usable = os.sched_getaffinity(0)
    else:
        usable = set(range(os.cpu_count() or 1))
    cores = physical_cores(usable)
    if cores is None:
        cores = min(len(usable), psutil.cpu_count(logical=False) or len(usable))
    model_name = info["model_name"] or "unknown"
    return {
        "device": model_name,
        "model_name": model_name,
        "vendor_id": info["vendor_id"],
        "cpu_family": info["cpu_family"],
        "model": info["model"],
        "cpu_flags": [flag for flag in RELEVANT_FLAGS if flag in info["flags"]],
        "simd": simd_summary(info["flags"]),
        "mhz": mhz,
        "mhz_source": mhz_source,
        "logical_cpus": len(usable),
        "cores": cores,
        "cgroup_cpus": cgroup_cpu_limit(),
    }


def make_sampler():
    import psutil

    psutil.cpu_percent(interval=None)
    description = cpu_description()

    def sample() -> dict:
        memory = memory_gib(psutil.virtual_memory())
        return {
            **description,
            "utilization": psutil.cpu_percent(interval=None),
            **memory,
        }

    return sample


def main(argv: list[str] | None = None) -> int:
    args = monitor_args(__doc__.splitlines()[0], argv)
    return run_sampler(make_sampler(), args.output, args.interval)


if __name__ == "__main__":
    raise SystemExit(main())
