"""common/energy.py: the counters read from real files, recorded counter sequences turned into a
window's joules (a RAPL wrap, an NVML reset, a window the samples do not cover), and the n/a cells."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common import energy
from common.energy import Window, energy_block, energy_cell, nvml_counter, rapl_counter, read_rapl, window_energy

TOP = 262_143_328_850  # a real package zone's max_energy_range_uj


def powercap(root: Path, zones: dict[str, tuple[str, int]]) -> Path:
    """A fake /sys/class/powercap with real files: {zone: (name, energy_uj)}, plus a core sub-zone."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "intel-rapl").mkdir(exist_ok=True)  # the control type, not a zone
    for zone, (name, value) in zones.items():
        folder = root / zone
        folder.mkdir()
        (folder / "name").write_text(name + "\n")
        (folder / "energy_uj").write_text(f"{value}\n")
        (folder / "max_energy_range_uj").write_text(f"{TOP}\n")
        sub = root / f"{zone}:0"
        sub.mkdir()
        (sub / "energy_uj").write_text("5\n")
        (sub / "max_energy_range_uj").write_text(f"{TOP}\n")
    return root


def test_read_rapl_sums_package_zones_only(tmp_path):
    root = powercap(tmp_path / "powercap", {"intel-rapl:0": ("package-0", 100), "intel-rapl:1": ("package-1", 7)})
    (root / "intel-rapl:2").mkdir()
    (root / "intel-rapl:2" / "name").write_text("psys\n")  # the platform zone holds the packages: skipped
    zones, why = read_rapl(root)
    assert why == ""
    assert zones == [
        {"zone": "intel-rapl:0", "energy_uj": 100, "max_energy_range_uj": TOP},
        {"zone": "intel-rapl:1", "energy_uj": 7, "max_energy_range_uj": TOP},
    ]


def test_read_rapl_names_what_it_looked_for(tmp_path):
    assert read_rapl(tmp_path / "absent") == (None, f"no RAPL zone under {tmp_path / 'absent'}")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert read_rapl(empty) == (None, f"no RAPL zone under {empty}")


def test_a_counter_unreadable_without_root_is_a_reason_not_zero(tmp_path):
    # Tests run as root, which reads a mode-0400 file: the read function is what is stood in.
    root = powercap(tmp_path / "powercap", {"intel-rapl:0": ("package-0", 100)})

    def read(path: Path) -> str:
        if path.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(path))
        return path.read_text()

    zones, why = read_rapl(root, read)
    assert zones is None
    assert why == f"{root / 'intel-rapl:0' / 'energy_uj'} is not readable by this user (often mode 0400: root only)"


def test_a_counter_that_is_a_folder_is_named_with_its_error(tmp_path):
    root = powercap(tmp_path / "powercap", {"intel-rapl:0": ("package-0", 100)})
    counter = root / "intel-rapl:0" / "energy_uj"
    counter.unlink()
    counter.mkdir()  # reading it fails for root too
    zones, why = read_rapl(root)
    assert zones is None and why == f"{counter} cannot be read (Is a directory)"


def rapl_samples(values: list[tuple[float, int]]) -> list[dict]:
    return [
        {"timestamp": t, "rapl": [{"zone": "intel-rapl:0", "energy_uj": v, "max_energy_range_uj": TOP}]}
        for t, v in values
    ]


def test_a_rapl_wrap_is_undone():
    # 50 J per second; the counter passes TOP between t=2 and t=3.
    raw = [(0.0, TOP - 100_000_000), (1.0, TOP - 50_000_000), (2.0, TOP), (3.0, 50_000_000), (4.0, 100_000_000)]
    counter = rapl_counter(rapl_samples(raw))
    assert [i.joules for i in counter.intervals] == [50.0, 50.0, 50.0, 50.0]
    figure = window_energy(counter, 1.0, 4.0)
    assert figure.joules == pytest.approx(150.0) and figure.edge_s == 0.0
    assert figure.source == "RAPL package energy (/sys/class/powercap)"


def test_a_window_inside_intervals_is_read_in_proportion():
    counter = rapl_counter(rapl_samples([(10.0, 0), (11.0, 40_000_000), (12.0, 100_000_000)]))
    figure = window_energy(counter, 10.5, 11.75)  # half of 40 J, then three quarters of 60 J
    assert figure.joules == pytest.approx(20.0 + 45.0)
    assert figure.edge_s == pytest.approx(1.25)
    assert figure.per(13) == pytest.approx(5.0)


def test_a_window_the_samples_do_not_cover_has_no_figure():
    counter = rapl_counter(rapl_samples([(10.0, 0), (11.0, 1_000_000)]))
    late = window_energy(counter, 10.5, 11.5)
    assert late.joules is None
    assert late.reason == "the RAPL package energy (/sys/class/powercap) samples (10.0 to 11.0) do not cover the window"


def nvml_samples(values: list[tuple[float, list[int | None]]]) -> list[dict]:
    return [
        {
            "timestamp": t,
            "devices": [{"index": i, "name": "NVIDIA H100 80GB HBM3", "energy_mj": v} for i, v in enumerate(vs)],
        }
        for t, vs in values
    ]


def test_nvml_sums_the_monitored_gpus_and_refuses_a_reset():
    samples = nvml_samples(
        [(0.0, [1000, 5000]), (1.0, [301_000, 305_000]), (2.0, [601_000, 1_000]), (3.0, [901_000, 2_000])]
    )
    counter = nvml_counter(samples)
    assert counter.source == "NVML total energy (NVIDIA H100 80GB HBM3)"
    assert [i.joules for i in counter.intervals] == [600.0, None, 301.0]
    assert window_energy(counter, 0.0, 1.0).joules == pytest.approx(600.0)
    reset = window_energy(counter, 0.5, 2.5)
    assert reset.joules is None
    assert reset.reason == "the NVML total energy (NVIDIA H100 80GB HBM3) reset or was unreadable inside the window"
    assert window_energy(counter, 2.0, 3.0).joules == pytest.approx(301.0)


def test_energy_block_per_query_sample_and_token_from_a_recorded_log(tmp_path):
    log = tmp_path / "nvidia_monitor.jsonl"
    log.write_text("".join(json.dumps(s) + "\n" for s in nvml_samples([(t, [t * 250_000]) for t in range(5)])))
    from common.sampler import read_samples

    windows = [
        Window("bs 8 offline x1", 1.0, 3.0, queries=100, samples=800),
        Window("llm", 0.0, 4.0, queries=4, samples=4, output_tokens=500),
        Window("no span", None, None, queries=1, samples=1),
    ]
    block = energy_block(windows, [], read_samples(log), "nvidia")
    assert block is not None and block["source"] == "NVML total energy (NVIDIA H100 80GB HBM3)"
    first, llm, none = block["windows"]
    assert (first["joules"], first["watts"], first["per_query"], first["per_sample"]) == (500.0, 250.0, 5.0, 0.625)
    assert llm["per_output_token"] == 2.0
    assert none["joules"] is None and none["reason"] == "the window has no unix start and end"
    assert energy_cell(first) == "5 J" and energy_cell(first, "per_sample") == "0.625 J"


def test_no_counter_reads_na_naming_what_was_looked_for():
    sys_samples = [{"timestamp": 1.0, "rapl": None, "rapl_note": "no RAPL zone under /sys/class/powercap"}]
    block = energy_block([Window("inference", 0.0, 2.0, 10, 80)], sys_samples, [{"timestamp": 1.0}], "cpu")
    assert block is not None and block["source"] is None
    assert block["reason"] == "no energy counter: no RAPL zone under /sys/class/powercap"
    cell = energy_cell(block["windows"][0])
    assert cell == "n/a (no energy counter: no RAPL zone under /sys/class/powercap)"
    gpu = energy_block([Window("inference", 0.0, 2.0, 10, 80)], [], nvml_samples([(1.0, [None])]), "nvidia")
    assert gpu is not None
    assert gpu["reason"] == (
        "no energy counter: NVML nvmlDeviceGetTotalEnergyConsumption gave no reading (NVIDIA H100 80GB HBM3)"
    )
    assert energy_block([Window("inference", 0.0, 2.0, 10, 80)], [], [], "cpu") is None  # no monitor ran


def test_a_tdp_estimate_only_when_asked_and_marked():
    samples = nvml_samples([(0.0, [None]), (5.0, [None])])
    window = [Window("inference", 1.0, 3.0, 10, 20)]
    plain = energy_block(window, [], samples, "nvidia")
    assert plain is not None and plain["windows"][0]["joules"] is None
    asked = energy_block(window, [], samples, "nvidia", estimate="tdp")
    assert asked is not None
    row = asked["windows"][0]
    assert (row["joules"], row["per_query"], row["estimate"]) == (1400.0, 140.0, True)
    assert row["source"].startswith("TDP 700 W of H100 SXM: ")
    assert energy_cell(row) == "140 J est."
    with pytest.raises(ValueError, match="the only estimate is 'tdp'"):
        energy_block(window, [], samples, "nvidia", estimate="guess")
    unknown = energy.tdp_estimate("Some Other GPU", 2.0)
    assert unknown.joules is None and unknown.reason == "no TDP entry for 'Some Other GPU'"


def test_this_machine_without_rapl_records_the_reason(tmp_path, monkeypatch):
    from common import sys_monitor

    monkeypatch.setattr(sys_monitor, "read_rapl", lambda: read_rapl(tmp_path / "none"))
    reading = sys_monitor._PowerMeter().read()
    assert reading == {"power_w": None, "rapl": None, "rapl_note": f"no RAPL zone under {tmp_path / 'none'}"}


def test_summary_md_says_no_counter_in_one_line_and_tables_a_measured_one():
    from common.summary_record import SummaryRecord
    from utils.results.summary import energy_lines

    def record(host: str, energy: dict) -> SummaryRecord:
        return SummaryRecord(case="digits", framework="pytorch", host=host, noderank=0, status="success", energy=energy)

    none = {"source": None, "reason": "no energy counter: no RAPL zone under /sys/class/powercap", "windows": []}
    assert energy_lines([record("h1", none), record("h2", none)]) == [
        "",
        "Energy: n/a (no energy counter: no RAPL zone under /sys/class/powercap).",
    ]
    window = {"label": "inference", "joules": 12.5, "watts": 250.0, "per_query": 0.125, "per_sample": 0.0078,
              "source": "nvml"}  # fmt: skip
    lines = energy_lines([record("h1", none), record("h2", {"source": "nvml", "windows": [window]})])
    assert lines[-2:] == [
        "| digits:pytorch | h1 | all | n/a (no energy counter: no RAPL zone under /sys/class/powercap) "
        "| - | - | - | - |",
        "| digits:pytorch | h2 | inference | 12.5000 | 250.0000 | 0.125 J | 0.0078 J | nvml |",
    ]
