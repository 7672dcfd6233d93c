"""summary.json/md and result.json where the fast tests did not reach (mutation testing, docs/testing.md).

utils.results.summary: MFU against a measured peak (passed in, or found beside the run's folder) over
the vendor's estimate, for the case, its performance rows and an LLM case's cells (with decode MBU);
records grouped by case and sorted; the Repetitions table's head and its ``-`` cells; the ± legend;
summary.json's aggregates. tools.results.result: the FlagPerf throughputs' intervals, an LLM case's and
a base case's blocks and their labelled reasons. Every record is a real one (tests/result_records.py),
parsed as the host parses it; the vendor is the real cpu one, its monitor log written here.
"""

from __future__ import annotations

import json
import sys
import types
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks.base_common import BaselineReport
from common.record import LLMRow
from common.summary_record import RepetitionFigure, Repetitions
from tests.conftest import INFERENCE
from tests.infra.cpu_monitor import ZEN4_EPYC, write_monitor_log
from tests.infra.result_builders import build, phase
from tests.result_records import case_result, performance_row, write_result
from tools.measure.llm_stage import LLMReport
from utils.executors.base import CaseOutcome
from utils.host_config import CaseSpec
from utils.results.baselines import MeasuredPeaks
from utils.results.summary import markdown_table, merge_outcome, repetition_lines, summary_records, write_summary

ESTIMATE = 2 * 3000e6 * 32  # ZEN4_EPYC: 2 cores x 3000 MHz x 32 fp32 FLOP/cycle (docs/cpu_peak_flops.md)
WRONG_BASELINE = (
    "the baseline is wrong (measured under load or with fewer threads) or flops is; run run.py --cases base again"
)


def base_result(*figures: dict):
    """A base case's result (same host fingerprint as the recorded digits result) with ``figures``."""
    return case_result(case="base_gemm", baseline={"case": "base_gemm", "figures": list(figures)})


def gemm(value: float) -> dict:
    figure = {"name": "fp32 GEMM", "kind": "compute", "dtype": "fp32", "unit": "FLOP/s", "value": value}
    return {**figure, "ci95": [value * 0.98, value * 1.02], "verdict": {"valid": True, "reasons": []}}


def cache(root: Path, *figures: dict) -> MeasuredPeaks:
    """The measured peaks cache at ``root`` holding ``figures``, stored as run.py stores a base case's."""
    peaks = MeasuredPeaks(root)
    assert peaks.store(base_result(*figures), "cpu", "run1", "h1")
    return MeasuredPeaks(root)  # a fresh reader: the figures come from the file


def outcome(local_dir: Path, case: str = "digits", host: str = "h1", noderank: int = 0, **changes) -> CaseOutcome:
    """A successful outcome of ``case`` whose result is the recorded digits result with ``changes``,
    its cpu monitor log (a Zen 4 EPYC, peak estimated at ``ESTIMATE``) beside it."""
    local_dir.mkdir(parents=True, exist_ok=True)
    out = CaseOutcome(CaseSpec(case, "pytorch", "/data"), host, noderank, local_dir, status="success")
    out.result = case_result(changes)
    out.monitors["cpu"] = write_monitor_log(local_dir / "cpu_monitor.jsonl", ZEN4_EPYC)
    return out


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip("|").split(" | ")]


def table_line(table: str, start: str) -> list[str]:
    (line,) = [line for line in table.splitlines() if line.startswith(start)]
    return cells(line)


# ---- MFU against a measured peak ----------------------------------------------------------------
def test_a_measured_peak_passed_in_is_mfus_denominator_for_the_case_and_its_rows(tmp_path):
    peaks = cache(tmp_path / "baselines", gemm(500e9))
    rows = [performance_row(batch_size=16, qps=25.0), performance_row(batch_size=32, qps=75.0)]
    changes = {"flops": 8e9, "*p_inference_core(qps)": 50.0, "performance": rows}
    record = merge_outcome(outcome(tmp_path / "logs", **changes), INFERENCE, "cpu", peaks)
    measured = "measured fp32 GEMM peak (500 GFLOP/s ±2.0%)"
    assert (record.peak_flops, record.mfu_is_estimate, record.peak_measured) == (500e9, False, measured)
    assert record.peak_flops_source == measured  # not the vendor's estimate, which the monitor also gave
    assert (record.mfu, record.mfu_note) == (pytest.approx(0.8), None)  # 8e9 x 50 / 500e9
    assert [(row.mfu, row.mfu_note) for row in record.performance] == [
        (pytest.approx(0.4), None),
        (None, f"120% of the {measured}: {WRONG_BASELINE}"),
    ]
    table = markdown_table([record])
    assert table_line(table, "| digits:pytorch | h1 | success")[-1] == f"80.00% of {measured}"
    assert table_line(table, "| digits:pytorch | h1 | 16 |")[-2] == f"40.00% of {measured}"
    assert (
        table_line(table, "| digits:pytorch | h1 | 32 |")[-2]
        == "n/a (over 100% of the measured peak: the baseline is wrong, see below)"
    )
    assert "MFU est." not in table and "- **digits:pytorch on h1: MFU" not in table


def test_the_measured_peaks_are_found_beside_the_runs_folder_and_a_case_over_them_says_why(tmp_path):
    cache(tmp_path / "result" / "baselines", gemm(100e9))
    local = tmp_path / "result" / "run20260101" / "digits:pytorch" / "h1_noderank0"
    record = merge_outcome(outcome(local, flops=8e9, **{"*p_inference_core(qps)": 50.0}), INFERENCE, "cpu")
    measured = "measured fp32 GEMM peak (100 GFLOP/s ±2.0%)"
    assert (record.peak_flops, record.peak_measured, record.mfu) == (100e9, measured, None)
    assert record.mfu_note == f"400% of the {measured}: {WRONG_BASELINE}"
    table = markdown_table([record]).splitlines()
    assert cells(table[2])[-1] == "n/a (over 100% of the measured peak: the baseline is wrong, see below)"
    assert f"- **digits:pytorch on h1: MFU 400% of the {measured}: {WRONG_BASELINE}**" in table
    # the same case outside a run's folder has no cache to find: the vendor's estimate stays
    elsewhere = merge_outcome(outcome(tmp_path / "logs", flops=8e9), INFERENCE, "cpu")
    assert (elsewhere.peak_flops, elsewhere.mfu_is_estimate, elsewhere.peak_measured) == (ESTIMATE, True, None)


def test_an_estimated_peak_too_low_is_a_note_in_its_cell_and_no_wrong_baseline_line(tmp_path):
    record = merge_outcome(outcome(tmp_path / "logs", flops=8e9, **{"*p_inference_core(qps)": 50.0}), INFERENCE, "cpu")
    assert (record.peak_flops, record.mfu_is_estimate, record.peak_measured, record.mfu) == (ESTIMATE, True, None, None)
    assert record.mfu_note == (
        "208% of the estimated peak: the estimate is too low (a nominal clock below the real one)"
    )  # 400 GFLOP/s over 192
    assert (record.peak_flops_source or "").startswith("zen4 (AMD Zen 4; ")
    table = markdown_table([record])
    assert cells(table.splitlines()[2])[-1] == "n/a (over 100%: peak too low)"
    assert f"MFU est.: the peak FLOPS is an estimate, not a datasheet figure: {record.peak_flops_source}\n" in table
    assert "- **digits:pytorch on h1: MFU" not in table  # that line is for a measured baseline that is wrong


def test_a_peak_source_that_is_not_a_string_is_left_out(tmp_path, monkeypatch):
    vendor = "oddvendor"
    source = tmp_path / "docker_images" / vendor / f"{vendor}_analysis.py"
    source.parent.mkdir(parents=True)
    source.write_text("# stands in for the module in sys.modules\n")
    module = types.ModuleType(f"docker_images.{vendor}.{vendor}_analysis")
    module.analysis_log = lambda path: (1.0, 2.0, {"fp32": 1e12, "source": ["a", "list"]})
    monkeypatch.setitem(sys.modules, module.__name__, module)
    out = outcome(tmp_path / "logs")
    out.monitors = {vendor: str(tmp_path / "monitor.log")}
    record = merge_outcome(out, tmp_path, vendor)
    assert (record.peak_flops, record.peak_flops_source) == (1e12, None)
    assert json.loads(json.dumps(record.to_json()))["peak_flops_source"] is None


def test_an_llm_cells_mfu_is_against_the_vendor_peak_and_its_decode_mbu_against_the_measured_bandwidth(tmp_path):
    triad = {"name": "STREAM triad", "kind": "bandwidth", "kernel": "triad", "unit": "B/s", "value": 40e9}
    triad.update(ci95=[39e9, 41e9], verdict={"valid": True, "reasons": []})
    peaks = cache(tmp_path / "baselines", triad)
    model = {"precision": "fp32", "params": 10_000_000, "embedding_params": 0, "layers": 4, "kv_heads": 2}
    cell = {"scenario": "offline", "batch_size": 1, "input_length": 0, "output_length": 0, "decode_tokens_per_s": 50.0}
    cell.update(prefill_flops_per_s=ESTIMATE / 2, decode_flops_per_s=ESTIMATE * 2, verdict={"valid": True})
    llm = {"model": {**model, "head_dim": 64}, "table": [cell], "server": []}
    record = merge_outcome(outcome(tmp_path / "logs", llm=llm), INFERENCE, "cpu", peaks)
    assert record.llm is not None and record.peak_measured is None  # no GEMM peak cached: the estimate stays
    (row,) = record.llm.table
    assert (row.prefill_mfu, row.prefill_mfu_note) == (pytest.approx(0.5), None)
    assert (row.decode_mfu, row.decode_mfu_note) == (
        None,
        "200% of the estimated peak: the estimate is too low (a nominal clock below the real one)",
    )
    # 10M fp32 weights read once per decoded token (no KV cache at zero length) x 50 tokens/s over 40 GB/s
    assert row.mbu is not None and (row.mbu.bytes_per_token, row.mbu.mbu) == (40e6, pytest.approx(0.05))
    assert record.llm.mbu_bandwidth == "measured STREAM triad (40 GB/s ±2.5%)"


# ---- records, repetitions, the table's notes, summary.json ---------------------------------------
def test_records_are_one_per_case_and_host_in_case_order_with_the_vendors_memory(tmp_path):
    outcomes = [
        outcome(tmp_path / "r1", case="resnet50"),
        outcome(tmp_path / "d1", case="digits"),
        outcome(tmp_path / "d2", case="digits"),  # run.py --repeat 2: merged into one record
    ]
    records = summary_records(outcomes, INFERENCE, "cpu")
    assert [r.name for r in records] == ["digits:pytorch", "resnet50:pytorch"]
    assert [r.repetitions.count if r.repetitions else None for r in records] == [2, None]
    assert [r.log_dir for r in records] == [str(tmp_path / "d1"), str(tmp_path / "r1")]
    assert {(r.vendor_usage_gib, r.vendor_max_mem_gib, r.peak_flops) for r in records} == {(3.25, 16.0, ESTIMATE)}


def test_the_repetitions_table_head_and_a_figure_without_an_interval_or_spread(tmp_path):
    record = merge_outcome(outcome(tmp_path / "logs"), INFERENCE, "cpu")
    single = RepetitionFigure(
        row="inference",
        figure="core qps",
        unit="samples/s",
        higher_is_better=True,
        values=[100.0],
        intervals=[None],
        valid=[True],
        geomean=100.0,
        ci95=None,  # decide.across: no interval and no spread below two repetitions
        spread=None,
    )
    block = Repetitions(count=1, log_dirs=[record.log_dir], wall_time_s=[1.0], figures=(single,))
    assert repetition_lines([record]) == []
    assert repetition_lines([replace(record, repetitions=block)]) == [
        "",
        "Repetitions (run.py --repeat: each a fresh process; the headline above is their geometric mean, its ± their "
        "95 % t-interval, which holds this run's minutes only: a run made at another time differs by this host's "
        "between-run noise, which the results history learns and `run.py history` shows; docs/history.md):",
        "",
        "| case | host | row | figure | n | geometric mean | ± across repetitions | spread between "
        "repetitions | each repetition (± of its own window) |",
        "|---|---|---|---|---|---|---|---|---|",
        "| digits:pytorch | h1 | inference | core qps | 1 | 100.00 | - | - | 100.00 ± n/a |",
    ]


LEGEND = (
    "±: half the 95% confidence interval's width over the figure (docs/measurement.md): inside one window unless the "
    "case ran repetitions (then across them; the spread between runs is in the Repetitions table)."
)


def test_the_plus_minus_legend_follows_a_rows_interval_and_names_every_precision_asked(tmp_path):
    record = merge_outcome(outcome(tmp_path / "logs"), INFERENCE, "cpu")
    (row,) = record.performance
    assert row.qps_ci95 is not None
    only_rows = replace(record, ci95=None, latency_ci95=None, precision_target=None)  # only a row's qps has a ±
    assert LEGEND in markdown_table([only_rows]).splitlines()
    assert not any(line.startswith("±") for line in markdown_table([replace(only_rows, performance=())]).splitlines())
    two = [replace(record, precision_target=0.02), replace(record, case="vit", precision_target=0.05)]
    assert f"{LEGEND} Precision asked: digits ±2%, vit ±5%." in markdown_table(two).splitlines()


def test_summary_json_holds_the_aggregate_of_a_case_run_on_two_hosts(tmp_path):
    outcomes = [outcome(tmp_path / host, host=host, noderank=rank) for rank, host in enumerate(("h1", "h2"))]
    for out in outcomes:
        write_result(out.local_dir)  # the aggregate reads each host's result.json
    records = summary_records(outcomes, INFERENCE, "cpu")
    hosts = [SimpleNamespace(label="h1"), SimpleNamespace(label="h2")]
    host_config = SimpleNamespace(mode="ssh", vendor="cpu", hosts=hosts, flagperf_path=INFERENCE)
    started = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    json_path, md_path = write_summary(tmp_path, "run9", host_config, records, started)
    (aggregate,) = json.loads(json_path.read_text(encoding="utf-8"))["aggregates"]
    qps = records[0].infer_core_qps
    assert aggregate["host"] == "all 2 hosts" and aggregate["*p_inference_core(qps)"] == pytest.approx(2 * qps)
    assert "\n| digits:pytorch | all 2 hosts | success |" in md_path.read_text(encoding="utf-8")


# ---- result.json: intervals, an LLM case's and a base case's blocks --------------------------------
def test_the_flagperf_throughputs_intervals_are_each_phases_own_rounded_to_4_digits():
    validation = phase(
        "validation", 10, 2.0, 1.0, None, whole_qps_ci95=[4.123456, 5.987654], core_qps_ci95=[9.111111, 10.999999]
    )
    inference = phase(
        "inference", 10, 2.0, 1.0, None, whole_qps_ci95=[4.55556, 5.44444], core_qps_ci95=[9.87654321, 10.12345678]
    )
    record = build(validation=validation, inference=inference)
    assert record["ci95"] == {
        "p_validation_whole(qps)": [4.1235, 5.9877],
        "p_validation_core(qps)": [9.1111, 11.0],
        "p_inference_whole(qps)": [4.5556, 5.4444],
        "*p_inference_core(qps)": [9.8765, 10.1235],
    }
    # the phase blocks keep the intervals as measured
    assert record["validation"]["whole_qps_ci95"] == [4.123456, 5.987654]
    assert record["inference"]["whole_qps_ci95"] == [4.55556, 5.44444]
    assert record["inference"]["core_qps_ci95"] == [9.87654321, 10.12345678]


def test_an_llm_cases_block_and_its_cells_reasons_labelled_with_the_engine_wide_one_said_once():
    cell = LLMRow.from_json(
        {
            "scenario": "offline",
            "batch_size": 2,
            "input_length": 16,
            "output_length": 4,
            "verdict": {"valid": False, "reasons": ["engine slow", "too few windows"]},
        }
    )
    report = LLMReport(model={"params": 1000}, table=[cell], engine_reasons=["engine slow"])
    record = build(performance=report)
    assert record["verdict"] == {
        "valid": False,
        "reasons": ["engine: engine slow", "llm bs 2 in 16 out 4: too few windows"],
    }
    assert record["llm"] is not None and record["llm"]["model"] == {"params": 1000}
    assert [(c["batch_size"], c["input_length"], c["output_length"]) for c in record["llm"]["table"]] == [(2, 16, 4)]
    assert record["baseline"] is None and record["performance"] == []


def test_a_base_cases_figures_are_its_baseline_block_and_an_invalid_figures_reasons_are_the_results():
    figure = {"name": "fp32 GEMM", "kind": "compute", "dtype": "fp32", "unit": "FLOP/s", "value": 5e11}
    figure.update(ci95=[4.9e11, 5.1e11], verdict={"valid": False, "reasons": ["contention: 40% of the CPUs busy"]})
    report = BaselineReport(case="base_gemm", kernels="torch", figures=[figure])
    record = build(performance=report)
    assert record["baseline"] == {"case": "base_gemm", "kernels": "torch", "figures": [figure], "not_applicable": None}
    assert record["verdict"] == {"valid": False, "reasons": ["fp32 GEMM: contention: 40% of the CPUs busy"]}
    assert record["llm"] is None and record["performance"] == []
