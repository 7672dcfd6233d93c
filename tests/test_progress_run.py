"""Progress on real runs of the digits case: the parser on run_inference.py's own output, and the
console of a non-TTY run.py (CI, pipes): no pipeline line, no warning about the shipped files."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import copy_inference_tree, run_py
from utils.run_progress import RunProgress, parse_line

STEPS = [
    "init",
    "dataset_and_model",
    "framework_validation",
    "onnx_export",
    "vendor_compile",
    "engine_inference",
    "summary",
]


@pytest.fixture(scope="module")
def perf(tmp_path_factory) -> Path:
    return copy_inference_tree(tmp_path_factory.mktemp("progress") / "inference")


@pytest.fixture(scope="module")
def pipeline_stdout(perf, digits_data_dir, tmp_path_factory) -> str:
    log = tmp_path_factory.mktemp("progress_log")
    proc = subprocess.run(
        [
            sys.executable,
            "run_inference.py",
            "--perf_dir",
            str(perf),
            "--data_dir",
            str(digits_data_dir),
            "--log_dir",
            str(log),
            "--vendor",
            "cpu",
            "--case",
            "digits",
            "--framework",
            "pytorch",
        ],
        cwd=perf,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def test_parser_finds_the_seven_steps_and_sane_progress_in_real_output(pipeline_stdout):
    state = RunProgress()
    steps, progress = [], []
    for line in pipeline_stdout.splitlines():
        case, event = state.feed(line)
        if event.kind == "step":
            steps.append(event.step)
        elif event.kind == "progress":
            progress.append(event.progress)
    assert [(i, name, s) for i, _, name, s in steps] == [
        (i + 1, n, s) for i, n in enumerate(STEPS) for s in ("start", "done")
    ]
    assert case.finished and case.step_text == "7/7 summary"
    phases = {p["phase"] for p in progress}
    assert {"validation", "inference", "performance bs=16 offline clients=1"} <= phases
    for phase in phases:
        lines = [p for p in progress if p["phase"] == phase]
        last = lines[-1]
        assert last["done"] == last["target"] > 0 and last["eta_s"] == 0.0, lines
        # A window that drifted is measured once more (docs/measurement.md, "Drift"): its lines start
        # again from elapsed 0. Per window: at most two lines a second of the window, plus its last one.
        windows: list[list[dict]] = []
        for p in lines:
            if not windows or p["elapsed_s"] < windows[-1][-1]["elapsed_s"]:
                windows.append([])
            windows[-1].append(p)
        for window in windows:
            assert len(window) <= 2 * window[-1]["elapsed_s"] + 2, window
        # A measured window runs to at least LoadGen's 64-query floor; validation is its pass over the test
        # split, known from the start (a running line of it shows only where the pass takes over INTERVAL_S).
        for p in lines[:-1]:
            assert 0 < p["done"] <= p["target"] and 0 <= p["eta_s"] <= 600, p
            assert p["target"] == last["target"] if phase == "validation" else p["target"] >= 64, p
        # How near a running line's ETA comes to the real end depends on the machine's speed from second to
        # second: tests/test_progress_units.py checks the ETA's arithmetic on a fake clock instead.
    assert any(p["eta_s"] > 0 for p in progress), "no PROGRESS line with a remaining time"


def host_yaml(tmp_path: Path, perf: Path, data: Path) -> Path:
    path = tmp_path / "host.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "MODE": "local",
                "VENDOR": "cpu",
                "FLAGPERF_PATH": str(perf),
                "FLAGPERF_LOG_PATH": str(tmp_path / "result"),
                "HOSTS": ["127.0.0.1"],
                "CASES": {"digits:pytorch": str(data)},
            }
        )
    )
    return path


@pytest.fixture(scope="module")
def console_run(perf, digits_data_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("progress_run")
    proc = run_py(perf, host_yaml(tmp, perf, digits_data_dir))
    return proc, tmp


def test_non_tty_run_prints_no_pipeline_line_and_one_line_per_case(console_run, perf):
    proc, tmp = console_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    output = proc.stdout + proc.stderr
    for line in output.splitlines():
        assert parse_line(line).kind not in ("step", "progress"), line
        assert not line.startswith("[127.0.0.1 "), line
    log_lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert re.search(r"\| INFO +\| run \S+: 1 case\(s\) x 1 host\(s\), mode local, vendor cpu$", log_lines[0]), (
        log_lines
    )
    assert [l for l in log_lines if "digits:pytorch" in l] == [log_lines[1]]
    assert log_lines[1].endswith("| host 127.0.0.1: digits:pytorch success"), log_lines
    # the rest: at most the one warning about invalid results (this machine is shared), and the history's line
    assert all("result(s) INVALID" in l for l in log_lines[2:-1]), log_lines
    assert re.search(r"\| INFO +\| history: 8 figure\(s\) of 1 run\(s\) added to sqlite:///", log_lines[-1]), log_lines
    assert proc.stdout.startswith("# InferPerf run ") and proc.stdout.rstrip().splitlines()[-1].startswith("report: ")
    shipped = [l for l in output.splitlines() if "WARNING" in l and (str(perf) in l or "configs/" in l)]
    assert shipped == []


def test_the_pipeline_warns_about_no_shipped_file(console_run, perf):
    _, tmp = console_run
    stdout = next((tmp / "result").glob("run*/digits:pytorch/*/stdout.log")).read_text()
    shipped = [l for l in stdout.splitlines() if "| WARNING" in l and str(perf / "configs") in l]
    assert shipped == []
