"""run.py compare: bootstrap CIs on raw latencies, a regression gate and one-line bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from common.stats import percentile
from run import main as run_main
from tests.test_report import make_run
from utils.results.compare import Line, bootstrap_ci, compare_runs
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
