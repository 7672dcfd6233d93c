"""Fast unit tests of the host-side lifecycle's pure parts (utils/executors/base.py, common/lifetime.py)
and of the layering the README promises (tools/ and utils/ meet only in common/)."""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common import lifetime
from utils.executors.base import CaseOutcome, describe_exit, exit_signal, monitor_style, read_outcome
from utils.host_config import CaseSpec

INFERENCE = Path(__file__).resolve().parents[1] / "inference"


# ---- exit statuses read the same whichever executor reported them ---------------------------
@pytest.mark.parametrize("local, container", [(-9, 137), (-11, 139), (-15, 143), (-6, 134), (-1, 129)])
def test_a_signal_reads_the_same_from_a_local_wait_and_from_docker(local, container):
    assert exit_signal(local) == exit_signal(container) == signal.Signals(-local)
    assert describe_exit(local).split(": ", 1)[1] == describe_exit(container).split(": ", 1)[1]


def test_exit_words():
    assert describe_exit(-9) == "status -9: killed by SIGKILL (out of memory, or killed from outside)"
    assert describe_exit(137, "oom") == "status 137: killed by SIGKILL: out of memory"
    assert describe_exit(139) == "status 139: segmentation fault (SIGSEGV)"
    assert describe_exit(2) == "status 2: config error"
    assert describe_exit(3) == "status 3: data error"
    assert describe_exit(4) == "status 4: engine error"
    assert describe_exit(130) == "status 130: interrupted"  # the pipeline's own code, not "SIGINT"
    assert describe_exit(7) == "status 7: no result.json or failure.json was written"
    assert describe_exit(None).startswith("no exit status")
    assert exit_signal(0) is None and exit_signal(1) is None and exit_signal(128) is None and exit_signal(200) is None


# ---- read_outcome -------------------------------------------------------------------------
def outcome(tmp_path: Path) -> CaseOutcome:
    return CaseOutcome(CaseSpec("digits", "pytorch", "/d"), "h", 0, tmp_path)


def test_read_outcome_success(tmp_path):
    (tmp_path / "result.json").write_text(json.dumps({"status": "success", "vendor": "cpu"}))
    got = read_outcome(outcome(tmp_path), 0)
    assert got.status == "success" and got.result == {"status": "success", "vendor": "cpu"} and got.error is None


def test_read_outcome_prefers_the_pipelines_own_failure_record(tmp_path):
    (tmp_path / "failure.json").write_text(json.dumps({"step": "engine", "error": "boom", "exit_code": 4}))
    got = read_outcome(outcome(tmp_path), 4)
    assert (got.status, got.step, got.error, got.exit_code) == ("failed", "engine", "boom", 4)


def test_read_outcome_interrupted_failure(tmp_path):
    (tmp_path / "failure.json").write_text(json.dumps({"step": "inference", "error": "stopped", "exit_code": 130}))
    assert read_outcome(outcome(tmp_path), 130).status == "interrupted"


def test_read_outcome_without_files_names_the_exit(tmp_path):
    got = read_outcome(outcome(tmp_path), -11, describe_exit(-11))
    assert got.step == "pipeline" and got.error == "pipeline exited with status -11: segmentation fault (SIGSEGV)"


def test_read_outcome_result_on_a_failed_exit_is_not_success(tmp_path):
    (tmp_path / "result.json").write_text("{}")
    assert read_outcome(outcome(tmp_path), 1).status == "failed"


def test_read_outcome_unreadable_result(tmp_path):
    (tmp_path / "result.json").write_text("{not json")
    got = read_outcome(outcome(tmp_path), 0)
    assert got.status == "failed" and got.step == "summary" and "result.json unreadable" in got.error


# ---- monitors -----------------------------------------------------------------------------
def test_monitor_style_detection(tmp_path):
    inferperf = tmp_path / "a.py"
    inferperf.write_text("from common.sampler import monitor_args, run_sampler\n")
    flagperf = tmp_path / "b.py"
    flagperf.write_text("parser.add_argument('-o', choices=['start', 'stop'])\n")
    other = tmp_path / "c.py"
    other.write_text("print('hello')\n")
    assert monitor_style(inferperf) == "sampler"
    assert monitor_style(flagperf) == "daemon"
    assert monitor_style(other) == "sampler"
    assert monitor_style(tmp_path / "missing.py") == "sampler"
    assert monitor_style(INFERENCE / "docker_images" / "cpu" / "cpu_monitor.py") == "sampler"


def test_sampler_refuses_a_busy_loop_interval(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "common.sys_monitor", "--output", str(tmp_path / "s.jsonl"), "--interval", "0.000001"],
        cwd=INFERENCE,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "--interval must be between 0.05 and 60.0 seconds" in proc.stderr
    assert not (tmp_path / "s.jsonl").exists()


def test_monitor_stops_when_its_parent_dies(tmp_path):
    """A monitor whose INFERPERF_PARENT_PID is gone stops within a second or two."""
    parent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    out = tmp_path / "s.jsonl"
    env = {**os.environ, lifetime.PARENT_ENV: str(parent.pid)}
    # The monitor's parent is this test process, not `parent`: getppid() != parent from the start.
    monitor = subprocess.Popen(
        [sys.executable, "-m", "common.sys_monitor", "--output", str(out), "--interval", "0.1"], cwd=INFERENCE, env=env, start_new_session=True
    )
    try:
        assert monitor.wait(timeout=20) == 0
    finally:
        parent.kill()
        monitor.kill()
    assert out.read_text().strip(), "it should have written its samples before stopping"


def test_lifetime_bound_ends_a_monitor(tmp_path):
    out = tmp_path / "s.jsonl"
    env = {**os.environ, lifetime.MAX_SECONDS_ENV: "1"}
    started = time.monotonic()
    monitor = subprocess.Popen(
        [sys.executable, "-m", "common.sys_monitor", "--output", str(out), "--interval", "0.1"], cwd=INFERENCE, env=env, start_new_session=True
    )
    try:
        assert monitor.wait(timeout=30) == 0
    finally:
        monitor.kill()
    assert 1.0 <= time.monotonic() - started < 25


def test_expired_reason():
    now = time.monotonic()
    assert lifetime.expired_reason(now, None, None) is None
    assert lifetime.expired_reason(now, os.getppid(), None) is None
    assert "parent (pid 1) is gone" in lifetime.expired_reason(now, 1, None)
    assert "outlived INFERPERF_MAX_SECONDS=5" in lifetime.expired_reason(now - 6, None, 5.0)
    assert lifetime.expired_reason(now - 4, None, 5.0) is None


def test_lifetime_ignores_nonsense_bounds(monkeypatch):
    for text in ("0", "-3", "abc", "1e12", ""):
        monkeypatch.setenv(lifetime.MAX_SECONDS_ENV, text)
        assert lifetime._max_seconds() is None
    monkeypatch.setenv(lifetime.MAX_SECONDS_ENV, "90")
    assert lifetime._max_seconds() == 90.0


# ---- layering: tools/ (container side) and utils/ (host side) meet only in common/ -----------
def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize(
    "side, forbidden",
    [
        ("tools", {"utils"}),
        ("utils", {"tools", "inference_engine", "benchmarks"}),
        ("common", {"tools", "utils", "inference_engine", "benchmarks", "docker_images"}),
        ("inference_engine", {"utils"}),
        ("benchmarks", {"utils"}),
        ("docker_images", {"utils", "tools"}),
    ],
)
def test_layering(side, forbidden):
    offenders = {
        str(path.relative_to(INFERENCE)): sorted(imported_roots(path) & forbidden)
        for path in (INFERENCE / side).rglob("*.py")
        if imported_roots(path) & forbidden
    }
    assert offenders == {}
