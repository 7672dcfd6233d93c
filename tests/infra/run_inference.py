"""run_inference.py in a subprocess for the fault tests: its command and run, its end (with every
thread's stack when it hangs), the one clean failure it must end in, real tmpfs mounts, and the
import hooks that hold an import open for a signal to land inside it."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

FAST = ["--set", "min_duration_s=0", "--set", "min_query_count=1", "--set", "audits=false"]


COMPILE_ONLY = ["--set", "compile_only=true"]


def ended(proc: subprocess.Popen, timeout: float = 60) -> tuple[str, str]:
    """``proc``'s output once it has ended; one that does not end within ``timeout`` is made to print
    every thread's stack (SIGABRT: start it with PYTHONFAULTHANDLER=1), and the test fails with them,
    leaving nothing running (a hung run_inference.py must not outlive its test)."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        pytest.fail(f"{proc.args[1]} did not end within {timeout} s of its signal; its threads:\n{(out + err)[-6000:]}")


def command(
    perf: Path,
    data: Path,
    log: Path,
    *extra: str,
    case: str = "digits",
    vendor: str = "cpu",
    framework: str = "pytorch",
) -> list[str]:
    return [
        sys.executable,
        "run_inference.py",
        "--perf_dir",
        str(perf),
        "--data_dir",
        str(data),
        "--log_dir",
        str(log),
        "--vendor",
        vendor,
        "--case",
        case,
        "--framework",
        framework,
        *extra,
    ]


def run(perf: Path, data: Path, log: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        command(perf, data, log, *extra), cwd=perf, capture_output=True, text=True, timeout=300, env=env
    )


def strict_json(path: Path):
    def refuse(name):
        raise ValueError(f"{path}: non-standard JSON constant {name}")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


def errors(proc) -> list[str]:
    return [line for line in proc.stdout.splitlines() if "| ERROR" in line]


def assert_clean_failure(proc, log: Path, code: int, *needles: str) -> dict:
    """One ERROR line with every needle, the exit status, failure.json, no result, no traceback."""
    output = proc.stdout + proc.stderr
    assert proc.returncode == code, output[-3000:]
    assert "Traceback" not in output and "Logging error" not in output, output[-3000:]
    lines = errors(proc)
    assert len(lines) == 1, output[-3000:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert not (log / "result.json").exists() and not (log / "latencies.npz").exists()
    failure = strict_json(log / "failure.json")
    assert failure["exit_code"] == code and all(n in failure["error"] for n in needles), failure
    return failure


def temps(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp"))


@contextlib.contextmanager
def tmpfs(path: Path, size: str, read_only: bool = False):
    """A real tmpfs at ``path`` (root only); the test is skipped, saying why, where mounting is impossible."""
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (",ro" if read_only else "")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN): {proc.stderr.strip()}")
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


SLOW_IMPORT = '''
import importlib.abc, os, sys, time

class _Slow(importlib.abc.MetaPathFinder):
    """Holds 'import onnxruntime' open, then turns Ctrl-C into ImportError as pybind11's module init does."""
    def find_spec(self, name, path=None, target=None):
        if name != "onnxruntime":
            return None
        sys.meta_path.remove(self)
        open(os.environ["IMPORT_MARKER"], "w").close()
        try:
            time.sleep(60)
        except KeyboardInterrupt:
            raise ImportError("initialization failed")
        return None

sys.meta_path.insert(0, _Slow())
'''


def deferring_import(module: str) -> str:
    """The source of an import hook (a sitecustomize) that holds ``import <module>`` open until the
    process has deferred a stop (its look-again timer is armed: common/stop_signals.py), writing
    DEFERRED_MARKER then, and lets the import go on. Ctrl-C raised inside it is printed and turned
    into ImportError, as an extension's initialisation meets it: pybind11's (onnxruntime's) prints
    it, torch's C++ aborts the process (SIGABRT)."""
    return f"""
import importlib.abc, os, signal, sys, time, traceback

class _Deferring(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != {module!r}:
            return None
        sys.meta_path.remove(self)
        open(os.environ["IMPORT_MARKER"], "w").close()
        try:
            for _ in range(6000):
                if signal.getitimer(signal.ITIMER_REAL)[0] > 0:
                    open(os.environ["DEFERRED_MARKER"], "w").close()
                    break
                time.sleep(0.01)
        except KeyboardInterrupt:
            traceback.print_exc()
            raise ImportError("initialization failed")
        return None

sys.meta_path.insert(0, _Deferring())
"""
