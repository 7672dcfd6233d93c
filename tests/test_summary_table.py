"""The summary: MFU per row from the vendor's peak, and a table that tells the truth at a glance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.record import CaseResult
from tests.result_records import case_result, performance_row, phase_block
from utils.executors.base import CaseOutcome
from utils.host_config import CaseSpec
from utils.results.summary import markdown_table, merge_outcome

INFERENCE = Path(__file__).resolve().parents[1] / "inference"


def _result(**changes) -> CaseResult:
    """A complete result (the recorded digits result, tests/result_records.py) with this file's figures."""
    result = {
        "vendor": "cpu",
        "compiler": "onnxruntime",
        "precision": "fp32",
        "batchsize": 8,
        "flops": 4e9,
        "e2e_time(second)": 30.0,
        "p_validation_whole(qps)": 10.0,
        "p_validation_core(qps)": 12.0,
        "p_inference_whole(qps)": 20.0,
        "*p_inference_core(qps)": 25.0,
        "val_average_acc": None,
        "infer_average_acc": None,
        "accuracy_note": "random weights",
        "verdict": {"valid": False, "reasons": ["inference: contention: other processes used 45% of the 2 CPU(s)"]},
        "ci95": {},  # this file's figures carry no intervals: the table shows none
        "inference": phase_block(
            "inference",
            latency_ms={
                "count": 40,
                "p50": 310.0,
                "p90": None,
                "p99": None,
                "p99_9": None,
                "mean": 312.0,
                "notes": ["p90 needs at least 64 queries, got 40"],
            },
            latency_ci95=None,
        ),
        "performance": [
            performance_row(
                {
                    "batch_size": 8,
                    "scenario": "offline",
                    "clients": 1,
                    "qps": 26.0,
                    "queries": 70,
                    "latency_ms": {"p50": 300.0, "p90": 305.0, "p99": None, "p99_9": None, "mean": 301.0},
                    "target_qps": None,
                    "latency_bound_met": None,
                    "verdict": {"valid": True, "reasons": []},
                    "qps_ci95": None,
                    "latency_ci95": None,
                }
            ),
            performance_row(
                {
                    "batch_size": 1,
                    "scenario": "server",
                    "clients": 1,
                    "qps": 9.5,
                    "queries": 700,
                    "latency_ms": {"p50": 50.0, "p90": 80.0, "p99": 120.0, "p99_9": None, "mean": 55.0},
                    "target_qps": 10.0,
                    "latency_bound_met": False,
                    "verdict": {"valid": False, "reasons": ["p99 latency 120 ms exceeds latency_bound_ms 100"]},
                    "qps_ci95": None,
                    "latency_ci95": None,
                }
            ),
        ],
        "best": None,
        "numeric": None,
        "audits": [],
    }
    return case_result(result, **changes)


def _outcome(tmp_path: Path, result: CaseResult | None, peak: dict | None) -> CaseOutcome:
    outcome = CaseOutcome(CaseSpec("resnet50", "pytorch", "/data"), "10.0.0.1", 0, tmp_path)
    outcome.status = "success" if result else "failed"
    outcome.result = result
    if peak is not None:
        monitor = tmp_path / "cpu_monitor.jsonl"
        sample = {
            "timestamp": 1.0,
            "device": "AMD EPYC",
            "model_name": "AMD EPYC 9R14",
            "vendor_id": "AuthenticAMD",
            "cpu_family": 25,
            "model": 17,
            "cpu_flags": ["avx512f", "avx2", "fma"],
            "simd": "avx512f",
            "mhz": 2500.0,
            "mhz_source": "cpuinfo",
            "cores": 2,
            "utilization": 50.0,
            "mem_used_gib": 3.0,
            "mem_total_gib": 16.0,
        }
        monitor.write_text(json.dumps(sample) + "\n")
        outcome.monitors["cpu"] = str(monitor)
    return outcome


def test_mfu_per_row_uses_the_vendor_peak_and_is_marked_estimate(tmp_path):
    record = merge_outcome(_outcome(tmp_path, _result(), peak={}), INFERENCE, "cpu")
    peak = 2 * 2500e6 * 32  # Zen 4: 32 fp32 FLOP/cycle/core
    assert record.peak_flops == pytest.approx(peak)
    assert record.mfu_is_estimate is True and "zen4" in record.peak_flops_source
    assert record.mfu == pytest.approx(4e9 * 25.0 / peak) and record.mfu_note is None
    assert [row.mfu for row in record.performance] == pytest.approx([4e9 * 26.0 / peak, 4e9 * 9.5 / peak])


def test_an_mfu_above_100_percent_is_never_shown_as_a_number(tmp_path):
    """flops x qps above the (estimated) peak means the peak is wrong, not a 125 % utilisation."""
    record = merge_outcome(_outcome(tmp_path, _result(flops=8e9), peak={}), INFERENCE, "cpu")
    peak = 2 * 2500e6 * 32
    assert 8e9 * 25.0 / peak == pytest.approx(1.25)
    assert record.mfu is None
    assert record.mfu_note == "125% of the estimated peak: the estimate is too low (a nominal clock below the real one)"
    rows = record.performance
    assert rows[0].mfu is None and rows[0].mfu_note.startswith("130% of the estimated peak")
    assert rows[1].mfu == pytest.approx(8e9 * 9.5 / peak) and rows[1].mfu_note is None
    table = markdown_table([record])
    assert table.splitlines()[2].endswith("| n/a (over 100%: peak too low) |")
    assert "125.00%" not in table
    assert record.latency_ms.p90 is None and record.latency_notes == ["p90 needs at least 64 queries, got 40"]


def test_mfu_is_null_without_a_peak(tmp_path):
    record = merge_outcome(_outcome(tmp_path, _result(), peak=None), INFERENCE, "cpu")
    assert record.mfu is None and record.mfu_is_estimate is None
    assert all(row.mfu is None for row in record.performance)


def test_table_says_na_with_reasons_units_and_verdicts(tmp_path):
    record = merge_outcome(_outcome(tmp_path, _result(), peak={}), INFERENCE, "cpu")
    table = markdown_table([record], "host RAM (whole machine)")
    header = table.splitlines()[0]
    for unit in ("infer core qps (samples/s)", "p99 ms/batch", "host RAM (whole machine) used/total GiB", "verdict"):
        assert unit in header
    row = table.splitlines()[2]
    assert "| INVALID (1) |" in row
    assert "| n/a (random weights) | n/a (random weights) |" in row  # never 0.0000
    assert "| 310.00 | n/a (<64 queries) | n/a (<662 queries) |" in row  # p50 measured, p90/p99 not
    assert "% est. |" in row and "0.0000" not in row
    # A recorded row always has qps_ci95 and latency_ci95 (common.record.PerformanceRow); these rows' are None:
    # measured, no interval.
    assert (
        "| resnet50:pytorch | 10.0.0.1 | 8 | offline | 1 | 26.00 ± n/a | 300.00 ± n/a | 305.00 ± n/a | n/a (<662 "
        "queries) | 70 |" in table
    )
    assert "| 1 | server @10, bound MISSED | 1 | 9.50 ± n/a | 50.00 ± n/a | 80.00 ± n/a | 120.00 ± n/a | 700 |" in table
    assert "| valid |" in table and "| INVALID (1) |" in table
    assert "is INVALID:** inference: contention: other processes used 45%" in table
    assert "MFU est.: the peak FLOPS is an estimate" in table


def test_failed_case_has_no_verdict_and_says_where_it_failed(tmp_path):
    outcome = _outcome(tmp_path, None, peak=None).fail("vendor_compile", "onnxruntime could not compile")
    record = merge_outcome(outcome, INFERENCE, "cpu")
    assert record.verdict is None and record.performance == ()
    table = markdown_table([record])
    assert "| failed at vendor_compile | - |" in table
    assert "failed at step `vendor_compile`: onnxruntime could not compile" in table
