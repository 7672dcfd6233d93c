"""A check that could not run says so: "not judged (why)" in the verdict, result.json and summary.md,
never a silent VALID; ``run.py --strict`` counts it as a failure (docs/measurement.md, "Not judged")."""

from __future__ import annotations

from types import SimpleNamespace

from common.record import PerformanceRow
from common.record import Verdict as RecordedVerdict
from common.stats import LatencyStats
from common.summary_record import SummaryRecord
from contract.phase import ContentionReading, Verdict
from tests.infra.performance_rig import CONFIG, QUIET, scenario_run
from tools.measure.stage import judge_row
from tools.measure.verdict import contention_not_judged, drift_not_judged
from tools.results.result import overall_verdict
from utils.results.summary import _verdict_cell, markdown_table

DRIFT = "drift of qps: not judged (a third of the window is too short for its own interval)"
CONTENTION = "contention: not judged (no reading of the other processes' CPU time on this machine)"


def verdict_of(run, contention=QUIET) -> Verdict:
    return judge_row(run, LatencyStats.from_ns(run.latencies_ns), CONFIG, contention, None)


def test_the_verdict_keeps_what_was_not_judged_apart_from_its_reasons():
    verdict = Verdict(["too short"]).skip(["a", None, "a", "b"])
    assert verdict.to_dict() == {"valid": False, "reasons": ["too short"], "not_judged": ["a", "b"]}
    assert Verdict.of(RecordedVerdict.from_json(verdict.to_dict())) == verdict  # the record round-trips
    assert Verdict().to_dict() == {"valid": True, "reasons": []}  # every check ran: the key is absent
    assert drift_not_judged({"qps": None, "core qps": object()}) == [DRIFT]
    assert contention_not_judged(None) == CONTENTION and contention_not_judged(0.0) is None


def test_a_window_too_short_for_drift_says_so_and_one_long_enough_is_judged():
    short = verdict_of(scenario_run("offline", 24))  # 8 queries in a third: below the 16 an interval needs
    assert short.valid and short.not_judged == [DRIFT]
    assert verdict_of(scenario_run("offline", 96)).not_judged == []
    unknown = verdict_of(scenario_run("offline", 96), ContentionReading(None, 2, 1.0, None))
    assert unknown.valid and unknown.not_judged == [CONTENTION]


def test_the_result_labels_what_was_not_judged_where_it_applies():
    inference = SimpleNamespace(verdict=Verdict(not_judged=["contention: not judged (x)"]))
    row = PerformanceRow.from_json(
        {
            "batch_size": 8,
            "scenario": "offline",
            "clients": 1,
            "verdict": {"valid": True, "reasons": [], "not_judged": [DRIFT]},
        }
    )
    performance = SimpleNamespace(
        rows=[row], engine_reasons=[], engine_not_judged=["audits: not judged (audits: false in the case config)"]
    )
    verdict = overall_verdict(None, inference, performance)
    assert verdict.valid and verdict.not_judged == [
        "inference: contention: not judged (x)",
        "engine: audits: not judged (audits: false in the case config)",
        f"bs 8 offline x1: {DRIFT}",
    ]


def test_summary_md_shows_the_count_and_lists_them():
    assert _verdict_cell(RecordedVerdict(not_judged=("a", "b"))) == "valid, 2 not judged"
    assert _verdict_cell(RecordedVerdict(reasons=("x",))) == "INVALID (1)"
    record = {
        "case": "digits", "framework": "pytorch", "host": "h", "noderank": 0, "status": "success", "failed_step": None,
        "precision": "fp32", "batchsize": 16, "vendor_usage(GiB)": None, "vendor_max_mem(GiB)": None,
        "val_average_acc": 0.9, "infer_average_acc": 0.9,
        "*p_inference_core(qps)": 100.0, "p_inference_whole(qps)": 90.0, "p_validation_core(qps)": 50.0,
        "verdict": {"valid": True, "reasons": [], "not_judged": [f"inference: {DRIFT}"]},
    }  # fmt: skip
    table = markdown_table([SummaryRecord.from_json(record)])
    assert "| valid, 1 not judged |" in table
    assert f"- digits:pytorch on h, not judged (run.py --strict fails on these): inference: {DRIFT}" in table
