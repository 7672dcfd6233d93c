"""The results history's decisions: the between-run noise learned from it, the change points, compare
between runs made at different times, ``run.py history`` (its gate and history.html in a real
browser), ``history import`` and ``calibrate``'s bad input. The store's own tests, on SQLite and a
real PostgreSQL, are tests/test_history_store.py; its faults, tests/test_history_faults.py."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from run import main as run_main
from tests.infra.browser import probe_page
from tests.infra.series_runs import ENV, at, write_series_run
from utils.history.changes import changes, robust_spread, software_changes
from utils.history.cli import main as history_main
from utils.history.noise import MIN_POINTS, NoiseModel, pooled
from utils.history.store import Point, Series, SeriesKey
from utils.results import decide as d
from utils.results.compare import main as compare_main

INFERENCE = Path(__file__).resolve().parents[1] / "inference"


def series(figure: str = "core qps", host: str = "h1", case: str = "digits:pytorch") -> Series:
    key = SeriesKey(host, case, "inference", figure, "cfg", "cpu", "onnxruntime")
    return Series(key, host, "samples/s", True)


def points(values, s: Series | None = None, valid=True, software=None) -> list[Point]:
    s = s or series()
    return [
        Point(s, at(k), float(v), n=1, valid=valid, software=software[k] if software else {}, run_key=f"r{k}")
        for k, v in enumerate(values)
    ]


def noisy(n: int, level: float, cv: float, seed: int) -> list[float]:
    return list(level * np.exp(np.random.default_rng(seed).normal(0.0, cv, n)))


# ---- the noise ------------------------------------------------------------------------------------
def test_the_pooled_estimate_sums_squares_within_segments_over_their_degrees_of_freedom():
    # means 0 and 1.1: squares 0.01 + 0 + 0.01 and 0.01 + 0.01; degrees of freedom 2 + 1; a lone point adds none
    assert pooled([[-0.1, 0.0, 0.1], [1.0, 1.2], [5.0]]) == (pytest.approx(0.04), 3)


def test_a_series_needs_12_runs_of_its_own_else_its_hosts_figure_kind_is_pooled_else_none():
    own = series("core qps")
    rich = noisy(MIN_POINTS, 100.0, 0.05, seed=1)
    logs = np.log(rich)
    expected = math.sqrt(float(np.sum((logs - logs.mean()) ** 2)) / (MIN_POINTS - 1))
    row = series("qps")  # another throughput of the same host: 5 runs, too few of its own
    poor = noisy(5, 200.0, 0.05, seed=2)
    latency = series("p99 ms")  # another kind: nothing to pool from
    elsewhere = series("qps", host="h2")  # another host: nothing to pool from
    model = NoiseModel(
        {own: points(rich, own), row: points(poor, row), latency: points(poor, latency),
         elsewhere: points(poor, elsewhere)}
    )  # fmt: skip
    mine = model.of(own)
    assert mine is not None and mine.cv == pytest.approx(expected) and mine.df == MIN_POINTS - 1
    assert mine.source == f"this series, {MIN_POINTS} runs"
    pooled_noise = model.of(row)
    lp = np.log(poor)
    ss = float(np.sum((logs - logs.mean()) ** 2) + np.sum((lp - lp.mean()) ** 2))
    df = MIN_POINTS - 1 + 4
    assert pooled_noise is not None and pooled_noise.df == df and pooled_noise.cv == pytest.approx(math.sqrt(ss / df))
    assert pooled_noise.source == "throughput on this host, 2 series pooled"
    assert model.of(latency) is None and model.of(elsewhere) is None and model.points_of(latency) == 5
    # the runs being compared are left out of what is learned
    assert NoiseModel({own: points(rich, own)}, exclude_runs={"r0"}).of(own) is None


def test_a_step_is_cut_out_of_the_noise_not_counted_in_it():
    before, after = noisy(12, 100.0, 0.02, seed=3), noisy(12, 80.0, 0.02, seed=4)
    s = series()
    noise = NoiseModel({s: points(before + after, s)}).of(s)
    assert noise is not None and noise.df == 22 and noise.cv < 0.035  # one series of 24 would spread ~11 %


def test_decide_between_uses_each_sides_learned_noise_with_its_degrees_of_freedom():
    from scipy.stats import t

    result = d.decide_between([d.Sample(100.0)], [d.Sample(90.0)], True, 0.05, (0.02, 7), (0.02, 7), shared=True)
    half = t.ppf(0.975, 7) * math.sqrt(2 * 0.02**2)
    assert result.ratio == pytest.approx(0.9) and result.df == 7
    assert (result.low, result.high) == (pytest.approx(0.9 * math.exp(-half)), pytest.approx(0.9 * math.exp(half)))
    assert result.verdict == d.WORSE and result.widened
    # two estimates: Welch-Satterthwaite
    other = d.decide_between([d.Sample(100.0)], [d.Sample(90.0)], True, 0.05, (0.02, 7), (0.04, 20))
    assert other.df == pytest.approx((0.02**2 + 0.04**2) ** 2 / (0.02**4 / 7 + 0.04**4 / 20))
    # the same 10 % on a host whose runs spread 8 %: within its noise
    assert d.decide_between([d.Sample(100.0)], [d.Sample(90.0)], True, 0.05, (0.08, 7), (0.08, 7), True).verdict == (
        d.INCONCLUSIVE
    )


# ---- change points --------------------------------------------------------------------------------
def test_a_10_percent_step_on_a_2_percent_series_is_found_where_it_is_with_what_changed():
    values = noisy(30, 100.0, 0.02, seed=5) + noisy(8, 90.0, 0.02, seed=6)
    software = [{"packages": {"onnxruntime": "1.31.1"}}] * 30 + [{"packages": {"onnxruntime": "1.32.0"}}] * 8
    found = changes(points(values, software=software), higher_is_better=True)
    assert len(found) == 1
    step = found[0]
    assert step.index == 30 and step.at == at(30) and step.run_key == "r30" and step.worse
    assert step.low < 0.9 < step.high < 1 and step.ratio == pytest.approx(0.9, abs=0.02)
    assert step.changed == ["onnxruntime 1.31.1 -> 1.32.0"]
    # the same step in a latency is worse when it goes up
    up = changes(points([1 / v for v in values]), higher_is_better=False)
    assert len(up) == 1 and up[0].worse and up[0].ratio > 1


def test_stationary_noise_has_no_change_point_and_invalid_points_take_no_part():
    assert changes(points(noisy(200, 100.0, 0.05, seed=7)), True) == []
    s = series()
    valid = points(noisy(20, 100.0, 0.02, seed=8), s)
    disturbed = [Point(s, at(100 + k), 50.0, valid=False, run_key=f"x{k}") for k in range(5)]
    assert changes(valid + disturbed, True) == []


def test_the_robust_spread_is_the_median_successive_difference_scaled():
    # successive differences 1, 1, 3: median 1; x 1.4826 / sqrt 2
    assert robust_spread([0.0, 1.0, 2.0, 5.0]) == pytest.approx(1.4826 / math.sqrt(2))
    assert software_changes({"packages": {"a": "1"}, "commit": "x"}, {"packages": {"a": "2"}, "commit": "x"}) == [
        "a 1 -> 2"
    ]


# ---- compare between runs made at different times ----------------------------------------------
def _history(tmp_path: Path, values: list[float]) -> Path:
    """``tmp_path/result``: runs of digits at ``values`` samples/s, an hour apart, imported into its history."""
    root = tmp_path / "result"
    for k, qps in enumerate(values):
        write_series_run(root, f"run{k:03d}", qps, at(k))
    assert history_main(["import", str(root), "--history", str(root / "history.sqlite")], INFERENCE) == 0
    return root


def test_compare_learns_the_noise_from_the_history_and_calls_what_it_can(tmp_path, capsys):
    root = _history(tmp_path, noisy(16, 100.0, 0.02, seed=9))
    slower = write_series_run(root, "run900", 70.0, at(50))  # 30 % slower
    same = write_series_run(root, "run901", 100.5, at(51))
    assert compare_main([str(root / "run000"), str(slower)], root) == 1
    out = capsys.readouterr().out
    assert re.search(r"\| inference \| core qps \|.*\| 1/1\* \| \*\*WORSE\*\* \|", out)
    assert "learned from the history" in out and "this series, 15 runs" in out  # the 16 less the one compared
    assert "software changed from A to B" not in out
    upgraded = write_series_run(
        root, "run902", 70.0, at(52), env=dict(ENV, packages={**ENV["packages"], "torch": "2.14.1"})
    )
    assert compare_main([str(root / "run000"), str(upgraded)], root) == 1
    assert "- software changed from A to B: torch 2.13.0+cpu -> 2.14.1" in capsys.readouterr().out
    assert compare_main([str(root / "run000"), str(same)], root) == 0
    data = json.loads((same / "compare_run000.json").read_text())
    assert data["exit_code"] == 0 and data["between_run_cv"] is None
    assert {line["verdict"] for line in data["lines"]} <= {d.NO_CHANGE, d.INCONCLUSIVE}
    core = next(line for line in data["lines"] if line["figure"] == "core qps")
    assert core["verdict"] == d.NO_CHANGE and core["widened"]


def test_compare_with_too_little_history_says_how_many_runs_it_has_and_needs(tmp_path, capsys):
    root = _history(tmp_path, [100.0, 101.0, 99.0, 100.0])
    b = write_series_run(root, "run900", 50.0, at(9))
    assert compare_main([str(root / "run000"), str(b)], root) == 3
    out = capsys.readouterr().out
    assert f"too little history to know its between-run noise (3 of the {MIN_POINTS} runs needed)" in out
    assert "`run.py calibrate`" in out


# ---- run.py history ---------------------------------------------------------------------------------
def test_history_prints_each_series_with_its_change_and_the_check_gates_on_the_worse_direction(tmp_path, capsys):
    root = _history(tmp_path, noisy(20, 100.0, 0.02, seed=10) + noisy(6, 88.0, 0.02, seed=11))
    url = str(root / "history.sqlite")
    capsys.readouterr()
    assert history_main(["--history", url, "--figure", "core qps", "--check"], INFERENCE) == 1
    out = capsys.readouterr().out
    assert "digits:pytorch | inference | core qps (samples/s, higher is better) | cpu/onnxruntime | bench1" in out
    assert re.search(rf"change at {re.escape(at(20))} \(run 020\): x0\.8\d\d \[0\.\d+, 0\.\d+\] worse", out)
    assert "CHECK: digits:pytorch inference core qps (cpu/onnxruntime) on bench1 is worse since" in out
    # latencies went up with it (p50 = 1000 / qps): the gate names them too, and only worse series
    assert history_main(["--history", url, "--check"], INFERENCE) == 1
    assert capsys.readouterr().out.count("CHECK: ") == 3  # core qps, p50 ms, p90 ms
    assert (root / "history.html").is_file()


def test_a_better_step_passes_the_check(tmp_path, capsys):
    root = _history(tmp_path, noisy(20, 100.0, 0.02, seed=12) + noisy(6, 115.0, 0.02, seed=13))
    assert history_main(["--history", str(root / "history.sqlite"), "--check"], INFERENCE) == 0
    out = capsys.readouterr().out
    assert " better;" in out and "check: no series is worse since its newest change point (3 checked)" in out


def test_history_of_an_unknown_case_or_figure_lists_what_exists(tmp_path, capsys):
    root = _history(tmp_path, [100.0, 101.0, 99.0])
    url = str(root / "history.sqlite")
    capsys.readouterr()
    assert history_main(["--history", url, "--case", "resnet50"], INFERENCE) == 2
    assert capsys.readouterr().err == (
        "run.py history: --case 'resnet50' is not in the history (cases: digits:pytorch)\n"
    )
    assert history_main(["--history", url, "--figure", "TTFT p50 ms"], INFERENCE) == 2
    assert capsys.readouterr().err == (
        "run.py history: --figure 'TTFT p50 ms' is not in the history (figures: core qps, p50 ms, p90 ms)\n"
    )
    assert not (root / "history.html").exists()


def test_import_twice_adds_nothing_and_a_partial_folder_is_skipped_by_name(tmp_path, capsys):
    root = _history(tmp_path, [100.0, 101.0, 99.0])
    (root / "run999").mkdir()  # a run killed before its summary
    (root / "run998").mkdir()
    (root / "run998" / "summary.json").write_text("{not json")
    capsys.readouterr()
    assert history_main(["import", str(root), "--history", str(root / "history.sqlite")], INFERENCE) == 0
    out = capsys.readouterr().out
    assert f"skipped {root / 'run999'}: no summary.json (not a finished run)\n" in out
    assert f"skipped {root / 'run998' / 'summary.json'}: unreadable or not a JSON object\n" in out
    assert out.strip().endswith("0 run(s), 0 figure(s) added; 2 folder(s) skipped")


def test_history_html_draws_every_series_offline_and_its_links_resolve(tmp_path, capsys):
    root = _history(tmp_path, noisy(12, 100.0, 0.02, seed=14) + noisy(5, 85.0, 0.02, seed=15))
    write_series_run(root, "run500", 86.0, at(40), report=False)  # a run without report.html: no link
    assert history_main(["import", str(root / "run500"), "--history", str(root / "history.sqlite")], INFERENCE) == 0
    out_page = tmp_path / "pages" / "history.html"
    assert history_main(["--history", str(root / "history.sqlite"), "--out", str(out_page)], INFERENCE) == 0
    text = out_page.read_text(encoding="utf-8")
    assert not re.search(r"<(script|link|img|iframe)[^>]*\b(src|href)=", text)  # nothing to load: all inline
    probe = probe_page(out_page, tmp_path)
    assert {k: probe[k] for k in ("plots", "missing", "errors", "fetched")} == {
        "plots": 3, "missing": [], "errors": [], "fetched": []
    }  # fmt: skip
    links = json.loads(re.search(r"const LINKS=(\[.*?\]);", text).group(1))
    assert len(links) == 18 and links.count(None) == 1
    for link in filter(None, links):
        assert (out_page.parent / link).resolve().is_file(), link
    specs = json.loads(re.search(r"const SPECS=(\[.*?\]);const LINKS", text).group(1))
    shapes = specs[0]["layout"]["shapes"]
    assert len(shapes) == 1 and shapes[0]["x0"] == at(12)  # the change point, where it is


# ---- bad input, one line and exit 2 -------------------------------------------------------------
def test_a_malformed_history_url_in_host_yaml_is_one_line_and_nothing_is_written(tmp_path, capsys):
    config = tmp_path / "host.yaml"
    log = tmp_path / "result"
    config.write_text(yaml.safe_dump({
        "MODE": "local", "VENDOR": "cpu", "FLAGPERF_LOG_PATH": str(log), "HOSTS": ["127.0.0.1"],
        "CASES": {"digits:pytorch": str(tmp_path)}, "HISTORY": "postgresql://bench:hunter2@db/inferperf",
    }))  # fmt: skip
    assert run_main(["--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{config}: key 'HISTORY' holds a password" in err and "hunter2" not in err
    assert not log.exists()
    config.write_text(config.read_text().replace("postgresql://bench:hunter2@db/inferperf", "postgresql://:99999/x"))
    assert run_main(["--config", str(config)]) == 2
    assert "key 'HISTORY'" in capsys.readouterr().err and not log.exists()


def test_calibrate_needs_three_runs(capsys):
    assert run_main(["calibrate", "--runs", "2"]) == 2
    assert capsys.readouterr().err == (
        "run.py calibrate: --runs 2: at least 3 runs are needed to learn a spread (12 give a series its own "
        "estimate: docs/history.md)\n"
    )


def test_history_of_a_missing_store_is_one_line(tmp_path, capsys):
    assert history_main(["--history", str(tmp_path / "none.sqlite")], INFERENCE) == 2
    err = capsys.readouterr().err
    assert err == f"history {tmp_path / 'none.sqlite'}: no such file (no run has been recorded there yet)\n"


def test_the_series_keys_come_from_the_results_env_and_config(tmp_path):
    from utils.history.points import run_entries

    a = write_series_run(tmp_path, "run1", 100.0, at(1))
    moved = dict(ENV, hostname="elsewhere")  # the host's name is not its hardware
    b = write_series_run(tmp_path, "run2", 100.0, at(2), env=moved)
    ((_, pa),), ((_, pb),) = run_entries(a), run_entries(b)
    assert {p.series.key for p in pa} == {p.series.key for p in pb}
    faster = write_series_run(tmp_path, "run3", 100.0, at(3), env=dict(ENV, cpu_model="Test CPU 9500"))
    ((_, pc),) = run_entries(faster)
    assert not {p.series.key for p in pa} & {p.series.key for p in pc}


def test_a_base_tier_cases_figures_land_in_their_own_row_as_rates(tmp_path):
    from utils.history.noise import kind_of
    from utils.history.points import run_entries

    gemm = {"name": "fp32 GEMM", "kind": "compute", "unit": "FLOP/s", "value": 5e11, "ci95": [4.9e11, 5.1e11],
            "verdict": {"valid": True, "reasons": []}}  # fmt: skip
    triad = {"name": "STREAM triad", "kind": "bandwidth", "unit": "B/s", "value": 2e10, "ci95": None,
             "verdict": {"valid": False, "reasons": ["contention"]}}  # fmt: skip
    broken = {"name": "h2d pinned", "unit": "B/s", "value": None}  # not applicable here: no figure
    run = write_series_run(tmp_path, "run1", 100.0, at(1), baseline={"figures": [gemm, triad, broken]})
    ((_, found),) = run_entries(run)
    base = {p.series.key.figure: p for p in found if p.series.key.row == "base tier"}
    assert set(base) == {"fp32 GEMM FLOP/s", "STREAM triad B/s"}
    assert (base["fp32 GEMM FLOP/s"].value, base["fp32 GEMM FLOP/s"].low) == (5e11, 4.9e11)
    assert base["STREAM triad B/s"].low is None and not base["STREAM triad B/s"].valid
    assert all(p.series.higher_is_better for p in base.values())
    assert kind_of("fp32 GEMM FLOP/s") == "FLOP/s" and kind_of("STREAM triad B/s") == "B/s"


def test_a_series_cut_by_a_change_point_into_short_levels_is_not_decided_and_says_why(tmp_path, capsys):
    # 13 runs, the compared one left out: 12, but at two levels of 6 (5 + 5 degrees of freedom, 11 needed)
    root = _history(tmp_path, noisy(7, 100.0, 0.02, seed=16) + noisy(6, 70.0, 0.02, seed=17))
    b = write_series_run(root, "run900", 70.0, at(20))
    assert compare_main([str(root / "run000"), str(b)], root) == 3
    assert (
        "too little history to know its between-run noise (12 runs, cut by a change point into levels with fewer "
        "than the 11 degrees of freedom needed)" in capsys.readouterr().out
    )
