"""Whether vLLM's CPU build can run on this CPU, and when not, the one line that says what it lacks and
that llama.cpp's server (``compiler: llamacpp``) is the fallback. Not an engine (the leading ``_``).

What vLLM 0.32 needs, per its CPU installation guide (docs.vllm.ai, "CPU": Requirements) and its code:

  x86-64    AVX2 at least: the wheel's kernels are ``_C_AVX512`` or ``_C_AVX2``
            (``vllm/platforms/cpu.py::import_kernels``); the guide: "avx512f (Recommended), avx2
            (Limited features)". Read from /proc/cpuinfo's ``flags``.
  AArch64   NEON (``asimd`` in /proc/cpuinfo's ``Features``).
  s390x     VXE (IBM z15 and later; ``vxe`` in ``features``), and a build from source (no wheel).
  others    no CPU variant in the guide (ppc64le among them): vLLM's CPU build does not run.
"""

from __future__ import annotations

import platform
from pathlib import Path

FALLBACK = "use compiler: llamacpp (llama.cpp's server, inference/inference_engine/cpu/llamacpp.py)"
# machine names (platform.machine()) -> (the ISA's name, the feature vLLM needs, its /proc/cpuinfo word)
NEEDS = {
    "x86_64": ("x86-64", "AVX2", "avx2"),
    "amd64": ("x86-64", "AVX2", "avx2"),
    "aarch64": ("AArch64", "NEON", "asimd"),
    "arm64": ("AArch64", "NEON", "asimd"),
    "s390x": ("s390x", "VXE (z15 or later)", "vxe"),
}
FLAG_FIELDS = ("flags", "features")  # x86's line, and AArch64's / s390x's ("Features", "features")


def cpu_flags(cpuinfo: str) -> set[str]:
    """Every word of /proc/cpuinfo's flag lines (x86 ``flags``, AArch64 ``Features``, s390x ``features``)."""
    found: set[str] = set()
    for line in cpuinfo.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip().lower() in FLAG_FIELDS:
            found.update(value.split())
    return found


def vllm_cpu_blocker(machine: str, cpuinfo: str) -> str | None:
    """None when vLLM's CPU build can run on this CPU; else one line naming what it lacks."""
    need = NEEDS.get(machine.lower())
    if need is None:
        return (
            f"vLLM's CPU build has no variant for this CPU's architecture ({machine or 'unknown'}; vLLM documents "
            f"x86-64, AArch64 and s390x): {FALLBACK}"
        )
    isa, feature, word = need
    if word not in cpu_flags(cpuinfo):
        return (
            f"vLLM's CPU build needs {feature} ({isa}); this CPU lacks it ('{word}' not in /proc/cpuinfo): {FALLBACK}"
        )
    return None


def this_cpu_blocker(cpuinfo_path: Path = Path("/proc/cpuinfo")) -> str | None:
    """``vllm_cpu_blocker`` for the CPU this runs on (an unreadable /proc/cpuinfo is not judged: None)."""
    try:
        text = cpuinfo_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return vllm_cpu_blocker(platform.machine(), text)
