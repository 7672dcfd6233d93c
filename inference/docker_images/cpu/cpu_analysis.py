"""analysis_log for the cpu vendor: memory from the monitor, and an ESTIMATED peak FLOPS.

    analysis_log(path) -> (max_mem_used_GiB, total_mem_GiB, peak)

peak is {"fp32": FLOP/s, "fp16": FLOP/s, "estimate": True, "source": one line,
"microarchitecture": "zen4"}, or None when the clock or core count is unknown.

    peak fp32 FLOP/s = cores x clock x fp32 FLOP per cycle per core
    FLOP per cycle   = FMA units x fp32 lanes per unit x 2 (an FMA is a multiply and an add)

**cores** are physical cores this process may run on (SMT siblings count once),
capped by the cgroup CPU quota; **clock** is the monitor's ``mhz``: the
maximum (turbo) frequency when psutil knows it, else the highest cpuinfo
"cpu MHz" (in a VM, the nominal clock); **FLOP per cycle** comes from
MICROARCHITECTURES, identified from cpuinfo's vendor, family, model, model name
and flags by ``identify``. With the maximum clock the figure is an upper bound
(all-core turbo and AVX-512 frequency offsets are lower), so CPU MFU is a
lower bound; with a nominal clock turbo may exceed it. Hence ``estimate`` is
always True. docs/cpu_peak_flops.md has the table, its sources and caveats.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from loguru import logger

from common.sampler import read_samples


@dataclass(frozen=True)
class Microarchitecture:
    """One row of the table: fp32 FLOP per cycle per core, how it is made up, and where it is from."""

    label: str
    fp32_flop_per_cycle: int
    datapath: str
    source: str


_AMD_17H = "AMD Software Optimization Guide for AMD Family 17h Processors"
_INTEL_ORM = "Intel 64 and IA-32 Architectures Optimization Reference Manual"
_AGNER = "Agner Fog, The microarchitecture of Intel, AMD and VIA CPUs"
_GENERIC = (
    "generic: unknown microarchitecture, figure from the widest SIMD extension assuming two full-width FMA (or add + "
    "multiply) pipes"
)

# fp32 FLOP per cycle per core = FMA units x (vector bits / 32) x 2.
MICROARCHITECTURES: dict[str, Microarchitecture] = {
    # AMD family 17h models < 30h (Zen, Zen+): four 128-bit FP pipes, two of them FMA.
    "zen": Microarchitecture("AMD Zen/Zen+", 16, "2 x 128-bit FMA", f"{_AMD_17H}; {_AGNER}"),
    # AMD family 17h models >= 30h (Zen 2): the FP pipes widened to 256 bits.
    "zen2": Microarchitecture(
        "AMD Zen 2",
        32,
        "2 x 256-bit FMA",
        "AMD Software Optimization Guide for AMD Family 17h Models 30h and Greater Processors",
    ),
    # AMD family 19h without AVX-512 (Zen 3, Zen 3+).
    "zen3": Microarchitecture(
        "AMD Zen 3", 32, "2 x 256-bit FMA", "AMD Software Optimization Guide for AMD Family 19h Processors"
    ),
    # AMD family 19h with AVX-512 (Zen 4): 512-bit instructions execute as two
    # 256-bit halves on the same two FMA pipes, so AVX-512 does not double the rate.
    "zen4": Microarchitecture(
        "AMD Zen 4",
        32,
        "2 x 256-bit FMA, 512-bit ops double-pumped",
        f"AMD Software Optimization Guide for the AMD Zen4 Microarchitecture; {_AGNER}",
    ),
    # AMD family 1Ah (Zen 5) desktop and server (Granite Ridge, Fire Range, Turin, Strix Halo): full 512-bit FP
    # datapath.
    "zen5": Microarchitecture(
        "AMD Zen 5", 64, "2 x 512-bit FMA", "AMD Software Optimization Guide for the AMD Zen5 Microarchitecture"
    ),
    # Zen 5 in the mobile APUs (Strix Point, Krackan Point) keeps the 256-bit datapath of Zen 4.
    "zen5_256": Microarchitecture(
        "AMD Zen 5, 256-bit datapath (mobile)",
        32,
        "2 x 256-bit FMA, 512-bit ops double-pumped",
        "AMD Software Optimization Guide for the AMD Zen5 Microarchitecture; Chips and Cheese, AMD's Strix Point: Zen "
        "5 Hits Mobile",
    ),
    # Intel AVX-512 server cores with two 512-bit FMA units (ports 0+1 fused, and port 5):
    # Skylake-SP/Cascade Lake Gold 6xxx/Platinum, Ice Lake-SP, Sapphire/Emerald/Granite Rapids, Xeon Phi.
    "intel_avx512_2fma": Microarchitecture(
        "Intel AVX-512, two FMA units",
        64,
        "2 x 512-bit FMA",
        f"{_INTEL_ORM} (Skylake Server microarchitecture); Intel ARK '# of AVX-512 FMA Units'",
    ),
    # Intel AVX-512 cores with one 512-bit FMA unit (ports 0+1 fused; port 5 has none):
    # Skylake-SP/Cascade Lake Bronze, Silver, most Gold 5xxx; client Cannon/Ice/Tiger/Rocket Lake.
    # Their 256-bit rate is the same (2 x 256-bit FMA on ports 0 and 1).
    "intel_avx512_1fma": Microarchitecture(
        "Intel AVX-512, one FMA unit",
        32,
        "1 x 512-bit FMA (or 2 x 256-bit)",
        f"{_INTEL_ORM} (Skylake Server microarchitecture); Intel ARK '# of AVX-512 FMA Units'",
    ),
    # Intel Haswell and later big cores without AVX-512 (Broadwell, Skylake client ... Raptor/Meteor/Arrow Lake
    # P-cores).
    "intel_avx2": Microarchitecture(
        "Intel AVX2+FMA (Haswell and later)",
        32,
        "2 x 256-bit FMA",
        f"{_INTEL_ORM} (Haswell microarchitecture); {_AGNER}",
    ),
    # Intel E-core-only parts (Gracemont, Crestmont: Alder Lake-N, Sierra Forest, Grand Ridge).
    "intel_ecore": Microarchitecture(
        "Intel E-core (Gracemont/Crestmont)",
        16,
        "2 x 128-bit FMA",
        f"{_INTEL_ORM} (Gracemont microarchitecture); Chips and Cheese, Gracemont: Revenge of the Atom Cores",
    ),
    # Intel Sandy Bridge, Ivy Bridge: AVX without FMA, one 256-bit add and one 256-bit multiply.
    "intel_sandybridge": Microarchitecture(
        "Intel Sandy/Ivy Bridge (AVX)",
        16,
        "1 x 256-bit add + 1 x 256-bit mul",
        f"{_INTEL_ORM} (Sandy Bridge microarchitecture); {_AGNER}",
    ),
    # Intel before AVX (Core 2, Nehalem, Westmere): one 128-bit add and one 128-bit multiply.
    "intel_sse": Microarchitecture(
        "Intel SSE only (Nehalem and earlier)", 8, "1 x 128-bit add + 1 x 128-bit mul", _AGNER
    ),
    # Anything not identified above: by the widest SIMD extension present.
    "generic_avx512f": Microarchitecture("generic AVX-512", 64, "2 x 512-bit FMA assumed", _GENERIC),
    "generic_avx2_fma": Microarchitecture("generic AVX2+FMA", 32, "2 x 256-bit FMA assumed", _GENERIC),
    "generic_avx": Microarchitecture("generic AVX", 16, "256-bit add + 256-bit mul assumed", _GENERIC),
    "generic_asimd": Microarchitecture(
        "generic Arm NEON", 32, "4 x 128-bit FMA assumed (Neoverse V1/V2; N1/N2 have 2)", _GENERIC
    ),
    "generic_sse": Microarchitecture("generic SSE", 8, "128-bit add + 128-bit mul assumed", _GENERIC),
}

# Intel family 6 client models whose AVX-512 has one FMA unit: Cannon Lake (0x66),
# Ice Lake client (0x7D, 0x7E), Tiger Lake (0x8C, 0x8D), Rocket Lake (0xA7),
# Alder Lake P-cores where early firmware left AVX-512 on (0x97, 0x9A).
INTEL_CLIENT_AVX512_MODELS = {0x66, 0x7D, 0x7E, 0x8C, 0x8D, 0xA7, 0x97, 0x9A}
# Intel family 6 models made only of E-cores with AVX2: Alder Lake-N (0xBE),
# Sierra Forest (0xAF), Grand Ridge (0xB6).
INTEL_ECORE_MODELS = {0xBE, 0xAF, 0xB6}
# Skylake-SP, Cascade Lake, Cooper Lake, Skylake-X/Cascade Lake-X HEDT: FMA unit count varies by SKU.
INTEL_SKYLAKE_SP_MODEL = 0x55
# On model 0x55, SKUs with ONE AVX-512 FMA unit (Intel ARK): Bronze 31xx/32xx, Silver 41xx/42xx,
# Gold 51xx/52xx except 5122 and 5222, Core i7-7800X/7820X. Everything else there has two.
_SKYLAKE_SP_ONE_FMA = re.compile(r"\b(Bronze|Silver)\b|\bGold\s+5[12](?!22\b)\d\d|\bi7-78[02]0X\b", re.IGNORECASE)
# AMD family 1Ah models that are Zen 5 (Linux arch/x86/kernel/cpu/amd.c); other 1Ah models are generic.
AMD_ZEN5_MODELS = set(range(0x00, 0x30)) | set(range(0x40, 0x50)) | set(range(0x60, 0x80))
# Zen 5 with the 256-bit datapath, by marketing name: Strix Point and Krackan Point are
# "Ryzen AI 5/7/9 ..." and "Ryzen Z2 Extreme"; Strix Halo ("Ryzen AI Max") has the full 512-bit datapath.
_ZEN5_256_NAME = re.compile(r"\bRyzen AI\b(?!\s+Max)|\bRyzen Z2\b", re.IGNORECASE)


def identify(description: dict) -> tuple[str, str]:
    """(MICROARCHITECTURES key, how it was detected) for a monitor sample's CPU description.

    Samples from monitors that predate the identity keys (no ``vendor_id``)
    get the generic figure for their ``simd`` summary.
    """
    simd = description.get("simd") or "sse"
    generic = f"generic_{simd}" if f"generic_{simd}" in MICROARCHITECTURES else "generic_sse"
    if "vendor_id" not in description:
        return generic, f"generic: monitor log predates microarchitecture fields, simd {simd}"
    vendor = description.get("vendor_id")
    family = description.get("cpu_family")
    model = description.get("model")
    name = description.get("model_name") or description.get("device") or ""
    flags = set(description.get("cpu_flags") or ())
    if not isinstance(family, int) or not isinstance(model, int):
        return generic, f"generic: vendor {vendor}, no family/model, simd {simd}"
    where = f"{vendor} family 0x{family:X} model 0x{model:X}"
    if vendor == "AuthenticAMD":
        if family == 0x17:
            return ("zen" if model < 0x30 else "zen2"), where
        if family == 0x19:
            return ("zen4", f"{where} with avx512f") if "avx512f" in flags else ("zen3", f"{where} without avx512f")
        if family == 0x1A and model in AMD_ZEN5_MODELS:
            if _ZEN5_256_NAME.search(name):
                return "zen5_256", f"{where}, mobile name '{name}' (heuristic)"
            return "zen5", f"{where}, not a Ryzen AI 300/Z2 mobile name (heuristic)"
    elif vendor == "GenuineIntel" and family == 6:
        if "avx512f" in flags:
            if "amx_tile" in flags:  # AMX is only on Xeon server cores (Sapphire Rapids on), two FMA units each;
                # a hypervisor may mask the model number (0xA7 on a VM) but passes the flags through
                return "intel_avx512_2fma", f"{where} with amx_tile: server core"
            if model in INTEL_CLIENT_AVX512_MODELS:
                return "intel_avx512_1fma", f"{where}: client AVX-512 core"
            if model == INTEL_SKYLAKE_SP_MODEL:
                if _SKYLAKE_SP_ONE_FMA.search(name):
                    return "intel_avx512_1fma", f"{where}, one-FMA SKU by name '{name}' (heuristic)"
                return "intel_avx512_2fma", f"{where}, two-FMA SKU by name '{name}' (heuristic)"
            if re.search(r"\bCore\b", name):
                return "intel_avx512_1fma", f"{where}, client 'Core' name (heuristic)"
            return "intel_avx512_2fma", f"{where} with avx512f, server core"
        if {"avx2", "fma"} <= flags:
            if model in INTEL_ECORE_MODELS:
                return "intel_ecore", f"{where}: E-core-only part"
            return "intel_avx2", f"{where} with avx2+fma"
        if "avx" in flags:
            return "intel_sandybridge", f"{where} with avx, no avx2"
        return "intel_sse", f"{where}, no avx"
    return generic, f"generic: {where} not in the table, simd {simd}"


def peak_flops(description: dict) -> dict | None:
    """The estimated peak for one monitor sample's CPU description, or None if clock or cores are unknown."""
    mhz, cores = description.get("mhz"), description.get("cores")
    if not mhz or not cores:
        return None
    key, detection = identify(description)
    arch = MICROARCHITECTURES[key]
    cgroup_cpus = description.get("cgroup_cpus")
    core_note = f"{cores} cores"
    if isinstance(cgroup_cpus, (int, float)) and 0 < cgroup_cpus < cores:
        cores, core_note = cgroup_cpus, f"{cgroup_cpus:g} cores (cgroup quota; {cores} physical)"
    clock_note = {
        "cpufreq_max": "max clock",
        "cpuinfo": "cpuinfo clock, turbo may exceed it",
    }.get(description.get("mhz_source"), "clock source unrecorded")
    fp32 = cores * mhz * 1e6 * arch.fp32_flop_per_cycle
    flags = set(description.get("cpu_flags") or ())
    # fp16 vector arithmetic at twice the fp32 lane count where the ISA has it
    # (AVX512-FP16, Arm FP16); otherwise fp16 runs at the fp32 rate at best. AMX is not counted.
    fp16 = fp32 * 2 if flags & {"avx512_fp16", "asimdhp"} else fp32
    source = (
        f"{key} ({arch.label}; {detection}): {core_note} x {mhz:g} MHz ({clock_note}) x "
        f"{arch.fp32_flop_per_cycle} fp32 FLOP/cycle ({arch.datapath}; {arch.source})"
    )
    return {"fp32": fp32, "fp16": fp16, "estimate": True, "source": source, "microarchitecture": key}


# What the memory figures measure, for the summary table's header.
MEMORY_KIND = "host RAM (whole machine)"


def analysis_log(path: str) -> tuple[float | None, float | None, dict | None]:
    samples = read_samples(path)
    if not samples:
        logger.warning(f"{path}: no monitor samples; memory and MFU unknown")
        return None, None, None
    max_used = max(s["mem_used_gib"] for s in samples)
    total = samples[-1]["mem_total_gib"]
    peak = peak_flops(samples[-1])
    if peak is None:
        logger.warning(f"{path}: CPU clock or core count unknown; peak FLOPS and MFU unknown")
        return max_used, total, None
    logger.debug(f"cpu peak FLOPS estimate: {peak['fp32']:.4g} fp32 FLOP/s from {peak['source']}")
    return max_used, total, peak
