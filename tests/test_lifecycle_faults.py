"""Faults of the host-side case lifecycle, reproduced for real in MODE local: run.py
killed by SIGKILL or hung up, a second Ctrl-C, Ctrl-C in a case's first second, the
pipeline killed from outside, and a FlagPerf-style daemon monitor. Each asserts the
one-line outcome, the exit code and that no process is left."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import copy_inference_tree, local_host_yaml, long_running_tree, run_py, wait_no_processes
from tests.infra.monitors import install_flagperf_monitor


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """inference/ with digits set to run for a very long time (caches persist in this module)."""
    return long_running_tree(tmp_path_factory.mktemp("lifecycle") / "inference")


def host_yaml(tmp_path: Path, perf: Path, data: Path, **overrides) -> Path:
    return local_host_yaml(tmp_path, perf, data, MONITOR_INTERVAL=0.2, **overrides)


def start(perf: Path, config: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "run.py", "--config", str(config)],
        cwd=perf,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(pattern: str, root: Path, timeout: float = 180) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = sorted(root.glob(pattern))
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"{pattern} never appeared under {root}")


def wait_for_measuring(tmp_path: Path) -> Path:
    """The case's log once the pipeline has reached its measured phases."""
    log = wait_for("result/run*/digits:pytorch/*/container.out.log", tmp_path)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not re.search(r"\[[3-7]/7 ", log.read_text(errors="replace")):
        time.sleep(0.2)
    return log


def the_record(tmp_path: Path) -> dict:
    files = sorted((tmp_path / "result").glob("run*/summary.json"))
    assert files, "no summary.json"
    return json.loads(files[-1].read_text())["results"][0]


def test_sigkill_to_run_py_leaves_no_pipeline_or_monitor(tmp_path, tree, digits_data_dir):
    proc = start(tree, host_yaml(tmp_path, tree, digits_data_dir))
    wait_for_measuring(tmp_path)
    assert wait_no_processes(str(tmp_path), timeout=0.1), "the pipeline and monitors should be running now"
    proc.kill()
    proc.communicate(timeout=30)
    # Children watch run.py's pid (common/lifetime.py): all gone within seconds, not at the case's end.
    assert wait_no_processes(str(tmp_path), timeout=20) == []
    failure = json.loads(next((tmp_path / "result").glob("run*/digits:pytorch/*/failure.json")).read_text())
    assert failure["exit_code"] == 143 and "terminated by SIGTERM" in failure["error"]


def test_sighup_to_run_py_stops_everything_and_writes_the_summary(tmp_path, tree, digits_data_dir):
    proc = start(tree, host_yaml(tmp_path, tree, digits_data_dir))
    wait_for_measuring(tmp_path)
    proc.send_signal(signal.SIGHUP)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    record = the_record(tmp_path)
    assert record["status"] == "interrupted" and "Traceback" not in err
    assert wait_no_processes(str(tmp_path)) == []


def test_second_ctrl_c_does_not_cut_the_cleanup_short(tmp_path, tree, digits_data_dir):
    proc = start(tree, host_yaml(tmp_path, tree, digits_data_dir))
    wait_for_measuring(tmp_path)
    lines: list[str] = []
    stopping = threading.Event()

    def read_stderr() -> None:  # the second Ctrl-C waits for run.py's word on the first, not for a time
        for line in proc.stderr:
            lines.append(line)
            if "interrupted: stopping containers and monitors" in line:
                stopping.set()

    readers = [
        threading.Thread(target=read_stderr, daemon=True),
        threading.Thread(target=proc.stdout.read, daemon=True),
    ]
    for reader in readers:
        reader.start()
    proc.send_signal(signal.SIGINT)
    assert stopping.wait(120), "".join(lines)[-2000:]
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=120)
    for reader in readers:
        reader.join(30)
    err = "".join(lines)
    assert proc.returncode == 130, err[-2000:]
    assert "SIGINT again: already stopping" in err and "Traceback" not in err
    assert the_record(tmp_path)["status"] == "interrupted"
    assert (next((tmp_path / "result").glob("run*")) / "summary.md").is_file()
    assert wait_no_processes(str(tmp_path)) == []


def test_ctrl_c_in_the_first_second_is_an_interrupt_not_a_monitor_failure(tmp_path, tree, digits_data_dir):
    proc = start(tree, host_yaml(tmp_path, tree, digits_data_dir))
    wait_for("result/run*/digits:pytorch/*/mon-sys.stderr", tmp_path)  # monitors just started
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    record = the_record(tmp_path)
    assert record["status"] == "interrupted", record
    assert "exited at once" not in (record["error"] or "")
    assert wait_no_processes(str(tmp_path)) == []


def test_pipeline_killed_from_outside_reads_killed_by_sigkill(tmp_path, tree, digits_data_dir):
    proc = start(tree, host_yaml(tmp_path, tree, digits_data_dir))
    wait_for_measuring(tmp_path)
    ps = subprocess.run(
        ["pgrep", "-f", f"run_inference.py --perf_dir {tree}"], capture_output=True, text=True
    ).stdout.split()
    assert ps, "pipeline process not found"
    for pid in ps:
        os.kill(int(pid), signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    record = the_record(tmp_path)
    assert record["failed_step"] == "pipeline"
    assert (
        record["error"] == "pipeline exited with status -9: killed by SIGKILL (out of memory, or killed from outside)"
    )
    assert wait_no_processes(str(tmp_path)) == []


# ---- a FlagPerf-style vendor monitor: a daemon driven by -o start|stop -l DIR ---------------
def test_flagperf_daemon_monitor_runs_unmodified(tmp_path, digits_data_dir):
    perf = copy_inference_tree(tmp_path / "inference")
    install_flagperf_monitor(perf)
    proc = run_py(perf, host_yaml(tmp_path, perf, digits_data_dir), timeout=600)
    assert proc.returncode in (0, 3), proc.stderr[-3000:]
    record = the_record(tmp_path)
    assert record["status"] == "success", record
    log = next((tmp_path / "result").glob("run*/digits:pytorch/*/cpu_monitor.log"))
    used = [float(line.split()[1]) / 1000 for line in log.read_text().splitlines()]
    assert len(used) >= 3
    assert record["vendor_usage(GiB)"] == pytest.approx(max(used)) and record["vendor_max_mem(GiB)"] == 16.0
    assert not list(log.parent.glob("cpu_monitor.pid")), "-o stop was not run"
    assert wait_no_processes(str(tmp_path)) == []
    ps = subprocess.run(["pgrep", "-f", f"-l {tmp_path}"], capture_output=True, text=True).stdout
    assert not ps.strip(), "the daemon outlived the case"
