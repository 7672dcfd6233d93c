"""docker_images/cpu/cpu_analysis.py: identification edges and the exact wording of the estimate
(mutation testing, docs/testing.md). The peak is cores x MHz x FLOP/cycle, written out here."""

from __future__ import annotations

import json

import pytest

from docker_images.cpu.cpu_analysis import analysis_log, identify, peak_flops

AVX512 = ["avx", "avx2", "fma", "avx512f"]


def cpu(vendor="GenuineIntel", family=6, model=0x55, flags=AVX512, **extra):
    return {"vendor_id": vendor, "cpu_family": family, "model": model, "cpu_flags": list(flags), **extra}


@pytest.mark.parametrize(
    "description, expected",
    [
        ({}, ("generic_sse", "generic: monitor log predates microarchitecture fields, simd sse")),
        ({"simd": "sve2"}, ("generic_sse", "generic: monitor log predates microarchitecture fields, simd sve2")),
        (
            {"simd": "avx2_fma"},
            ("generic_avx2_fma", "generic: monitor log predates microarchitecture fields, simd avx2_fma"),
        ),
        (
            cpu(family=None, model=5, simd="avx"),
            ("generic_avx", "generic: vendor GenuineIntel, no family/model, simd avx"),
        ),
        (cpu(family=6, model="5"), ("generic_sse", "generic: vendor GenuineIntel, no family/model, simd sse")),
        (cpu("AuthenticAMD", 0x17, 0x2F), ("zen", "AuthenticAMD family 0x17 model 0x2F")),
        (cpu("AuthenticAMD", 0x17, 0x30), ("zen2", "AuthenticAMD family 0x17 model 0x30")),
        (cpu("AuthenticAMD", 0x19, 0x21, ["avx2"]), ("zen3", "AuthenticAMD family 0x19 model 0x21 without avx512f")),
        (cpu("AuthenticAMD", 0x19, 0x61), ("zen4", "AuthenticAMD family 0x19 model 0x61 with avx512f")),
        (
            cpu("CentaurHauls", 6, 0x0F, ["avx"], simd="avx"),
            ("generic_avx", "generic: CentaurHauls family 0x6 model 0xF not in the table, simd avx"),
        ),
        (
            cpu(model=0x55),
            ("intel_avx512_2fma", "GenuineIntel family 0x6 model 0x55, two-FMA SKU by name '' (heuristic)"),
        ),
        (
            cpu(model=0x55, device="Intel(R) Xeon(R) Silver 4110 CPU @ 2.10GHz"),
            (
                "intel_avx512_1fma",
                "GenuineIntel family 0x6 model 0x55, one-FMA SKU by name 'Intel(R) Xeon(R) Silver 4110 CPU @ 2.10GHz' "
                "(heuristic)",
            ),
        ),
        (
            cpu(model=0x55, model_name="Intel(R) Xeon(R) Silver 4110", device="Intel(R) Xeon(R) Gold 6148"),
            (
                "intel_avx512_1fma",
                "GenuineIntel family 0x6 model 0x55, one-FMA SKU by name 'Intel(R) Xeon(R) Silver 4110' (heuristic)",
            ),
        ),
        (
            cpu(model=0x6A, model_name="Intel(R) Core(TM) i9-10940X"),
            ("intel_avx512_1fma", "GenuineIntel family 0x6 model 0x6A, client 'Core' name (heuristic)"),
        ),
        (
            cpu(model=0x6A, model_name="Intel(R) Xeon(R) 28-core 8380"),
            ("intel_avx512_2fma", "GenuineIntel family 0x6 model 0x6A with avx512f, server core"),
        ),
        (cpu(model=0x9E, flags=["avx2", "fma"]), ("intel_avx2", "GenuineIntel family 0x6 model 0x9E with avx2+fma")),
        (
            cpu(model=0xBE, flags=["avx2", "fma"]),
            ("intel_ecore", "GenuineIntel family 0x6 model 0xBE: E-core-only part"),
        ),
    ],
)
def test_identify(description, expected):
    assert identify(description) == expected


def test_peak_source_wording_and_cgroup_bounds():
    base = cpu("AuthenticAMD", 0x19, 0x61, mhz=2000.0, cores=4)
    peak = peak_flops({**base, "mhz_source": "cpuinfo", "cgroup_cpus": 4})
    assert peak["fp32"] == 4 * 2000e6 * 32
    assert peak["source"] == (
        "zen4 (AMD Zen 4; AuthenticAMD family 0x19 model 0x61 with avx512f): 4 cores x 2000 MHz "
        "(cpuinfo clock, turbo may exceed it) x 32 fp32 FLOP/cycle (2 x 256-bit FMA, 512-bit ops double-pumped; "
        "AMD Software Optimization Guide for the AMD Zen4 Microarchitecture; "
        "Agner Fog, The microarchitecture of Intel, AMD and VIA CPUs)"
    )
    half = peak_flops({**base, "cgroup_cpus": 0.5})
    assert half["fp32"] == 0.5 * 2000e6 * 32
    assert half["source"].startswith(
        "zen4 (AMD Zen 4; AuthenticAMD family 0x19 model 0x61 with avx512f): 0.5 cores (cgroup quota; 4 physical) x "
        "2000 MHz (clock source unrecorded) x 32"
    )
    assert peak_flops({**base, "cgroup_cpus": 0})["fp32"] == 4 * 2000e6 * 32


def test_analysis_log_messages(tmp_path, caplog_loguru):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert analysis_log(str(empty)) == (None, None, None)
    sample = {
        "timestamp": 1.0,
        "mem_used_gib": 2.0,
        "mem_total_gib": 8.0,
        **cpu("AuthenticAMD", 0x19, 0x61, mhz=1000.0, cores=2, mhz_source="cpufreq_max"),
    }
    log = tmp_path / "cpu.jsonl"
    log.write_text(json.dumps(sample) + "\n")
    used, total, peak = analysis_log(str(log))
    assert (used, total, peak["fp32"]) == (2.0, 8.0, 6.4e10)
    messages = [(r["level"], r["message"]) for r in caplog_loguru]
    assert ("WARNING", f"{empty}: no monitor samples; memory and MFU unknown") in messages
    assert ("DEBUG", f"cpu peak FLOPS estimate: 6.4e+10 fp32 FLOP/s from {peak['source']}") in messages
