"""The cpu vendor's peak-FLOPS estimate: microarchitecture table, monitor description, analysis_log.

Every expected peak is written out as cores x MHz x FLOP/cycle with the
FLOP/cycle figure of docs/cpu_peak_flops.md, so a wrong table entry (Zen 4 at
64 instead of 32, the bug this replaced) fails the test.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from docker_images.cpu import cpu_analysis
from docker_images.cpu.cpu_analysis import analysis_log, identify, peak_flops
from docker_images.cpu.cpu_monitor import cgroup_cpu_limit, cpu_description, parse_cpuinfo, physical_cores, simd_summary
from tests.infra.cpu_monitor import AVX2, AVX512, ZEN4_EPYC, cpu_record, write_monitor_log

ZEN5_EPYC = cpu_record("AuthenticAMD", 26, 0x02, "AMD EPYC 9655 96-Core Processor", AVX512, 2500.0, 4)
SAPPHIRE_RAPIDS = cpu_record(
    "GenuineIntel",
    6,
    0x8F,
    "Intel(R) Xeon(R) Platinum 8480+",
    AVX512 + ("avx512_fp16", "amx_tile", "amx_bf16"),
    2000.0,
    8,
)
XEON_SILVER_CASCADE_LAKE = cpu_record(
    "GenuineIntel", 6, 0x55, "Intel(R) Xeon(R) Silver 4210R CPU @ 2.40GHz", AVX512, 2400.0, 10
)
HASWELL = cpu_record("GenuineIntel", 6, 0x3F, "Intel(R) Xeon(R) CPU E5-2680 v3 @ 2.50GHz", AVX2, 2500.0, 12)


def test_zen4_epyc_is_32_flop_per_cycle_not_64(tmp_path):
    used, total, peak = analysis_log(write_monitor_log(tmp_path / "cpu_monitor.jsonl", ZEN4_EPYC))
    assert (used, total) == (3.25, 16.0)
    assert peak["fp32"] == 2 * 3000e6 * 32 == 1.92e11
    assert peak["fp16"] == 1.92e11  # no AVX512-FP16 on Zen 4
    assert peak["estimate"] is True
    assert peak["microarchitecture"] == "zen4"
    assert "2 cores x 3000 MHz (max clock) x 32 fp32 FLOP/cycle" in peak["source"]
    assert "AMD Software Optimization Guide for the AMD Zen4 Microarchitecture" in peak["source"]
    assert "\n" not in peak["source"]


def test_zen5_server_has_the_full_512_bit_datapath(tmp_path):
    _, _, peak = analysis_log(write_monitor_log(tmp_path / "m.jsonl", ZEN5_EPYC))
    assert peak["fp32"] == 4 * 2500e6 * 64 == 6.4e11
    assert peak["microarchitecture"] == "zen5"
    assert peak["estimate"] is True


@pytest.mark.parametrize(
    ("name", "model", "expected_arch", "flop_per_cycle"),
    [
        ("AMD Ryzen AI 9 HX 370 w/ Radeon 890M", 0x24, "zen5_256", 32),  # Strix Point
        ("AMD Ryzen AI 7 350 w/ Radeon 860M", 0x60, "zen5_256", 32),  # Krackan Point
        ("AMD RYZEN AI MAX+ 395 w/ Radeon 8060S", 0x70, "zen5", 64),  # Strix Halo: desktop CCDs
        ("AMD Ryzen 9 9950X 16-Core Processor", 0x44, "zen5", 64),  # Granite Ridge
    ],
)
def test_zen5_mobile_apus_use_the_256_bit_datapath(name, model, expected_arch, flop_per_cycle):
    peak = peak_flops(cpu_record("AuthenticAMD", 26, model, name, AVX512, 4000.0, 8))
    assert peak["microarchitecture"] == expected_arch
    assert peak["fp32"] == 8 * 4000e6 * flop_per_cycle


def test_sapphire_rapids_platinum_two_fma_units_and_fp16_at_twice_the_rate(tmp_path):
    _, _, peak = analysis_log(write_monitor_log(tmp_path / "m.jsonl", SAPPHIRE_RAPIDS))
    assert peak["fp32"] == 8 * 2000e6 * 64 == 1.024e12
    assert peak["fp16"] == 8 * 2000e6 * 128 == 2.048e12
    assert peak["microarchitecture"] == "intel_avx512_2fma"
    assert peak["estimate"] is True


def test_cascade_lake_xeon_silver_has_one_avx512_fma_unit(tmp_path):
    _, _, peak = analysis_log(write_monitor_log(tmp_path / "m.jsonl", XEON_SILVER_CASCADE_LAKE))
    assert peak["fp32"] == 10 * 2400e6 * 32 == 7.68e11
    assert peak["microarchitecture"] == "intel_avx512_1fma"
    assert "heuristic" in peak["source"]


@pytest.mark.parametrize(
    ("name", "model", "flop_per_cycle"),
    [
        ("Intel(R) Xeon(R) Bronze 3106 CPU @ 1.70GHz", 0x55, 32),
        ("Intel(R) Xeon(R) Gold 5218 CPU @ 2.30GHz", 0x55, 32),
        ("Intel(R) Xeon(R) Gold 5122 CPU @ 3.60GHz", 0x55, 64),  # the Gold 5 exception
        ("Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz", 0x55, 64),
        ("Intel(R) Core(TM) i9-7980XE CPU @ 2.60GHz", 0x55, 64),  # Skylake-X HEDT
        ("Intel(R) Core(TM) i7-7800X CPU @ 3.50GHz", 0x55, 32),
        ("Intel(R) Core(TM) i7-1165G7 @ 2.80GHz", 0x8C, 32),  # Tiger Lake client
        ("11th Gen Intel(R) Core(TM) i9-11900K @ 3.50GHz", 0xA7, 32),  # Rocket Lake
        ("Intel(R) Xeon(R) Silver 4314 CPU @ 2.40GHz", 0x6A, 64),  # Ice Lake-SP: two units on every SKU
    ],
)
def test_intel_avx512_fma_unit_count_by_model_and_name(name, model, flop_per_cycle):
    peak = peak_flops(cpu_record("GenuineIntel", 6, model, name, AVX512, 1000.0, 1))
    assert peak["fp32"] == 1 * 1000e6 * flop_per_cycle


def test_amx_on_a_masked_model_is_a_server_core_with_two_fma_units():
    """A VM showed a Sapphire Rapids Xeon as model 0xA7 (a client core's number); its flags still carry AMX,
    which only Xeon server cores have."""
    name = "Intel(R) Xeon(R) Processor"
    masked = peak_flops(cpu_record("GenuineIntel", 6, 0xA7, name, (*AVX512, "amx_tile", "amx_bf16"), 2600.0, 2))
    assert masked["microarchitecture"] == "intel_avx512_2fma" and "amx_tile" in masked["source"]
    assert masked["fp32"] == 2 * 2600e6 * 64
    assert peak_flops(cpu_record("GenuineIntel", 6, 0xA7, name, AVX512, 2600.0, 2))["fp32"] == 2 * 2600e6 * 32


def test_haswell_avx2_fma(tmp_path):
    _, _, peak = analysis_log(write_monitor_log(tmp_path / "m.jsonl", HASWELL))
    assert peak["fp32"] == 12 * 2500e6 * 32 == 9.6e11
    assert peak["microarchitecture"] == "intel_avx2"


@pytest.mark.parametrize(
    ("vendor", "family", "model", "flags", "expected_arch", "flop_per_cycle"),
    [
        ("AuthenticAMD", 23, 0x01, AVX2, "zen", 16),  # Naples
        ("AuthenticAMD", 23, 0x08, AVX2, "zen", 16),  # Zen+
        ("AuthenticAMD", 23, 0x31, AVX2, "zen2", 32),  # Rome
        ("AuthenticAMD", 25, 0x01, AVX2, "zen3", 32),  # Milan
        ("GenuineIntel", 6, 0x2D, ("sse", "sse2", "avx"), "intel_sandybridge", 16),
        ("GenuineIntel", 6, 0x2C, ("sse", "sse2"), "intel_sse", 8),  # Westmere
        ("GenuineIntel", 6, 0xBE, AVX2, "intel_ecore", 16),  # Alder Lake-N
        ("GenuineIntel", 6, 0xAF, AVX2, "intel_ecore", 16),  # Sierra Forest
        ("HygonGenuine", 24, 0x01, AVX2, "generic_avx2_fma", 32),
        ("AuthenticAMD", 21, 0x02, ("sse", "sse2", "avx", "fma"), "generic_avx", 16),  # Piledriver
    ],
)
def test_table_by_family_and_model(vendor, family, model, flags, expected_arch, flop_per_cycle):
    peak = peak_flops(cpu_record(vendor, family, model, "x", flags, 2000.0, 3))
    assert peak["microarchitecture"] == expected_arch
    assert peak["fp32"] == 3 * 2000e6 * flop_per_cycle
    assert ("generic" in peak["source"]) == expected_arch.startswith("generic")


def test_old_monitor_log_without_identity_keys_falls_back_to_simd(tmp_path):
    old = {"device": "Intel(R) Xeon(R) Gold 6230", "mhz": 2000.0, "cores": 4, "simd": "avx512f"}
    used, total, peak = analysis_log(write_monitor_log(tmp_path / "old.jsonl", old, used=(1.0, 2.0, 0.5), total=8.0))
    assert (used, total) == (2.0, 8.0)
    assert peak["fp32"] == peak["fp16"] == 4 * 2000e6 * 64 == 5.12e11
    assert peak["microarchitecture"] == "generic_avx512f"
    assert peak["estimate"] is True
    assert "predates" in peak["source"] and "clock source unrecorded" in peak["source"]
    old_avx2 = {**old, "simd": "avx2_fma"}
    assert peak_flops(old_avx2)["fp32"] == 4 * 2000e6 * 32


def test_arm_description_without_vendor_is_generic_neon():
    arm = cpu_record(None, None, None, "unknown", ("asimd", "asimdhp"), 2600.0, 4)
    peak = peak_flops(arm)
    assert peak["microarchitecture"] == "generic_asimd"
    assert peak["fp32"] == 4 * 2600e6 * 32
    assert peak["fp16"] == 4 * 2600e6 * 64


def test_cgroup_quota_caps_the_cores_and_nominal_clock_is_flagged():
    capped = {**ZEN4_EPYC, "cores": 8, "cgroup_cpus": 2.5, "mhz_source": "cpuinfo"}
    peak = peak_flops(capped)
    assert peak["fp32"] == 2.5 * 3000e6 * 32
    assert "2.5 cores (cgroup quota; 8 physical)" in peak["source"]
    assert "turbo may exceed it" in peak["source"]
    assert peak_flops({**ZEN4_EPYC, "cgroup_cpus": 16.0})["fp32"] == 2 * 3000e6 * 32


def test_unknown_clock_or_cores_gives_memory_but_no_peak(tmp_path, caplog_loguru):
    used, total, peak = analysis_log(write_monitor_log(tmp_path / "m.jsonl", {**ZEN4_EPYC, "mhz": None}))
    assert (used, total, peak) == (3.25, 16.0, None)
    assert any("clock or core count unknown" in r["message"] for r in caplog_loguru)
    assert peak_flops({**ZEN4_EPYC, "cores": 0}) is None
    assert analysis_log(str(tmp_path / "missing.jsonl")) == (None, None, None)


def test_every_table_entry_is_units_times_lanes_times_two():
    expected = {
        "zen": 16,
        "zen2": 32,
        "zen3": 32,
        "zen4": 32,
        "zen5": 64,
        "zen5_256": 32,
        "intel_avx512_2fma": 64,
        "intel_avx512_1fma": 32,
        "intel_avx2": 32,
        "intel_ecore": 16,
        "intel_sandybridge": 16,
        "intel_sse": 8,
        "generic_avx512f": 64,
        "generic_avx2_fma": 32,
        "generic_avx": 16,
        "generic_asimd": 32,
        "generic_sse": 8,
    }
    assert {key: arch.fp32_flop_per_cycle for key, arch in cpu_analysis.MICROARCHITECTURES.items()} == expected
    assert all(arch.source for arch in cpu_analysis.MICROARCHITECTURES.values())


CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC 9654 96-Core Processor
cpu MHz\t\t: 1500.000
flags\t\t: fpu sse sse2 avx avx2 fma avx512f hypervisor

processor\t: 1
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC 9654 96-Core Processor
cpu MHz\t\t: 3700.125
flags\t\t: fpu sse sse2 avx avx2 fma avx512f hypervisor
"""


def test_parse_cpuinfo_identity_and_highest_mhz():
    info = parse_cpuinfo(CPUINFO)
    assert (info["vendor_id"], info["cpu_family"], info["model"]) == ("AuthenticAMD", 25, 17)
    assert info["model_name"] == "AMD EPYC 9654 96-Core Processor"
    assert info["mhz"] == 3700.125
    assert info["flags"] == {"fpu", "sse", "sse2", "avx", "avx2", "fma", "avx512f", "hypervisor"}
    arm = parse_cpuinfo(
        "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd asimdhp sve\nCPU implementer\t: 0x41\n"
    )
    assert (arm["vendor_id"], arm["cpu_family"], arm["model"], arm["mhz"]) == (None, None, None, None)
    assert simd_summary(arm["flags"]) == "asimd"


def test_physical_cores_counts_smt_siblings_once(tmp_path):
    siblings = {0: "0,2", 1: "1,3", 2: "0,2", 3: "1,3"}
    for cpu, listed in siblings.items():
        topology = tmp_path / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "core_cpus_list").write_text(listed + "\n")
    assert physical_cores({0, 1, 2, 3}, tmp_path) == 2
    assert physical_cores({0, 2}, tmp_path) == 1
    assert physical_cores({0, 1}, tmp_path) == 2
    assert physical_cores({0, 7}, tmp_path) is None


def test_cgroup_cpu_limit_v2_takes_the_tightest_ancestor(tmp_path):
    proc = tmp_path / "cgroup"
    root = tmp_path / "fs"
    (root / "docker" / "abc").mkdir(parents=True)
    proc.write_text("0::/docker/abc\n")
    (root / "docker" / "abc" / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_limit(proc, root) == 1.5
    (root / "docker" / "cpu.max").write_text("100000 100000\n")
    assert cgroup_cpu_limit(proc, root) == 1.0
    (root / "docker" / "cpu.max").write_text("max 100000\n")
    (root / "docker" / "abc" / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(proc, root) is None


def test_cgroup_cpu_limit_v1(tmp_path):
    proc = tmp_path / "cgroup"
    root = tmp_path / "fs"
    mount = root / "cpu,cpuacct"
    mount.mkdir(parents=True)
    proc.write_text("5:memory:/\n4:cpu,cpuacct:/\n")
    (mount / "cpu.cfs_period_us").write_text("100000\n")
    (mount / "cpu.cfs_quota_us").write_text("200000\n")
    assert cgroup_cpu_limit(proc, root) == 2.0
    (mount / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_limit(proc, root) is None
    assert cgroup_cpu_limit(tmp_path / "no-such-file", root) is None


def _cpuinfo_fields() -> dict:
    fields = {}
    for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


@pytest.mark.skipif(not Path("/proc/cpuinfo").is_file(), reason="needs Linux /proc/cpuinfo")
def test_real_cpu_description_matches_proc_cpuinfo():
    description = cpu_description()
    fields = _cpuinfo_fields()
    for key in ("device", "model_name", "vendor_id", "cpu_family", "model", "cpu_flags", "simd", "mhz", "cores"):
        assert key in description
    assert description["vendor_id"] == fields.get("vendor_id")
    if "cpu family" in fields:
        assert description["cpu_family"] == int(fields["cpu family"])
        assert description["model"] == int(fields["model"])
    flags = set(fields.get("flags", fields.get("Features", "")).split())
    assert ("avx512f" in description["cpu_flags"]) == ("avx512f" in flags)
    assert 1 <= description["cores"] <= description["logical_cpus"] <= (os.cpu_count() or 1)
    peak = peak_flops(description)
    if fields.get("vendor_id") == "AuthenticAMD" and fields.get("cpu family") == "25" and "avx512f" in flags:
        # This machine (AMD EPYC, family 0x19 with AVX-512): Zen 4, 32 fp32 FLOP/cycle.
        assert identify(description)[0] == "zen4"
        assert peak["microarchitecture"] == "zen4"
        assert peak["fp32"] == pytest.approx(description["cores"] * description["mhz"] * 1e6 * 32, rel=1e-12)
