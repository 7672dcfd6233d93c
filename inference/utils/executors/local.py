"""MODE local: the pipeline and monitors run as child processes of run.py on this machine.

The primitives of utils/executors/base.py's lifecycle: each child leads its own process
group (a stop reaches DataLoader workers and compiler children), and watches
run.py's pid (common/lifetime.py), so even a SIGKILL to run.py leaves nothing
running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from loguru import logger

from common.errors import HostError
from common.files import sweep_stale_temps
from utils.case_specs import CaseSpec
from utils.executors.base import HostSession

STOP_GRACE_S = 10.0


@dataclass
class ChildProcess:
    """A started monitor or pipeline: the process (its group's leader), where its stderr
    goes (monitors), and the thread copying its output (the pipeline)."""

    process: subprocess.Popen
    err_path: Path | None
    tee: threading.Thread | None = None


class LocalSession(HostSession[ChildProcess]):
    """MODE local's executor: the pipeline and monitors as child processes of run.py."""

    python = sys.executable
    in_container = False
    uses_ssh = False
    runs_here = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()
        self._children: list[ChildProcess] = []
        self._log_dir = Path(".")

    def prepare(self) -> None:
        for spec in self.config.cases:
            if not Path(spec.data_dir).is_dir():
                raise HostError(f"host {self.label}: data dir {spec.data_dir} for {spec.key} does not exist")
        if self.config.clear_caches:
            _drop_page_cache()

    def perf_dir(self) -> str:
        return str(self.config.flagperf_path)

    def data_dir(self, spec: CaseSpec) -> str:
        return str(Path(spec.data_dir).resolve())

    def case_log_dir(self, spec: CaseSpec, local_dir: Path) -> str:
        self._log_dir = local_dir
        return str(local_dir)

    def parent_pid(self) -> int | None:
        return os.getpid()

    def start(
        self, role: str, argv: list[str], spec: CaseSpec, env: dict[str, str], stdout: Path | None
    ) -> ChildProcess:
        child_env = {**os.environ, **env}
        try:
            if stdout is None:
                err_path = self._log_dir / f"{role}.stderr"
                with open(err_path, "wb") as err:
                    process = subprocess.Popen(
                        argv,
                        cwd=self.config.flagperf_path,
                        stdout=subprocess.DEVNULL,
                        stderr=err,
                        env=child_env,
                        start_new_session=True,
                    )
                child = ChildProcess(process, err_path)
            else:
                process = subprocess.Popen(
                    argv,
                    cwd=self.config.flagperf_path,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    env=child_env,
                    start_new_session=True,
                )
                tee = threading.Thread(target=_tee, args=(process.stdout, stdout, self.echo_for(spec)), daemon=True)
                tee.start()
                child = ChildProcess(process, None, tee)
        except OSError as exc:
            raise HostError(
                f"host {self.label}: cannot start {argv[2] if len(argv) > 2 else argv[0]}: {exc.strerror or exc}"
            ) from None
        with self._lock:
            self._children.append(child)
        return child

    def wait(self, handle: ChildProcess, timeout: float) -> int | None:
        try:
            code = handle.process.wait(timeout=timeout) if timeout > 0 else handle.process.poll()
        except subprocess.TimeoutExpired:
            return None
        if code is not None and handle.tee is not None:
            handle.tee.join(timeout=5)
        return code

    def stop(self, handle: ChildProcess) -> None:
        process = handle.process
        for sig, grace in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 5.0)):
            if process.poll() is not None:
                break
            try:
                os.killpg(process.pid, sig)
            except (ProcessLookupError, PermissionError):
                break
            try:
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                continue
        # The group may outlive its leader (a DataLoader worker): make sure it is gone.
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if handle.tee is not None:
            handle.tee.join(timeout=5)
        with self._lock:
            self._children = [c for c in self._children if c is not handle]

    def output_tail(self, handle: ChildProcess) -> str:
        if handle.err_path is None or not handle.err_path.is_file():
            return ""
        lines = handle.err_path.read_text(errors="replace").strip().splitlines()
        return lines[-1].strip() if lines else ""

    def fetch(self, spec: CaseSpec, log_dir: str, local_dir: Path) -> None:
        for err in local_dir.glob("*.stderr"):
            if err.stat().st_size == 0:
                err.unlink()

    def cleanup(self) -> None:
        with self._lock:
            children = list(self._children)
        for child in children:
            self.stop(child)
        sweep_killed_writers(self.label, self.config.flagperf_path / "onnxs")


def sweep_killed_writers(label: str, cache: Path) -> None:
    """A pipeline killed by SIGKILL (which it cannot catch) leaves its ``.NAME.*.tmp`` in the cache
    (onnxs/ and its weights/): once every pipeline of this run is gone, remove such leftovers rather
    than wait for the next run. A live writer's, another run's included, is left alone (its lock)."""
    for directory in (cache, cache / "weights"):
        removed = sweep_stale_temps(directory)
        if removed:
            names = ", ".join(p.name for p in removed[:3]) + (
                f" and {len(removed) - 3} more" if len(removed) > 3 else ""
            )
            logger.info(
                f"host {label}: removed {len(removed)} temporary file(s) left by killed pipelines in {directory}: "
                f"{names}"
            )


def _tee(source, sink_path: Path, echo) -> None:
    with open(sink_path, "ab") as sink:
        for line in iter(source.readline, b""):
            sink.write(line)
            sink.flush()
            if echo is not None:
                echo(line.decode(errors="replace").rstrip("\n"))
    source.close()


def _drop_page_cache() -> None:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError as exc:
        logger.warning(f"CLEAR_CACHES: cannot drop the page cache ({exc.strerror}); run as root to enable it")
