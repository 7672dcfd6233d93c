"""MODE local: the pipeline and monitors run as child processes of run.py on this machine."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from loguru import logger

from common.errors import HostError
from utils.session import CaseOutcome, HostSession, MonitorSpec, read_outcome

MONITOR_STARTUP_S = 1.0
STOP_GRACE_S = 10.0


class LocalSession(HostSession):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()
        self._processes: list[subprocess.Popen] = []

    def prepare(self) -> None:
        for spec in self.config.cases:
            data = Path(spec.data_dir)
            if not data.is_dir():
                raise HostError(f"host {self.label}: data dir {spec.data_dir} for {spec.key} does not exist")
        if self.config.clear_caches:
            _drop_page_cache()

    def _spawn(self, argv: list[str], stdout, stderr) -> subprocess.Popen:
        # Own process group, so a stop reaches DataLoader workers and compiler children too.
        process = subprocess.Popen(
            argv, cwd=self.config.flagperf_path, stdout=stdout, stderr=stderr, start_new_session=True
        )
        with self._lock:
            self._processes.append(process)
        return process

    def _start_monitors(self, log_dir: Path) -> list[tuple[MonitorSpec, subprocess.Popen, Path]]:
        started = []
        for spec in self.monitor_specs():
            err_path = log_dir / f"{spec.output}.stderr"
            with open(err_path, "wb") as err:
                process = self._spawn(spec.argv(sys.executable, str(log_dir), self.config.monitor_interval), subprocess.DEVNULL, err)
            started.append((spec, process, err_path))
        return started

    def run_case(self, spec, local_dir: Path) -> CaseOutcome:
        outcome = CaseOutcome(spec, self.label, self.noderank, local_dir)
        started = time.monotonic()
        local_dir.mkdir(parents=True, exist_ok=True)
        monitors = self._start_monitors(local_dir)
        argv = self.pipeline_argv(sys.executable, str(self.config.flagperf_path), str(Path(spec.data_dir).resolve()), str(local_dir), spec)
        with open(local_dir / "stdout.log", "wb") as stdout:
            pipeline = self._spawn(argv, subprocess.PIPE, subprocess.STDOUT)
            tee = threading.Thread(target=_tee, args=(pipeline.stdout, stdout, f"[{self.label} {spec.key}] "), daemon=True)
            tee.start()
            dead = _dead_monitors(monitors, started)
            if dead:
                self._stop(pipeline)
                tee.join(timeout=5)
                self._stop_all([p for _, p, _ in monitors])
                outcome.wall_time_s = time.monotonic() - started
                return outcome.fail("monitors", dead)
            try:
                code = pipeline.wait(timeout=self.config.case_timeout)
            except subprocess.TimeoutExpired:
                outcome.fail("timeout", f"case exceeded CASE_TIMEOUT of {self.config.case_timeout:.0f} s and was stopped", "timeout")
                self._stop(pipeline)
                code = pipeline.returncode
            tee.join(timeout=5)
        self._stop_all([p for _, p, _ in monitors])
        for monitor_spec, _, err_path in monitors:
            outcome.monitors[monitor_spec.name] = str(local_dir / monitor_spec.output)
            if err_path.stat().st_size == 0:
                err_path.unlink()
        if self.abort.is_set() and outcome.status != "timeout":
            outcome.fail("interrupted", "run interrupted (SIGINT/SIGTERM)", "interrupted")
        return read_outcome(outcome, code, started)

    def _stop(self, process: subprocess.Popen) -> None:
        if process.poll() is not None:
            return
        for sig, grace in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                return
            try:
                process.wait(timeout=grace)
                return
            except subprocess.TimeoutExpired:
                continue

    def _stop_all(self, processes: list[subprocess.Popen]) -> None:
        for process in processes:
            self._stop(process)
        with self._lock:
            self._processes = [p for p in self._processes if p.poll() is None]

    def cleanup(self) -> None:
        with self._lock:
            processes = list(self._processes)
        self._stop_all(processes)


def _tee(source, sink, prefix: str) -> None:
    for line in iter(source.readline, b""):
        sink.write(line)
        sink.flush()
        sys.stdout.write(prefix + line.decode(errors="replace"))
        sys.stdout.flush()
    source.close()


def _dead_monitors(monitors, started: float) -> str | None:
    """A monitor that exits at once breaks the contract; say which file."""
    time.sleep(max(0.0, MONITOR_STARTUP_S - (time.monotonic() - started)))
    for spec, process, err_path in monitors:
        if process.poll() is not None:
            lines = err_path.read_text(errors="replace").strip().splitlines()
            detail = lines[-1] if lines else "no output"
            return f"{spec.source} exited at once with status {process.returncode}: {detail}"
    return None


def _drop_page_cache() -> None:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError as exc:
        logger.warning(f"CLEAR_CACHES: cannot drop the page cache ({exc.strerror}); run as root to enable it")
