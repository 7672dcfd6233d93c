"""run.py compare on recorded runs: figures matched and decided across repetitions
(utils/results/decide.py), the gate's exit statuses, and one-line bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from common.record import Key
from common.summary_record import SummaryRecord
from run import main as run_main
from utils.results import decide as d
from utils.results.compare import compare_runs
from utils.results.compare import main as compare_cli
from utils.results.compare import main as compare_main
from utils.results.figures import merge_repetitions, record_figures, repetition_figures, row_label


def record(
    qps: float = 100.0,
    p50: float = 10.0,
    width: float = 0.02,
    valid: bool = True,
    case: str = "digits",
    status: str = "success",
    llm=False,
) -> dict:
    """A summary record of one repetition: the inference phase, an offline and a server row, optionally an LLM row."""
    ci = lambda v: [v * (1 - width), v * (1 + width)]  # noqa: E731
    verdict = {"valid": valid, "reasons": [] if valid else ["contention: other processes used 40 %"]}
    rec = {
        "case": case,
        "framework": "pytorch",
        "host": "127.0.0.1",
        "noderank": 0,
        "status": status,
        "failed_step": None if status == "success" else "inference",
        "error": None if status == "success" else "engine crashed",
        "log_dir": "/nowhere",
        "wall_time_s": 10.0,
        Key.INFER_CORE_QPS: qps,
        "ci95": {Key.INFER_CORE_QPS: ci(qps)},
        "latency_ms": {"p50": p50, "p90": p50 * 1.2, "p99": None},
        "latency_ci95": {"p50": ci(p50), "p90": ci(p50 * 1.2)},
        "verdict": verdict if status == "success" else None,
        "MFU": 0.1,
        "performance": [
            {"batch_size": 8, "scenario": "offline", "clients": 1, "target_qps": None, "qps": qps * 2,
             "qps_ci95": ci(qps * 2), "MFU": 0.2, "latency_ms": {"p50": p50, "p90": p50 * 1.1},
             "latency_ci95": {"p50": ci(p50)}, "verdict": verdict},
            {"batch_size": 1, "scenario": "server", "clients": 1, "target_qps": 40.0, "qps": 40.0,
             "latency_ms": {"p50": p50, "p99": p50 * 3}, "latency_ci95": {"p99": ci(p50 * 3)}, "verdict": verdict},
        ],
    }  # fmt: skip
    if llm:
        rec["llm"] = {
            "model": {},
            "server": [],
            "table": [
                {"scenario": "offline", "batch_size": 1, "input_length": 128, "output_length": 64,
                 "ttft_ms": {"p50": p50, "ci95": {"p50": ci(p50)}}, "tpot_ms": {"p50": p50 / 10},
                 "output_tokens_per_s": qps * 3, "output_tokens_per_s_ci95": ci(qps * 3), "verdict": verdict}
            ]
        }  # fmt: skip
    return rec


def write_run(root: Path, name: str, records: list[dict]) -> Path:
    run_dir = root / name
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text(json.dumps({"schema_version": 1, "results": records}))
    return run_dir


def merge_json(records: list[dict]) -> dict:
    """The records (summary.json's JSON) merged as run.py --repeat merges them, as summary.json writes the result."""
    return merge_repetitions([SummaryRecord.from_json(r) for r in records]).to_json()


def repeated(*qps: float, **kw) -> dict:
    """One case run once per value of ``qps``, merged as run.py --repeat merges it (latency the inverse)."""
    return merge_json([record(q, 1000.0 / q, **kw) for q in qps])


def test_record_figures_name_every_figure_with_its_interval_and_validity():
    figures = record_figures(SummaryRecord.from_json(record(llm=True, valid=False)))
    assert set(figures) == {
        ("inference", "core qps"), ("inference", "p50 ms"), ("inference", "p90 ms"),
        ("bs 8 offline x1", "qps"), ("bs 8 offline x1", "p50 ms"), ("bs 8 offline x1", "p90 ms"),
        ("bs 1 server x1 @40", "p50 ms"), ("bs 1 server x1 @40", "p99 ms"),  # a server row: no qps (it is the target's)
        ("llm bs 1 in 128 out 64", "TTFT p50 ms"), ("llm bs 1 in 128 out 64", "TPOT p50 ms"),
        ("llm bs 1 in 128 out 64", "output tokens/s"),
    }  # fmt: skip
    core = figures[("inference", "core qps")]
    assert (core.value, core.interval, core.valid) == (100.0, (98.0, 102.0), False)
    assert figures[("bs 8 offline x1", "p90 ms")].interval is None


def test_repetitions_merge_into_their_geometric_mean_with_every_window_kept():
    merged = repeated(100.0, 121.0)
    mean, interval, _ = d.across([d.Sample(100.0), d.Sample(121.0)])
    assert merged[Key.INFER_CORE_QPS] == pytest.approx(110.0) and merged["ci95"][Key.INFER_CORE_QPS] == pytest.approx(
        list(interval)
    )
    assert merged["MFU"] == pytest.approx(0.1 * 110.0 / 100.0)  # MFU follows the throughput
    row = merged["performance"][0]
    assert row["qps"] == pytest.approx(220.0) and row["latency_ms"]["p50"] == pytest.approx(1000 / 110.0)
    block = merged["repetitions"]
    assert block["count"] == 2
    core = next(f for f in block["figures"] if (f["row"], f["figure"]) == ("inference", "core qps"))
    assert (
        core["values"] == [100.0, 121.0]
        and core["intervals"] == [[98.0, 102.0], [121 * 0.98, 121 * 1.02]]
        and core["higher_is_better"]
    )
    assert [s.value for s in repetition_figures(SummaryRecord.from_json(merged))[("inference", "core qps")]] == [
        100.0,
        121.0,
    ]
    one = SummaryRecord.from_json(record())
    assert merge_repetitions([one]) == one  # one repetition: the record as it was


def test_a_failed_or_invalid_repetition_says_which():
    failed = merge_json([record(), record(status="failed")])
    assert (
        failed["status"] == "failed"
        and failed["error"] == "repetition 2 of 2: engine crashed"
        and failed["verdict"] is None
    )
    invalid = merge_json([record(), record(valid=False)])
    assert invalid["verdict"] == {"valid": False, "reasons": ["repetition 2: contention: other processes used 40 %"]}
    assert repetition_figures(SummaryRecord.from_json(invalid))[("inference", "core qps")][1].valid is False


def test_without_a_history_runs_made_at_different_times_are_not_decided_and_the_remedies_named(tmp_path, capsys):
    a = write_run(tmp_path, "runA", [repeated(100, 102, 98)])
    b = write_run(tmp_path, "runB", [repeated(50, 51, 49)])  # even half the speed: the noise between runs is unknown
    assert compare_main([str(a), str(b)], tmp_path) == 3
    out = capsys.readouterr().out
    data = json.loads((b / "compare_runA.json").read_text())
    assert not data["lines"] and len(data["undecided"]) == 8 and data["between_run_cv"] is None
    assert "Not decided (exit 3 unless a regression):" in out and "No figure decided." in out
    assert "`run.py calibrate`" in out and "`run.py ab`" in out and "--between-run-cv" in out


def test_identical_runs_exit_0_and_write_the_comparison(tmp_path, capsys):
    a = write_run(tmp_path, "runA", [repeated(100, 102, 98)])
    b = write_run(tmp_path, "runB", [repeated(100, 102, 98)])
    assert compare_main([str(a), str(b), "--between-run-cv", "0.165"], tmp_path) == 0
    out = capsys.readouterr().out
    data = json.loads((b / "compare_runA.json").read_text())
    assert (b / "compare_runA.md").read_text() == out.split("written:")[0]
    # runs made at different times: each side widened by the between-run spread, so even identical runs
    # cannot rule out a 5 % change (inconclusive), and the output says why
    assert all(line["ratio"] == pytest.approx(1.0) and line["verdict"] == d.INCONCLUSIVE for line in data["lines"])
    assert all((line["n_a"], line["n_b"], line["widened"]) == (3, 3, True) for line in data["lines"])
    assert "No regression beyond 5%." in out and data["exit_code"] == 0 and not data["problems"]
    assert "runs made at different times" in out and "16.5%" in out and "run.py ab" in out
    # on a machine without between-run noise (--between-run-cv 0) the repetitions alone rule it out
    assert compare_main([str(a), str(b), "--between-run-cv", "0"], tmp_path) == 0
    data = json.loads((b / "compare_runA.json").read_text())
    assert all(line["verdict"] == d.NO_CHANGE and not line["widened"] for line in data["lines"])


def test_a_slower_candidate_is_a_regression_with_its_ratio_and_interval(tmp_path, capsys):
    a = write_run(tmp_path, "runA", [repeated(100, 102, 98, llm=True)])
    b = write_run(tmp_path, "runB", [repeated(80, 81, 79, llm=True)])
    # 20 % slower: within what two runs made at different times differed by on one 2-core machine
    assert compare_main([str(a), str(b), "--between-run-cv", "0.165"], tmp_path) == 0
    assert d.INCONCLUSIVE in capsys.readouterr().out
    # on a machine without between-run noise: a regression
    assert compare_main([str(a), str(b), "--between-run-cv", "0"], tmp_path) == 1
    out = capsys.readouterr().out
    lines = {(line.row, line.figure): line for line in compare_runs(a, b, 5.0, 0.0).lines}
    core = lines[("inference", "core qps")]
    assert core.verdict == d.WORSE and core.ratio == pytest.approx(
        math.exp(sum(map(math.log, (80, 81, 79))) / 3) / 100, rel=1e-3
    )
    assert core.low < core.ratio < core.high < 0.95
    assert lines[("inference", "p50 ms")].verdict == d.WORSE  # latency 25 % higher
    assert lines[("bs 1 server x1 @40", "p99 ms")].verdict == d.WORSE  # a server row's p99 gates
    assert lines[("llm bs 1 in 128 out 64", "output tokens/s")].verdict == d.WORSE  # and an LLM row's tokens/s
    assert lines[("llm bs 1 in 128 out 64", "TTFT p50 ms")].verdict == d.WORSE
    assert "**WORSE**" in out and "regression(s) beyond 5%." in out
    # the same runs at a 30 % threshold: worse, below it
    assert compare_main([str(a), str(b), "--threshold", "30", "--between-run-cv", "0"], tmp_path) == 0
    assert d.WORSE_BELOW in capsys.readouterr().out


def test_one_repetition_a_side_is_widened_and_says_so(tmp_path, capsys):
    a = write_run(tmp_path, "runA", [record(100.0)])
    b = write_run(tmp_path, "runB", [record(80.0)])  # 20 % slower in one window each: within 16.5 % noise
    assert compare_main([str(a), str(b), "--between-run-cv", "0.165"], tmp_path) == 0
    out = capsys.readouterr().out
    assert "runs made at different times" in out and "1/1*" in out and d.INCONCLUSIVE in out
    b2 = write_run(tmp_path, "runC", [record(50.0)])  # 50 %: beyond it
    assert compare_main([str(a), str(b2), "--between-run-cv", "0.165"], tmp_path) == 1
    assert (
        compare_main([str(a), str(b), "--between-run-cv", "0"], tmp_path) == 1
    )  # no between-run term: the windows alone


def test_an_invalid_missing_or_failed_candidate_is_exit_3(tmp_path, capsys):
    def compare_main(argv, tmp):  # the repetitions alone decide here (no between-run term): exits, not noise
        return compare_cli([*argv, "--between-run-cv", "0"], tmp)

    a = write_run(tmp_path, "runA", [repeated(100, 101, 99), repeated(50, 51, 49, case="resnet50")])
    invalid = write_run(
        tmp_path, "invalid", [repeated(100, 101, 99, valid=False), repeated(50, 51, 49, case="resnet50")]
    )
    assert compare_main([str(a), str(invalid)], tmp_path) == 3
    out = capsys.readouterr().out
    assert "not comparable (no detectable change; INVALID in B)" in out and "--allow-invalid judges it anyway" in out
    assert compare_main([str(a), str(invalid), "--allow-invalid"], tmp_path) == 0
    failed = write_run(tmp_path, "failed", [repeated(100, 101, 99), record(case="resnet50", status="failed")])
    assert compare_main([str(a), str(failed)], tmp_path) == 3
    assert "resnet50:pytorch on 127.0.0.1 failed in B at step inference: engine crashed" in capsys.readouterr().out
    dropped = write_run(tmp_path, "dropped", [repeated(100, 101, 99)])
    assert compare_main([str(a), str(dropped)], tmp_path) == 3
    assert "resnet50:pytorch noderank 0 is in A but not in B" in capsys.readouterr().out
    without = [record(q, 1000.0 / q) for q in (100, 101, 99)]
    for rec in without:
        rec["performance"] = rec["performance"][1:]
    no_row = merge_json(without)
    assert (
        compare_main(
            [str(a), str(write_run(tmp_path, "norow", [no_row, repeated(50, 51, 49, case="resnet50")]))], tmp_path
        )
        == 3
    )
    assert (
        f"{row_label(SummaryRecord.from_json(record()).performance[0])} qps is in A but missing in B"
        in capsys.readouterr().out
    )
    # a regression of a valid figure beside an invalid one: the regression's exit
    worse = write_run(tmp_path, "worse", [repeated(70, 71, 69), record(case="resnet50", status="failed")])
    assert compare_main([str(a), str(worse)], tmp_path) == 1


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    good = write_run(tmp_path, "good", [record()])
    other = write_run(tmp_path, "other", [record(case="resnet50")])
    (tmp_path / "empty").mkdir()
    nothing = record()
    nothing.update({Key.INFER_CORE_QPS: None, "latency_ms": {}, "performance": []})
    bare = write_run(tmp_path, "bare", [nothing])
    cases = {
        ("missing", "good"): "not found",
        ("empty", "good"): "has no summary.json",
        ("good", "other"): "share no case",
        ("bare", "good"): "have no figure in common",
    }
    for (a, b), message in cases.items():
        assert compare_main([a, b], tmp_path) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    for option in (["--threshold", "-1"], ["--threshold", "x"], ["--between-run-cv", "2"]):
        assert compare_main(["good", "good", *option], tmp_path) == 2
        err = capsys.readouterr().err
        assert option[0] in err and err.count("\n") == 1, err
    assert not list(good.glob("compare_*")) and bare.is_dir() and other.is_dir()


def test_a_misshapen_summary_is_one_line_naming_the_file_and_key_and_exit_2(tmp_path, capsys):
    good = write_run(tmp_path, "good", [record()])
    no_host, wrong_type, row_without_verdict = record(), record(), record()
    del no_host["host"]
    wrong_type[Key.INFER_CORE_QPS] = "fast"
    del row_without_verdict["performance"][1]["verdict"]
    cases = {
        "no_host": (no_host, "results[1]: no key 'host'"),
        "wrong_type": (wrong_type, "results[1]: key '*p_inference_core(qps)' is not a number"),
        "row": (row_without_verdict, "results[1]: performance[1]: no key 'verdict'"),
    }
    for name, (bad_record, where) in cases.items():
        bad = write_run(tmp_path, name, [record(case="resnet50"), bad_record])
        for argv in ([name, "good"], ["good", name]):
            assert compare_main(argv, tmp_path) == 2
            assert capsys.readouterr().err == f"compare: {bad / 'summary.json'}: {where}\n"
        assert run_main(["compare", str(good), str(bad)]) == 2  # the same through run.py
        assert capsys.readouterr().err.endswith(f"{where}\n")
        assert not list(bad.glob("compare_*"))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "summary.json").write_text("{", encoding="utf-8")
    assert compare_main(["good", "broken"], tmp_path) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"compare: {broken / 'summary.json'}: unreadable") and err.count("\n") == 1
    assert not list(good.glob("compare_*"))


def test_run_py_dispatches_compare(tmp_path, capsys):
    a = write_run(tmp_path, "A", [record()])
    assert run_main(["compare", str(a), str(a), "--between-run-cv", "0"]) == 0
    assert "No regression beyond 5%." in capsys.readouterr().out


def test_the_report_draws_each_figures_repetitions_over_their_geometric_mean():
    from utils.results.report.charts import repetitions_plot

    merged = repeated(100.0, 121.0, valid=True)
    plot = repetitions_plot(SummaryRecord.from_json(merged).repetitions)
    strips, means = plot["data"]
    core = strips["y"].index("inference core qps")
    assert strips["x"][core : core + 2] == [pytest.approx(100 / 110), pytest.approx(121 / 110)]
    assert means["x"][0] == 1.0 and means["error_x"]["array"][0] == pytest.approx(
        merged["ci95"][Key.INFER_CORE_QPS][1] / 110 - 1
    )
    assert "2 repetitions: each figure over its geometric mean" in json.dumps(plot["layout"])
    assert repetitions_plot(None) is None and repetitions_plot(SummaryRecord.from_json(record()).repetitions) is None
