"""The last six faults of the bad-input sweep (issue 32), each provoked for real:

1. FLAGPERF_LOG_PATH under /proc (a real pseudo file system that root's access() calls writable);
2. the disk filling while run.py writes summary.json (a real tmpfs, filled while run.py is stopped);
3. Ctrl-C while run.py's start-up check imports onnxruntime (a real SIGINT);
4. a data directory that exists but cannot be read (root without CAP_DAC_OVERRIDE, via setpriv);
5. SIGKILL of the pipeline during its ONNX export (run.py sweeps the leftover at its end);
6. a warm cache on a read-only bind mount of onnxs/ (its hits are used; a miss fails naming it).

Each ends in one line naming the culprit, the documented exit status and nothing left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import copy_inference_tree
from tests.infra.run_inference import (
    COMPILE_ONLY,
    FAST,
    SLOW_IMPORT,
    assert_clean_failure,
    deferring_import,
    ended,
    run,
    strict_json,
    temps,
    tmpfs,
)
from tests.infra.run_py import assert_one_config_error, host_yaml, run_py

ROOT = os.geteuid() == 0


def errors(text: str) -> list[str]:
    return [line for line in text.splitlines() if "| ERROR" in line]


@pytest.fixture
def tree(tmp_path) -> Path:
    return copy_inference_tree(tmp_path / "inference")


def start_run_py(perf: Path, config: Path, *extra: str, env: dict | None = None, preexec_fn=None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "run.py", "--config", str(config), *extra],
        cwd=perf,
        env=env,
        preexec_fn=preexec_fn,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


# ---- 1: a log path on /proc ------------------------------------------------------------------------


def test_log_path_under_proc_is_one_config_line_before_any_work(tmp_path, tree):
    if not os.path.isdir("/proc/self"):
        pytest.skip("no /proc here")
    config = host_yaml(tmp_path, tree, FLAGPERF_LOG_PATH="/proc/inferperf")
    proc, cpu = run_py(tree, config)
    assert_one_config_error(
        proc, cpu, tmp_path, "key 'FLAGPERF_LOG_PATH' /proc/inferperf cannot be created: /proc refuses new folders"
    )
    assert not Path("/proc/inferperf").exists()


# ---- 2: the disk fills under summary.json ----------------------------------------------------------


def fill(directory: Path) -> None:
    """Write zeros into ``directory`` until its file system is full (a real ENOSPC)."""
    block = b"\0" * (1 << 20)
    with open(directory / "filler", "wb", buffering=0) as out:
        with contextlib.suppress(OSError):
            while True:
                out.write(block)
        with contextlib.suppress(OSError):
            while True:
                out.write(b"\0" * 512)


def test_disk_full_while_run_py_writes_the_summary(tmp_path, tree, digits_data_dir):
    with tmpfs(tmp_path / "logs", "64m") as logs:
        config = host_yaml(tmp_path, tree, FLAGPERF_LOG_PATH=str(logs), CASES={"digits:pytorch": str(digits_data_dir)})
        proc = start_run_py(tree, config, *FAST)
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:  # the console's log lines
            seen.append(line)
            if "digits:pytorch success" in line:
                proc.send_signal(signal.SIGSTOP)  # before merging: nothing after the case has been written yet
                break
        else:
            proc.wait(timeout=60)
            pytest.fail("the case never succeeded: " + "".join(seen)[-3000:])
        run_dir = next(logs.glob("run*"))
        assert not (run_dir / "summary.json").exists(), "run.py wrote the summary before it could be stopped"
        fill(logs)
        proc.send_signal(signal.SIGCONT)
        out, err = proc.communicate(timeout=120)
        output = "".join(seen) + out + err
        assert proc.returncode == 6, output[-3000:]
        assert "Traceback" not in output and "Logging error" not in output, output[-3000:]
        lines = errors(output)
        assert len(lines) == 1, output[-3000:]
        assert f"no space left on device writing {run_dir / 'summary.json'}: summary not written" in lines[0], lines[0]
        assert not (run_dir / "summary.json").exists() and not (run_dir / "summary.md").exists()
        assert temps(run_dir) == []  # nothing half-written
        (result,) = run_dir.glob("digits:pytorch/*/result.json")  # the case's own result, intact
        assert strict_json(result)["case"] == "digits"


# ---- 3: Ctrl-C during the start-up check's onnxruntime import --------------------------------------


def test_sigint_while_run_py_imports_onnxruntime_exits_130_with_one_line(tmp_path, tree, digits_data_dir):
    """The import held open by an import hook (a hung import): the stop waits IMPORT_GRACE_S for it
    to end, then cuts it short, and the hook turns Ctrl-C into ImportError as pybind11 does."""
    output = sigint_inside_a_hooked_import(tmp_path, tree, digits_data_dir, SLOW_IMPORT)
    assert "Traceback" not in output and "needs the onnxruntime package" not in output, output[-3000:]


def _block_sigalrm() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})


def test_a_launcher_that_blocks_sigalrm_does_not_hold_the_stop_until_the_import_ends(tmp_path, tree, digits_data_dir):
    """run.py inherits its launcher's signal mask. With SIGALRM blocked there, the deferred stop's
    look-again timer never fires: the stop would wait for the 60-s hooked import to end, and ``ended``
    would give up first. The handler unblocks SIGALRM when it is installed."""
    output = sigint_inside_a_hooked_import(tmp_path, tree, digits_data_dir, SLOW_IMPORT, preexec_fn=_block_sigalrm)
    assert "Traceback" not in output, output[-3000:]


def sigint_inside_a_hooked_import(
    tmp_path: Path, tree: Path, data: Path, hook_source: str, preexec_fn=None, **env: str
) -> str:
    """run.py on digits with ``hook_source`` as its sitecustomize (an import hook that writes
    IMPORT_MARKER once onnxruntime's import is under way), SIGINT once it has: its output, after
    checking exit 130, the one interrupted line and no run folder. ``preexec_fn``: run in the child
    before run.py starts (its signal mask, as a launcher leaves it)."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(hook_source)
    marker = tmp_path / "importing"
    pythonpath = f"{hook}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    # PYTHONFAULTHANDLER: a run.py that does not end is made to print every thread's stack (SIGABRT)
    environ = dict(os.environ, PYTHONPATH=pythonpath, IMPORT_MARKER=str(marker), PYTHONFAULTHANDLER="1", **env)
    config = host_yaml(tmp_path, tree, CASES={"digits:pytorch": str(data)})
    proc = start_run_py(tree, config, env=environ, preexec_fn=preexec_fn)
    deadline = time.monotonic() + 120
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert marker.exists(), "run.py never imported onnxruntime"
    proc.send_signal(signal.SIGINT)
    out, err = ended(proc)  # a run.py that prints its line and does not end fails with where it stood
    output = out + err
    assert proc.returncode == 130, output[-3000:]
    assert [line.split("| ERROR   | ")[1] for line in output.splitlines() if line.strip()] == [
        "interrupted by SIGINT during the start-up checks: nothing was run or written"
    ], output[-3000:]
    assert not (tmp_path / "result").exists()
    return output


def test_sigint_inside_an_import_waits_for_its_end_and_exits_130_without_a_traceback(tmp_path, tree, digits_data_dir):
    """SIGINT inside onnxruntime's initialisation, whose C code prints the KeyboardInterrupt's
    traceback: the stop waits for the import to end, then stops with one line."""
    deferred = tmp_path / "deferred"
    output = sigint_inside_a_hooked_import(
        tmp_path, tree, digits_data_dir, deferring_import("onnxruntime"), DEFERRED_MARKER=str(deferred)
    )
    assert deferred.exists(), "the stop was not deferred to the import's end"
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output[-3000:]


def test_sigint_during_the_real_onnxruntime_import(tmp_path, tree, digits_data_dir):
    """No hook: SIGINT as soon as onnxruntime's library is mapped into run.py (the import is under way)."""
    config = host_yaml(tmp_path, tree, CASES={"digits:pytorch": str(digits_data_dir)})
    proc = start_run_py(tree, config)
    maps = Path(f"/proc/{proc.pid}/maps")
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if "onnxruntime" in maps.read_text():
                break
        time.sleep(0.001)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    output = out + err
    assert proc.returncode == 130, output[-3000:]
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output[-3000:]
    assert errors(output) and "interrupted" in errors(output)[0]


# ---- 4: a data directory that cannot be read -------------------------------------------------------


def without_dac_override(argv: list[str]) -> list[str]:
    """``argv`` as root without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH: mode bits bind root too."""
    if not ROOT:
        return argv
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is needed to drop root's DAC capabilities")
    drop = "-dac_override,-dac_read_search"
    return ["setpriv", f"--inh-caps={drop}", f"--bounding-set={drop}", "--", *argv]


def test_unreadable_data_dir_is_a_data_error_exit_3(tmp_path, tree, digits_data_dir):
    data = tmp_path / "data"
    shutil.copytree(digits_data_dir, data)
    data.chmod(0)
    log = tmp_path / "log"
    try:
        argv = [
            sys.executable,
            "run_inference.py",
            "--perf_dir",
            str(tree),
            "--data_dir",
            str(data),
            "--log_dir",
            str(log),
            "--vendor",
            "cpu",
            "--case",
            "digits",
            "--framework",
            "pytorch",
            *FAST,
        ]
        proc = subprocess.run(without_dac_override(argv), cwd=tree, capture_output=True, text=True, timeout=300)
    finally:
        data.chmod(0o755)
    failure = assert_clean_failure(proc, log, 3, f"data_dir {data}: cannot read: Permission denied")
    assert failure["step"] == "init"
    assert "writing" not in failure["error"]


# ---- 5: SIGKILL of the pipeline during the export ----------------------------------------------------


def pipeline_of(run_py_pid: int) -> psutil.Process | None:
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process(run_py_pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if "run_inference.py" in " ".join(child.cmdline()):
                    return child
    return None


def test_sigkill_of_the_pipeline_during_export_leaves_nothing_after_run_py(tmp_path, tree, digits_data_dir):
    onnxs = tree / "onnxs"
    config = host_yaml(tmp_path, tree, CASES={"digits:pytorch": str(digits_data_dir)})
    for _attempt in range(5):
        for old in onnxs.glob("digits_*"):  # cached weights stay: only the export and the compile run again
            old.unlink()
        proc = start_run_py(tree, config, *FAST, *COMPILE_ONLY)
        left: list[str] = []
        while proc.poll() is None and not left:
            left = [n for n in temps(onnxs) if n.startswith(".digits_")] if onnxs.is_dir() else []
            time.sleep(0.001)
        pipeline = pipeline_of(proc.pid) if left else None
        if pipeline is not None:
            pipeline.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=300)
        if pipeline is not None and "killed by SIGKILL" in out + err:
            break
    else:
        pytest.fail("never caught the pipeline writing its export or engine in 5 runs")
    output = out + err
    assert proc.returncode == 1, output[-3000:]
    assert "Traceback" not in output
    assert f"removed 1 temporary file(s) left by killed pipelines in {onnxs}: {left[0]}" in output, output[-3000:]
    assert temps(onnxs) == []
    assert not pipeline.is_running()


# ---- 6: a warm cache on a read-only bind mount ---------------------------------------------------------


@contextlib.contextmanager
def read_only_bind(path: Path):
    """``path`` bind-mounted over itself, read-only (a shared cache); skipped where mounting is impossible."""
    first = subprocess.run(["mount", "--bind", str(path), str(path)], capture_output=True, text=True)
    if first.returncode != 0:
        pytest.skip(f"cannot bind-mount here (needs root and CAP_SYS_ADMIN): {first.stderr.strip()}")
    try:
        ro = subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], capture_output=True, text=True)
        assert ro.returncode == 0, ro.stderr
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_warm_cache_on_a_read_only_mount_is_used_and_a_miss_names_it(tmp_path, tree, digits_data_dir):
    warm = run(tree, digits_data_dir, tmp_path / "warm", *FAST, *COMPILE_ONLY)
    assert warm.returncode == 0, warm.stdout[-3000:] + warm.stderr[-3000:]
    onnxs = tree / "onnxs"
    before = sorted(p.name for p in onnxs.rglob("*"))
    with read_only_bind(onnxs):
        with pytest.raises(OSError):
            (onnxs / "probe").write_text("x")
        hit = run(tree, digits_data_dir, tmp_path / "hit", *FAST)
        assert hit.returncode == 0, hit.stdout[-3000:] + hit.stderr[-3000:]
        assert f"cache directory {onnxs} is read-only: its valid entries are used" in hit.stdout
        record = strict_json(tmp_path / "hit" / "result.json")
        assert {name: entry["status"] for name, entry in record["cache"].items()} == dict.fromkeys(
            record["cache"], "hit"
        ), record["cache"]
        log = tmp_path / "miss"
        miss = run(tree, digits_data_dir, log, *FAST, "--set", "batch_size=8")
        assert_clean_failure(
            miss, log, 6, f"cache directory {onnxs} is read-only and this run must write to it (a cache miss)"
        )
        assert sorted(p.name for p in onnxs.rglob("*")) == before
    assert json.loads((tmp_path / "hit" / "result.json").read_text())["case"] == "digits"
