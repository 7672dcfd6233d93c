"""One host's part of a run: the case lifecycle, written once for every executor.

``HostSession.run_case`` is the template every way of running a case follows:

    start monitors -> start the pipeline -> wait (CASE_TIMEOUT, interrupt, host
    lost; once, after MONITOR_STARTUP_S, check the monitors live) -> stop ->
    collect files -> outcome

An executor (``utils/executors/local.py``: child processes on this machine;
``utils/executors/docker.py``: containers on a host reached over SSH) supplies only
primitives: ``prepare`` the host, ``case_log_dir``, ``start`` a process,
``wait`` for it, ``stop`` it, its ``output_tail``, ``fetch`` the files and
``end_case``. The ``run_inference.py`` command line, the monitors' command lines,
the environment children get, and the reading of exit statuses are defined here
once, so the executors cannot drift.
"""

from __future__ import annotations

import json
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Generic, TypeVar

from loguru import logger

from common import layout, lifetime
from common.errors import ConfigError, HostError, one_line
from common.monitor_protocol import DAEMON, SAMPLER, monitor_protocol
from common.record import FAILURE_FILE, RESULT_FILE, CaseResult, RecordError, read_result
from utils.case_specs import CaseSpec
from utils.executors.registry import ExecutorFacts
from utils.host_config import HostConfig

MONITOR_STARTUP_S = 1.0  # a monitor still running this long after its start counts as alive
POLL_S = 0.25  # how often the wait loop looks at abort, deadline and the process
LIFETIME_GRACE_S = 300.0  # children may outlive CASE_TIMEOUT by this much, no more

# The pipeline's own exit statuses (docs/running.md, "Running one case directly").
_PIPELINE_EXIT = {
    1: "unexpected error (see traceback.txt)",
    2: "config error",
    3: "data error",
    4: "engine error",
    6: "storage error",
    130: "interrupted",
}
_SIGNAL_WORDS = {
    signal.SIGKILL: "killed by SIGKILL (out of memory, or killed from outside)",
    signal.SIGSEGV: "segmentation fault (SIGSEGV)",
    signal.SIGABRT: "aborted (SIGABRT)",
    signal.SIGBUS: "bus error (SIGBUS)",
    signal.SIGFPE: "floating-point exception (SIGFPE)",
    signal.SIGILL: "illegal instruction (SIGILL)",
    signal.SIGTERM: "terminated (SIGTERM)",
    signal.SIGHUP: "hung up (SIGHUP)",
    signal.SIGPIPE: "broken pipe (SIGPIPE)",
}


def exit_signal(code: int | None) -> signal.Signals | None:
    """The signal that ended a process: -N from a local wait, 128+N from a shell or Docker."""
    if code is None:
        return None
    number = -code if code < 0 else code - 128 if 128 < code < 128 + 65 and code != 130 else None
    if number is None:
        return None
    try:
        return signal.Signals(number)
    except ValueError:
        return None


def describe_exit(code: int | None, detail: str | None = None) -> str:
    """One phrase for an exit status, the same whichever executor reported it."""
    if code is None:
        return "no exit status (the process could not be waited for)"
    sig = exit_signal(code)
    if sig is not None:
        words = _SIGNAL_WORDS.get(sig, f"killed by {sig.name}")
        if sig == signal.SIGKILL and detail == "oom":
            words = "killed by SIGKILL: out of memory"
        return f"status {code}: {words}"
    return f"status {code}: {_PIPELINE_EXIT.get(code, 'no result.json or failure.json was written')}"


def slug(text: str) -> str:
    """A name safe in paths and container names."""
    return re.sub(r"[^a-zA-Z0-9_.-]+", "-", text).strip("-").lower()


def case_result_dir(run_dir: Path, spec: CaseSpec, host_label: str, noderank: int, repetition: int = 1) -> Path:
    """Where one case's files from one host land: result/run<id>/<case:fw>/<host>_noderank<i>/, and
    ``..._noderank<i>_rep<k>/`` for repetition k > 1 (run.py --repeat, utils/run_plan.py)."""
    return (
        run_dir
        / spec.key
        / (f"{slug(host_label)}_noderank{noderank}" + (f"_rep{repetition}" if repetition > 1 else ""))
    )


@dataclass
class MonitorSpec:
    """How to start one monitor. ``protocol`` (common/monitor_protocol.py) is InferPerf's
    ``sampler`` (``--output FILE --interval S`` until SIGTERM) or FlagPerf's ``daemon``
    (``-o start|stop -l DIR``, run through ``common/daemon_monitor.py``)."""

    name: str  # "sys" or the vendor name
    module: str  # run as `python3 -m MODULE` from inference/
    source: str  # the file, relative to inference/, for messages
    output: str  # file name inside the case log dir
    devices: str | None = None
    protocol: str = SAMPLER

    def argv(self, python: str, log_dir: str, interval: float) -> list[str]:
        if self.protocol == DAEMON:
            return [python, "-m", "common.daemon_monitor", "--script", self.source, "--log-dir", log_dir]
        args = [python, "-m", self.module, "--output", f"{log_dir}/{self.output}", "--interval", str(interval)]
        if self.devices:
            args += ["--devices", self.devices]
        return args


@dataclass
class CaseOutcome:
    case: CaseSpec
    host: str
    noderank: int
    local_dir: Path
    status: str = "failed"  # success | failed | timeout | interrupted
    step: str | None = None
    error: str | None = None
    exit_code: int | None = None
    wall_time_s: float | None = None
    result: CaseResult | None = None  # result.json, parsed once (read_outcome)
    monitors: dict[str, str] = field(default_factory=dict)  # name -> local file

    def fail(self, step: str, error: str, status: str = "failed") -> "CaseOutcome":
        self.status, self.step, self.error = status, step, error
        return self


Handle = TypeVar("Handle")  # what an executor's start() returns: a child process, a container


@dataclass
class Started(Generic[Handle]):
    """Something an executor started: a monitor or the pipeline."""

    role: str  # "case" or "mon-<name>"
    handle: Handle  # the executor's own (ChildProcess, ContainerHandle)
    monitor: MonitorSpec | None = None


class HostSession(ExecutorFacts, Generic[Handle]):
    """Prepare a host once, run cases on it one after another, always clean up.

    The base class of every executor (``HostSession[its handle type]``); ``run_case`` is the
    lifecycle, the methods under "primitives" are what an executor supplies, and the class
    declares the facts run.py and utils/host_config.py ask (``registry.py::ExecutorFacts``)."""

    python = "python3"  # the interpreter on the target

    # ---- on the class: its facts (ExecutorFacts, declared by each executor), and two hooks ----
    @classmethod
    def check_config(cls, config: HostConfig) -> None:
        """Checks of the config that need the world outside (a scheduler) before any host is
        touched; raise ConfigError naming the file and key."""

    @classmethod
    def create(
        cls, config: HostConfig, host_index: int, run_id: str, abort: threading.Event, run_dir: Path
    ) -> HostSession:
        """The session for host ``host_index``; ``run_dir`` is the run's folder here (image build logs)."""
        return cls(config, host_index, run_id, abort)

    def __init__(self, config: HostConfig, host_index: int, run_id: str, abort: threading.Event) -> None:
        self.config = config
        self.host = config.hosts[host_index]
        self.noderank = host_index
        self.run_id = run_id
        self.abort = abort
        self.preflight_step: str | None = None
        self.echo: Callable[[str], None] | None = None  # the pipeline's output on the console (run.py --verbose)

    @property
    def label(self) -> str:
        return self.host.label

    # ---- primitives: each executor supplies these ---------------------------------
    def prepare(self) -> None:
        """Check and set up the host; raise HostError naming the host on failure."""
        raise NotImplementedError

    def perf_dir(self) -> str:
        """inference/ as the started processes see it."""
        raise NotImplementedError

    def data_dir(self, spec: CaseSpec) -> str:
        """The case's data directory as the pipeline sees it."""
        raise NotImplementedError

    def case_log_dir(self, spec: CaseSpec, local_dir: Path) -> str:
        """Create the case's log directory on the target; return it as the processes see it."""
        raise NotImplementedError

    def start(self, role: str, argv: list[str], spec: CaseSpec, env: dict[str, str], stdout: Path | None) -> Handle:
        """Start ``argv`` in inference/ on the target; ``stdout`` (pipeline only) receives its output."""
        raise NotImplementedError

    def wait(self, handle: Handle, timeout: float) -> int | None:
        """The exit status, or None while it still runs after ``timeout`` seconds.
        Raises HostError when the host can no longer be asked (connection lost)."""
        raise NotImplementedError

    def stop(self, handle: Handle) -> None:
        """Stop it (SIGTERM, then SIGKILL after a grace period); never raises."""
        raise NotImplementedError

    def output_tail(self, handle: Handle) -> str:
        """The last line it wrote to stderr, for messages."""
        return ""

    def exit_detail(self, handle: Handle) -> str | None:
        """What the executor knows of why it ended: "oom" (a detail of SIGKILL), or one line
        naming an outside cause (a Slurm job's end), which then leads the outcome's error."""
        return None

    def fetch(self, spec: CaseSpec, log_dir: str, local_dir: Path) -> None:
        """Bring the case's files into ``local_dir`` (nothing to do where they already are)."""

    def end_case(self, spec: CaseSpec | None) -> None:
        """Release what the case used (containers); never raises."""

    def cleanup(self) -> None:
        """Stop and remove everything this session started; safe to call twice, from any thread."""
        raise NotImplementedError

    def interrupt(self) -> None:
        """Stop the running case promptly (Ctrl-C); cleanup() follows."""
        self.cleanup()

    # ---- defined once for every executor ----------------------------------------
    def monitor_specs(self) -> list[MonitorSpec]:
        vendor = self.config.vendor
        specs = [MonitorSpec("sys", "common.sys_monitor", "common/sys_monitor.py", "sys_monitor.jsonl")]
        source = f"docker_images/{vendor}/{vendor}_monitor.py"
        vendor_file = self.config.flagperf_path / source
        if not vendor_file.is_file():
            logger.warning(f"vendor {vendor} has no {source}; device memory will be unknown")
            return specs
        devices = None
        if self.config.visible_device_env:
            import os

            devices = os.environ.get(self.config.visible_device_env)
        try:
            protocol = monitor_protocol(vendor_file, source)
        except ConfigError as exc:  # run.py checks it before any host is touched; a file edited since
            raise HostError(one_line(exc)) from None
        output = f"{vendor}_monitor.log" if protocol == DAEMON else f"{vendor}_monitor.jsonl"
        specs.append(MonitorSpec(vendor, f"docker_images.{vendor}.{vendor}_monitor", source, output, devices, protocol))
        return specs

    def pipeline_argv(self, log_dir: str, spec: CaseSpec) -> list[str]:
        """The run_inference.py command line, the same for every executor."""
        argv = [
            self.python,
            "run_inference.py",
            "--perf_dir",
            self.perf_dir(),
            "--data_dir",
            self.data_dir(spec),
            "--log_dir",
            log_dir,
            "--vendor",
            self.config.vendor,
            "--case",
            spec.case,
            "--framework",
            spec.framework,
            "--log_level",
            self.config.log_level,
        ]
        for item in (*self.config.overrides, *spec.overrides):  # the run's, then this case's own (a model entry's file)
            argv += ["--set", item]
        return argv

    def child_env(self, parent_pid: int | None) -> dict[str, str]:
        """What every started process gets: no bytecode files in the read-only code,
        unbuffered output, and a bounded life (common/lifetime.py)."""
        env = {
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            lifetime.MAX_SECONDS_ENV: f"{self.config.case_timeout + LIFETIME_GRACE_S:.0f}",
        }
        if parent_pid is not None:
            env[lifetime.PARENT_ENV] = str(parent_pid)
        env[layout.HOSTS_ENV] = ",".join(
            host.address for host in self.config.hosts
        )  # a case spanning the hosts (base_allreduce)
        env[layout.NODERANK_ENV] = str(self.noderank)
        env[layout.RUN_ID_ENV] = self.run_id
        return env

    def echo_for(self, spec: CaseSpec) -> Callable[[str], None] | None:
        """The console echo of one case's pipeline lines (prefixed with host and case), or None."""
        if self.echo is None:
            return None
        prefix, echo = f"[{self.label} {spec.key}] ", self.echo
        return lambda line: echo(prefix + line)

    def parent_pid(self) -> int | None:
        """run.py's pid where the started processes are its children (MODE local)."""
        return None

    def run_case(self, spec: CaseSpec, local_dir: Path) -> CaseOutcome:
        outcome = CaseOutcome(spec, self.label, self.noderank, local_dir)
        started_at = time.monotonic()
        local_dir.mkdir(parents=True, exist_ok=True)
        env = self.child_env(self.parent_pid())
        monitors: list[Started[Handle]] = []
        pipeline: Started[Handle] | None = None
        code: int | None = None
        detail: str | None = None
        log_dir: str | None = None
        try:
            log_dir = self.case_log_dir(spec, local_dir)
            for monitor in self.monitor_specs():
                outcome.monitors[monitor.name] = str(local_dir / monitor.output)
                argv = monitor.argv(self.python, log_dir, self.config.monitor_interval)
                monitors.append(
                    Started(f"mon-{monitor.name}", self.start(f"mon-{monitor.name}", argv, spec, env, None), monitor)
                )
            if self.abort.is_set():
                outcome.fail(
                    "interrupted", "run interrupted (SIGINT/SIGTERM) before the pipeline started", "interrupted"
                )
            else:
                # The pipeline starts at once; the monitors' start-up check runs while it
                # imports (MONITOR_STARTUP_S after the monitors started, or when it ends sooner).
                pipeline = Started(
                    "case", self.start("case", self.pipeline_argv(log_dir, spec), spec, env, local_dir / "stdout.log")
                )
                code = self._wait_pipeline(pipeline, outcome, monitors, started_at + MONITOR_STARTUP_S)
                if code not in (None, 0):
                    detail = self.exit_detail(pipeline.handle)  # before end_case releases what it asks about
        except HostError as exc:
            outcome.fail("host", one_line(exc))
        finally:
            if pipeline is not None and code is None:
                self.stop(pipeline.handle)
            for item in monitors:
                self.stop(item.handle)
            if log_dir is not None:
                try:
                    self.fetch(spec, log_dir, local_dir)
                except HostError as exc:
                    logger.warning(one_line(exc))
            self.end_case(spec)
        outcome.exit_code = code
        outcome.wall_time_s = time.monotonic() - started_at
        if pipeline is None or outcome.status in ("timeout", "interrupted") or outcome.step in ("host", "monitors"):
            return _with_pipeline_step(outcome)
        outcome = read_outcome(outcome, code, describe_exit(code, detail))
        if detail and detail != "oom" and outcome.status != "success":
            # The executor knows the cause (a Slurm job's end): it comes first, the pipeline's word after.
            outcome.fail(outcome.step or "pipeline", f"{detail}; the pipeline reported: {outcome.error}")
        return outcome

    def _dead_monitor(self, monitors: list[Started[Handle]]) -> str | None:
        """A monitor that exited within its start-up window breaks the contract; say which file."""
        for item in monitors:
            code = self.wait(item.handle, 0)
            if code is not None:
                detail = self.output_tail(item.handle) or "no output"
                source = item.monitor.source if item.monitor is not None else item.role
                return f"{source} exited at once with status {code}: {detail}"
        return None

    def _wait_pipeline(
        self,
        pipeline: Started[Handle],
        outcome: CaseOutcome,
        monitors: list[Started[Handle]],
        monitors_checked_at: float,
    ) -> int | None:
        """Wait for the pipeline within CASE_TIMEOUT, watching for an interrupt, and check
        once, at ``monitors_checked_at`` or when the pipeline ends sooner, that every
        monitor lives. An interrupt is never read as a monitor's fault."""
        deadline = time.monotonic() + self.config.case_timeout
        checked = False
        while True:
            code = self.wait(pipeline.handle, POLL_S)
            if self.abort.is_set():
                outcome.fail("interrupted", "run interrupted (SIGINT/SIGTERM)", "interrupted")
                return code
            if not checked and (code is not None or time.monotonic() >= monitors_checked_at):
                checked = True
                dead = self._dead_monitor(monitors)
                if dead:
                    outcome.fail("monitors", dead)
                    return code
            if code is not None:
                return code
            if time.monotonic() >= deadline:
                outcome.fail(
                    "timeout",
                    f"case exceeded CASE_TIMEOUT of {self.config.case_timeout:.0f} s and was stopped",
                    "timeout",
                )
                return None


def _with_pipeline_step(outcome: CaseOutcome) -> CaseOutcome:
    """For a stopped case, name the step the pipeline was in (from its failure.json)."""
    failure = _read_json(outcome.local_dir / FAILURE_FILE)
    if outcome.status in ("timeout", "interrupted") and failure.get("step") and outcome.error:
        outcome.error += f" (during step {failure['step']})"
    return outcome


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_outcome(outcome: CaseOutcome, exit_code: int | None, exit_words: str | None = None) -> CaseOutcome:
    """Fill an outcome from the files the pipeline left in its (local) log dir."""
    outcome.exit_code = exit_code
    result_path = outcome.local_dir / RESULT_FILE
    if exit_code == 0 and result_path.is_file():
        try:  # the one place the host parses a result.json (common.record.CaseResult)
            outcome.result = read_result(outcome.local_dir)
            outcome.status, outcome.step, outcome.error = "success", None, None
            return outcome
        except RecordError as exc:
            return outcome.fail("summary", str(exc))
    failure = _read_json(outcome.local_dir / FAILURE_FILE)
    if failure:
        status = "interrupted" if failure.get("exit_code") in (129, 130, 143) else "failed"
        return outcome.fail(failure.get("step") or "unknown", failure.get("error") or "unknown error", status)
    return outcome.fail("pipeline", f"pipeline exited with {exit_words or describe_exit(exit_code)}")
