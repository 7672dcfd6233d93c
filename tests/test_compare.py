"""run.py compare: between-run noise judged on both runs' intervals, the bootstrap for results without them, a regression gate and one-line bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from common.record import Key
from common.stats import percentile
from run import main as run_main
from tests.test_report import make_run
from utils.results.compare import Line, bootstrap_ci, compare_runs, figure_intervals
from utils.results.compare import main as compare_main


def _reference_ci(a, b, q, resamples, seed):
    """The documented algorithm, written out with Python lists and common.stats.percentile."""
    rng = np.random.default_rng(seed)
    ratios = []
    for _ in range(resamples):
        ia = rng.integers(0, len(a), len(a))
        ib = rng.integers(0, len(b), len(b))
        ratios.append(percentile(sorted(b[i] for i in ib), q) / percentile(sorted(a[i] for i in ia), q) - 1.0)
    ratios.sort()
    return percentile(ratios, 2.5), percentile(ratios, 97.5)


def test_bootstrap_ci_matches_the_documented_algorithm_exactly():
    rng = np.random.default_rng(7)
    a = list(rng.lognormal(0.0, 0.3, 301))
    b = list(rng.lognormal(0.1, 0.3, 257))
    got = bootstrap_ci(a, b, lambda x: float(np.percentile(x, 50)), resamples=200, seed=3)
    assert got == pytest.approx(_reference_ci(a, b, 50.0, 200, 3), rel=1e-12, abs=1e-15)
    assert got == bootstrap_ci(a, b, lambda x: float(np.percentile(x, 50)), resamples=200, seed=3)
    assert got != bootstrap_ci(a, b, lambda x: float(np.percentile(x, 50)), resamples=200, seed=4)


def test_bootstrap_ci_of_constant_samples_is_the_exact_ratio():
    low, high = bootstrap_ci([2.0] * 50, [2.5] * 40, lambda x: float(x.mean()), resamples=100)
    assert low == pytest.approx(0.25, abs=1e-12) and high == pytest.approx(0.25, abs=1e-12)


def test_bootstrap_ci_finds_a_real_shift_and_not_a_null_one():
    rng = np.random.default_rng(11)
    a = rng.lognormal(0.0, 0.25, 2000)
    shifted = rng.lognormal(0.0, 0.25, 2000) * 1.10
    same = rng.lognormal(0.0, 0.25, 2000)
    median = lambda x: float(np.median(x))  # noqa: E731
    low, high = bootstrap_ci(a, shifted, median, resamples=300)
    assert 0.0 < low < 0.10 < high < 0.20
    low, high = bootstrap_ci(a, same, median, resamples=300)
    assert low < 0.0 < high


@pytest.mark.parametrize(
    ("a", "b", "higher", "ci", "verdict"),
    [
        (100.0, 90.0, True, (-0.12, -0.08), "REGRESSION"),  # qps -10%, beyond noise
        (100.0, 97.0, True, (-0.05, -0.01), "worse, within threshold"),
        (100.0, 90.0, True, (-0.20, 0.02), "within noise"),
        (1.0, 1.2, False, (0.1, 0.3), "REGRESSION"),  # latency +20%
        (1.0, 0.8, False, (-0.3, -0.1), "better"),
        (1.0, None, False, None, "n/a (missing in a run)"),
        (1.0, 2.0, False, None, "no CI (no raw samples)"),
    ],
)
def test_line_verdicts(a, b, higher, ci, verdict):
    line = Line("c", "h", "r", "f", a, b, higher, ci=ci).judge(threshold=5.0)
    assert line.verdict == verdict


def test_identical_runs_exit_0_and_write_the_comparison(tmp_path, capsys):
    dir_a = make_run(tmp_path, "runA")
    dir_b = make_run(tmp_path, "runB")  # same seed: the same latencies
    assert run_main(["compare", str(dir_a), str(dir_b), "--threshold", "5", "--resamples", "200"]) == 0
    out = capsys.readouterr().out
    assert "No regression beyond 5%." in out and "**REGRESSION**" not in out
    data = json.loads((dir_b / "compare_runA.json").read_text())
    figures = [(line["row"], line["figure"]) for line in data["lines"]]
    assert figures == [("inference", "core qps"), ("inference", "p50 ms"), ("inference", "p90 ms")] + [
        (f"bs {bs} offline x1", f) for bs in (1, 4, 16) for f in ("qps", "p50 ms", "p90 ms")
    ]
    assert all(line["change"] == 0.0 and line["verdict"] == "within noise" for line in data["lines"])
    assert (dir_b / "compare_runA.md").read_text() == out.split("written:")[0]


def test_a_slower_run_is_a_regression_beyond_the_threshold(tmp_path, capsys):
    dir_a = make_run(tmp_path, "runA")
    dir_b = make_run(tmp_path, "runB", scale=1.2, seed=100)  # 20% slower, other random draws
    assert compare_main([str(dir_a), str(dir_b), "--threshold", "5", "--resamples", "200"], tmp_path) == 1
    lines, _ = compare_runs(dir_a, dir_b, 5.0, resamples=200)
    by = {(line.row, line.figure): line for line in lines}
    core = by[("inference", "core qps")]
    assert core.verdict == "REGRESSION" and core.change == pytest.approx(core.b / core.a - 1)
    assert -0.25 < core.change < -0.10 and core.ci[1] < 0
    assert by[("bs 16 offline x1", "p50 ms")].verdict == "REGRESSION"
    # The same runs gated at 40%: worse, but within the threshold.
    assert compare_main([str(dir_a), str(dir_b), "--threshold", "40", "--resamples", "200"], tmp_path) == 0
    assert "worse, within threshold" in capsys.readouterr().out


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    good = make_run(tmp_path, "good")
    other_case = make_run(tmp_path, "other", case="resnet50")
    failed = make_run(tmp_path, "failed", status="failed")
    (tmp_path / "empty").mkdir()
    cases = {
        ("missing", "good"): "not found",
        ("empty", "good"): "has no summary.json",
        ("good", "failed"): "has no successful result",
        ("good", "other"): "share no case",
    }
    for (a, b), message in cases.items():
        assert compare_main([a, b], tmp_path) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    assert good.is_dir() and other_case.is_dir() and failed.is_dir()


def test_figures_a_run_marked_invalid_are_not_comparable_and_never_gate(tmp_path, capsys):
    dir_a = make_run(tmp_path, "runA")
    dir_b = make_run(tmp_path, "runB", scale=1.2, seed=100)  # 20% slower: a regression when valid
    summary_path = dir_b / "summary.json"
    summary = json.loads(summary_path.read_text())
    for record in summary["results"]:
        record["verdict"] = {"valid": False, "reasons": ["inference: contention: other processes used 40%"]}
        for row in record.get("performance") or []:
            row["verdict"] = {"valid": False, "reasons": ["throughput not stable"]}
    summary_path.write_text(json.dumps(summary))
    assert compare_main([str(dir_a), str(dir_b), "--threshold", "5", "--resamples", "200"], tmp_path) == 0
    lines, _ = compare_runs(dir_a, dir_b, 5.0, resamples=200)
    by = {(line.row, line.figure): line for line in lines}
    assert by[("inference", "core qps")].verdict == "not comparable (regression; INVALID in B)"
    assert by[("inference", "core qps")].change < -0.10  # still computed and shown
    assert by[("bs 16 offline x1", "p50 ms")].verdict == "not comparable (regression; INVALID in B)"
    assert by[("bs 4 offline x1", "p50 ms")].verdict == "not comparable (regression; INVALID in A and B)"  # invalid in make_run's A too
    capsys.readouterr()
    # --include-invalid judges them anyway (the old gate).
    assert compare_main([str(dir_a), str(dir_b), "--threshold", "5", "--resamples", "200", "--include-invalid"], tmp_path) == 1
    lines, _ = compare_runs(dir_a, dir_b, 5.0, resamples=200, include_invalid=True)
    assert {(line.row, line.figure): line for line in lines}[("inference", "core qps")].verdict == "REGRESSION"


# --- between-run noise: each figure's own interval in both runs (issue 20, item 8) -----------------


def around(value: float, width: float) -> list[float]:
    return [value * (1 - width), value * (1 + width)]


def with_intervals(run_dir, width: float):
    """Give every figure of a make_run directory its 95% interval, figure x (1 -+ width), where a run
    that measures intervals writes them: result.json's ``ci95``, the inference phase's
    ``latency_ci95``, each row's ``qps_ci95``/``latency_ci95`` (the summary keeps its older copies)."""
    summary = json.loads((run_dir / "summary.json").read_text())
    for record in summary["results"]:
        path = Path(record["log_dir"]) / "result.json"
        result = json.loads(path.read_text())
        result["ci95"] = {Key.INFER_CORE_QPS: around(record[Key.INFER_CORE_QPS], width)}
        result["inference"]["latency_ci95"] = {q: around(record["latency_ms"][q], width) for q in ("p50", "p90")}
        for row in result["performance"]:
            row["qps_ci95"] = around(row["qps"], width)
            row["latency_ci95"] = {q: around(row["latency_ms"][q], width) for q in ("p50", "p90")}
        path.write_text(json.dumps(result))
    return run_dir


def by_figure(lines) -> dict:
    return {(line.row, line.figure): line for line in lines}


@pytest.mark.parametrize(
    ("a", "b", "higher", "interval_a", "interval_b", "verdict"),
    [
        (100.0, 90.0, True, (95.0, 105.0), (85.0, 95.0), "within noise"),  # -10%, the intervals touch: overlap
        (100.0, 90.0, True, (95.0, 105.0), (85.0, 94.99), "REGRESSION"),  # -10%, disjoint
        (100.0, 96.0, True, (99.0, 101.0), (95.0, 97.0), "within noise"),  # disjoint, but -4% is within the 5% threshold
        (100.0, 95.0, True, (99.0, 101.0), (94.0, 96.0), "within noise"),  # exactly the threshold
        (100.0, 120.0, True, (99.0, 101.0), (118.0, 122.0), "better"),
        (1.0, 1.2, False, (0.98, 1.02), (1.18, 1.22), "REGRESSION"),  # latency +20%, disjoint
        (1.0, 0.8, False, (0.98, 1.02), (0.78, 0.82), "better"),
        (1.0, 1.2, False, (0.9, 1.2), (1.1, 1.3), "within noise"),  # latency +20%, overlapping
    ],
)
def test_line_verdicts_on_both_runs_intervals(a, b, higher, interval_a, interval_b, verdict):
    line = Line("c", "h", "r", "f", a, b, higher, interval_a=interval_a, interval_b=interval_b).judge(threshold=5.0)
    assert (line.verdict, line.basis) == (verdict, "intervals")
    # A bootstrap CI is never consulted when both intervals exist.
    assert Line("c", "h", "r", "f", a, b, higher, ci=(0.5, 0.6), interval_a=interval_a, interval_b=interval_b).judge(5.0).verdict == verdict


def test_one_missing_interval_falls_back_to_the_bootstrap():
    line = Line("c", "h", "r", "f", 100.0, 90.0, True, ci=(-0.12, -0.08), interval_a=(99.0, 101.0)).judge(5.0)
    assert (line.verdict, line.basis) == ("REGRESSION", "bootstrap")
    line = Line("c", "h", "r", "f", 100.0, 90.0, True, interval_b=(89.0, 91.0)).judge(5.0)
    assert (line.verdict, line.basis) == ("no CI (no raw samples)", None)
    line = Line("c", "h", "r", "f", 100.0, 80.0, True, interval_a=(99.0, 101.0), interval_b=(79.0, 81.0), invalid_in="B").judge(5.0)
    assert line.verdict == "not comparable (regression; INVALID in B)"


def test_figure_intervals_read_the_summary_first_then_result_json_and_skip_malformed_ones():
    row = {"batch_size": 8, "scenario": "offline", "clients": 1}
    record = {"ci95": {Key.INFER_CORE_QPS: [9.0, 11.0]}, "performance": [dict(row), {**row, "scenario": "single_stream", "qps_ci95": [1, 2]}]}
    result = {
        "ci95": {Key.INFER_CORE_QPS: [1.0, 2.0]},
        "inference": {"core_qps_ci95": [3.0, 4.0], "latency_ci95": {"p50": [0.1, 0.2], "p90": [0.3, float("nan")]}},
        "performance": [
            {**row, "qps_ci95": [7, 8], "latency_ci95": {"p50": [0.5, 0.4], "p90": [True, 2]}},
            {**row, "load_generator": "mlperf", "qps_ci95": [5, 6]},
        ],
    }
    found = figure_intervals(record, result)
    assert found == {
        ("inference", "core qps"): (9.0, 11.0),  # the summary's copy wins
        ("inference", "p50 ms"): (0.1, 0.2),
        ("bs 8 offline x1", "qps"): (7.0, 8.0),  # from result.json, matched by row key (not the mlperf row)
        ("bs 8 single_stream x1", "qps"): (1.0, 2.0),
    }
    assert figure_intervals({}, {"inference": {"core_qps_ci95": [3, 4, 5]}}) == {}
    assert figure_intervals({}, {"inference": {"core_qps_ci95": [3, 4]}}) == {("inference", "core qps"): (3.0, 4.0)}
    assert figure_intervals({}, None) == {}


def test_a_real_slowdown_with_intervals_is_a_regression_judged_on_them(tmp_path, capsys):
    dir_a = with_intervals(make_run(tmp_path, "runA"), 0.02)
    dir_b = with_intervals(make_run(tmp_path, "runB", scale=1.2, seed=100), 0.02)  # 20% slower
    assert compare_main([str(dir_a), str(dir_b), "--resamples", "50"], tmp_path) == 1
    out = capsys.readouterr().out
    lines, notes = compare_runs(dir_a, dir_b, 5.0, resamples=50)
    by = by_figure(lines)
    core = by[("inference", "core qps")]
    assert (core.verdict, core.basis, core.ci) == ("REGRESSION", "intervals", None)
    assert core.interval_a == pytest.approx(tuple(around(core.a, 0.02))) and core.interval_b == pytest.approx(tuple(around(core.b, 0.02)))
    assert by[("bs 16 offline x1", "qps")].verdict == "REGRESSION"
    assert by[("bs 4 offline x1", "qps")].verdict == "not comparable (regression; INVALID in A and B)"
    assert all(line.basis == "intervals" for line in lines) and notes == []
    assert "A ±2.0%, B ±2.0%" in out and "**REGRESSION**" in out


def test_noise_within_both_intervals_is_not_flagged_where_the_bootstrap_would_cry_wolf(tmp_path):
    dir_a = make_run(tmp_path, "runA")
    dir_b = make_run(tmp_path, "runB", scale=1.04, seed=100)  # 4% slower, other draws: figures 2-9% apart, as two runs' noise
    # Without intervals (older results), the bootstrap within each run calls some of it a regression beyond 2%.
    old, notes = compare_runs(dir_a, dir_b, 2.0, resamples=200)
    assert by_figure(old)[("inference", "p50 ms")].verdict == "REGRESSION"
    assert len(notes) == 1 and "without an interval in A and B" in notes[0] and "bootstrap" in notes[0]
    # With each run's intervals (+-6%) they overlap: within noise, exit 0.
    with_intervals(dir_a, 0.06)
    with_intervals(dir_b, 0.06)
    assert compare_main([str(dir_a), str(dir_b), "--threshold", "2", "--resamples", "50"], tmp_path) == 0
    lines, notes = compare_runs(dir_a, dir_b, 2.0, resamples=50)
    assert notes == [] and {line.verdict for line in lines} == {"within noise"}
    # Narrow intervals (+-0.5%) no longer overlap: 6% is beyond a 2% threshold, and every figure is within a 10% one.
    with_intervals(dir_a, 0.005)
    with_intervals(dir_b, 0.005)
    assert by_figure(compare_runs(dir_a, dir_b, 2.0, resamples=50)[0])[("inference", "p50 ms")].verdict == "REGRESSION"
    assert {line.verdict for line in compare_runs(dir_a, dir_b, 10.0, resamples=50)[0]} == {"within noise"}


def test_an_older_run_without_intervals_is_compared_as_before_with_a_note(tmp_path):
    dir_a = make_run(tmp_path, "runA")  # no intervals: a result from before them
    dir_b = with_intervals(make_run(tmp_path, "runB", scale=1.2, seed=100), 0.02)
    lines, notes = compare_runs(dir_a, dir_b, 5.0, resamples=200)
    core = by_figure(lines)[("inference", "core qps")]
    assert (core.verdict, core.basis) == ("REGRESSION", "bootstrap") and core.ci[1] < 0
    assert core.interval_a is None and core.interval_b is not None
    assert len(notes) == 1 and notes[0].startswith("digits:pytorch 10.0.0.1: figures without an interval in A (")
