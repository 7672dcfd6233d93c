"""common.cells: a figure's ± in every table (summary.md and the console, report.html, the LLM
table, the measured peaks). A measured figure whose interval could not be estimated honestly (its key
held with null) reads ``± n/a``, never as an exact number; a figure with no interval key stays bare;
a figure not measured stays ``-`` or its ``n/a (reason)``."""

from __future__ import annotations

from dataclasses import replace

import pytest

from common.cells import NO_INTERVAL, figure_cell, fmt, interval_text
from common.record import LatencyBlock, LLMRow, Verdict
from common.summary_record import Repetitions, SummaryLLMRow
from tests.infra.summary_records import records, summary_row
from utils.results import baselines, llm_summary
from utils.results.report.sections import performance_table, summary_rows
from utils.results.summary import markdown_table, percentile_cell


def test_the_three_states_of_an_interval_and_a_figure_not_measured():
    assert figure_cell(16.9, {"q": [16.9 * 0.988, 16.9 * 1.012]}, "q") == "16.90 ±1.2%"
    assert figure_cell(16.9, {"q": None}, "q") == "16.90 ± n/a" == "16.90" + NO_INTERVAL
    assert figure_cell(16.9, {"other": None}, "q") == figure_cell(16.9, None, "q") == "16.90"  # never estimated
    assert figure_cell(None, {"q": None}, "q") == "-"  # not measured: no ± of any kind
    assert figure_cell(3.14159, {"q": None}, "q", digits=3) == "3.142 ± n/a"
    assert figure_cell(0.0, {"q": [0.0, 0.0]}, "q") == "0.00"  # no relative width around zero
    assert figure_cell(5, {"q": (4.9, 5.1)}, "q") == "5 ±2.0%"  # an int as itself, a tuple interval


def test_interval_text_and_its_share_digits():
    assert interval_text(12.0, {"k": [11.4, 12.6]}, "k") == " ±5.0%"
    assert interval_text(12.0, {"k": [11.4, 12.6]}, "k", share_digits=0) == " ±5%"
    assert interval_text(12.0, {"k": None}, "k", share_digits=0) == " ± n/a"
    assert interval_text(None, {"k": None}, "k") == interval_text(12.0, {}, "k") == ""
    assert interval_text(12.0, {"k": "garbage"}, "k") == ""


def test_fmt():
    assert (fmt(None), fmt(1.0), fmt(1.23456, 3), fmt(7), fmt("x")) == ("-", "1.00", "1.235", "7", "x")


def test_percentile_cell_is_the_same_rendering():
    assert percentile_cell({"p90": 12.3}, "p90", 100, {"p90": None}) == "12.30 ± n/a"
    assert percentile_cell({"p90": 12.3}, "p90", 100, {}) == "12.30"
    assert percentile_cell({"p90": None}, "p90", 10, {"p90": None}) == "n/a (<64 queries)"


# ---- every table that shows a throughput ------------------------------------------------------------
def record(**changes):
    """tests/infra/summary_records.py's first record, valid, its intervals in the three states."""
    row = summary_row(
        8, "offline", 1, qps=50.5, queries=12, latency_ms=LatencyBlock(p50=2.0), latency_ci95={"p50": [1.98, 2.02]}
    )
    base = replace(
        records()[0],
        verdict=Verdict(),
        precision="fp32",
        ci95={"*p_inference_core(qps)": None, "p_inference_whole(qps)": [99.0, 101.0], "p_validation_core(qps)": None},
        latency_ms=LatencyBlock(p50=1.5),
        latency_ci95={"p50": None},
        performance=(row,),
    )
    return replace(base, **changes)


def test_summary_md_shows_a_throughput_without_its_interval_as_plus_minus_n_a():
    table = markdown_table([record()])
    # core qps measured, interval refused; whole qps with its interval; val qps not measured at all
    assert "| success | valid | fp32 | 8 | 123.46 ± n/a | 100.00 ±1.0% | - | 1.50 ± n/a | n/a (<64 queries) |" in table
    assert "| 8 | offline | 1 | 50.50 ± n/a | 2.00 ±1.0% | n/a (<64 queries) | n/a (<662 queries) | 12 |" in table
    older = markdown_table([record(ci95={}, latency_ci95={})])  # a result from before intervals: bare figures
    assert "| 8 | 123.46 | 100.00 | - | 1.50 | n/a (<64 queries) |" in older


def test_the_report_shows_the_same_cells_as_summary_md():
    (row,) = summary_rows([record()])
    assert (row["core_qps"], row["whole_qps"], row["val_qps"]) == ("123.46 ± n/a", "100.00 ±1.0%", "-")
    assert (row["p50"], row["p90"]) == ("1.50 ± n/a", "n/a (<64 queries)")
    (perf,) = performance_table(record().performance)
    assert (perf["qps"], perf["p50"], perf["p90"]) == ("50.50 ± n/a", "2.00 ±1.0%", "n/a (<64 queries)")


def llm_row(**changes):
    row = {
        "scenario": "offline",
        "batch_size": 1,
        "input_length": 16,
        "output_length": 4,
        "ttft_ms": {"p50": 14.44, "ci95": {"p50": None}},
        "tpot_ms": {"p50": 0.04, "ci95": {"p50": [0.038, 0.042]}},
        "itl_ms": {"p50": 0.023, "p99": None, "ci95": {"p50": [0.022, 0.027]}},
        "output_tokens_per_s": 275.2,
        "output_tokens_per_s_ci95": None,
        "requests_per_s": 68.8,
        "prefill_tokens_per_s": 1114.7,
        "prefill_mfu": None,
        "kv_cache_mib": 0.01,
        "verdict": {"valid": True, "reasons": []},
    }
    return {**row, **changes}


def typed_llm(row: dict) -> SummaryLLMRow:
    return SummaryLLMRow.of(LLMRow.from_json(row))


def test_the_llm_table_shows_tokens_per_s_and_ttft_without_an_interval_as_plus_minus_n_a():
    line = llm_summary._row_line(record(), typed_llm(llm_row()), None)
    assert "| 14.44 ± n/a | 0.04 ±5% | n/a | 275.2 ± n/a | 68.8 | 1114.7 |" in line
    line = llm_summary._row_line(
        record(),
        typed_llm(llm_row(output_tokens_per_s_ci95=[261.44, 288.96], ttft_ms={"p50": 14.44, "ci95": {}})),
        None,
    )
    assert "| 14.44 | 0.04 ±5% | n/a | 275.2 ±5% | 68.8 |" in line  # requests/s never has an interval


@pytest.mark.parametrize(("ci95", "shown"), [([0.97e11, 1.03e11], "100 GFLOP/s ±3.0%"), (None, "100 GFLOP/s ± n/a")])
def test_a_measured_peak_without_an_interval_reads_plus_minus_n_a(ci95, shown):
    assert baselines.with_width({"value": 1e11, "ci95": ci95}, "FLOP/s") == shown
    assert baselines.with_width({"value": None, "ci95": None}, "FLOP/s") == "-"


def test_the_containers_llm_log_line_reads_the_same():
    from tools.measure.llm_stage import _ms

    assert _ms({"p50": 14.44, "ci95": {"p50": None}}) == "14.4 ms ± n/a"
    assert _ms({"p50": 14.44, "ci95": {"p50": [13.72, 15.16]}}) == "14.4 ms ±5%"
    assert _ms({"p50": 14.44, "ci95": {}}) == "14.4 ms" and _ms({"p50": None}) == "n/a"


def test_a_repetition_whose_window_had_no_interval_reads_plus_minus_n_a():
    from utils.results.summary import repetition_lines

    figure = {"row": "inference", "figure": "core qps", "values": [100.0, 121.0], "intervals": [[98.0, 102.0], None]}
    figure.update(geomean=110.0, ci95=[100.0, 120.0], spread=0.1, valid=[True, True])
    block = {"count": 2, "log_dirs": ["a", "b"], "wall_time_s": [1.0, 1.0], "figures": [figure]}
    lines = repetition_lines([record(repetitions=Repetitions.from_json(block))])
    assert lines[-1] == (
        "| resnet50:pytorch | h1 | inference | core qps | 2 | 110.00 | ±9.1% | 10.0% | 100.00 ±2.0%, 121.00 ± n/a |"
    )
