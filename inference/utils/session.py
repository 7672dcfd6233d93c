"""One host's part of a run: the base class shared by local and Docker-over-SSH sessions."""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loguru import logger

from common.record import FAILURE_FILE, RESULT_FILE
from utils.host_config import CaseSpec, HostConfig

# The pipeline's own exit statuses, for runs that die before writing failure.json.
_EXIT_MEANING = {2: "config error", 3: "data error", 4: "engine error", 130: "interrupted", 137: "killed (SIGKILL or out of memory)", 143: "terminated"}


@dataclass
class MonitorSpec:
    name: str          # "sys" or the vendor name
    module: str        # run as `python3 -m MODULE` from inference/
    source: str        # the file, for error messages
    output: str        # file name inside the case log dir
    devices: str | None = None

    def argv(self, python: str, log_dir: str, interval: float) -> list[str]:
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
    status: str = "failed"           # success | failed | timeout | interrupted
    step: str | None = None
    error: str | None = None
    exit_code: int | None = None
    wall_time_s: float | None = None
    result: dict | None = None
    monitors: dict[str, str] = field(default_factory=dict)   # name -> local jsonl path

    def fail(self, step: str, error: str, status: str = "failed") -> "CaseOutcome":
        self.status, self.step, self.error = status, step, error
        return self


class HostSession:
    """Prepare a host once, run cases on it one after another, always clean up."""

    def __init__(self, config: HostConfig, host_index: int, run_id: str, abort: threading.Event) -> None:
        self.config = config
        self.host = config.hosts[host_index]
        self.noderank = host_index
        self.run_id = run_id
        self.abort = abort
        self.preflight_error: str | None = None
        self.preflight_step: str | None = None

    @property
    def label(self) -> str:
        return self.host.label

    def monitor_specs(self) -> list[MonitorSpec]:
        vendor = self.config.vendor
        specs = [MonitorSpec("sys", "common.sys_monitor", "common/sys_monitor.py", "sys_monitor.jsonl")]
        vendor_file = self.config.flagperf_path / "docker_images" / vendor / f"{vendor}_monitor.py"
        if vendor_file.is_file():
            devices = None
            if self.config.visible_device_env:
                import os

                devices = os.environ.get(self.config.visible_device_env)
            specs.append(
                MonitorSpec(vendor, f"docker_images.{vendor}.{vendor}_monitor", f"docker_images/{vendor}/{vendor}_monitor.py", f"{vendor}_monitor.jsonl", devices)
            )
        else:
            logger.warning(f"vendor {vendor} has no docker_images/{vendor}/{vendor}_monitor.py; device memory will be unknown")
        return specs

    def pipeline_argv(self, python: str, perf_dir: str, data_dir: str, log_dir: str, spec: CaseSpec) -> list[str]:
        """The run_inference.py command line, the same for every executor."""
        argv = [
            python, "run_inference.py",
            "--perf_dir", perf_dir,
            "--data_dir", data_dir,
            "--log_dir", log_dir,
            "--vendor", self.config.vendor,
            "--case", spec.case,
            "--framework", spec.framework,
            "--log_level", self.config.log_level,
        ]
        for item in self.config.overrides:
            argv += ["--set", item]
        return argv

    def prepare(self) -> None:
        """Check and set up the host; raise HostError naming the host on failure."""
        raise NotImplementedError

    def run_case(self, spec: CaseSpec, local_dir: Path) -> CaseOutcome:
        raise NotImplementedError

    def cleanup(self) -> None:
        """Stop and remove everything this session started; safe to call twice, from any thread."""
        raise NotImplementedError

    def interrupt(self) -> None:
        """Stop the running case promptly (Ctrl-C); cleanup() follows."""
        self.cleanup()


def read_outcome(outcome: CaseOutcome, exit_code: int | None, started: float) -> CaseOutcome:
    """Fill an outcome from the files the pipeline left in its (local) log dir."""
    outcome.exit_code = exit_code
    outcome.wall_time_s = time.monotonic() - started
    result_path = outcome.local_dir / RESULT_FILE
    failure_path = outcome.local_dir / FAILURE_FILE
    if exit_code == 0 and result_path.is_file():
        try:
            outcome.result = json.loads(result_path.read_text(encoding="utf-8"))
            outcome.status, outcome.step, outcome.error = "success", None, None
            return outcome
        except (OSError, json.JSONDecodeError) as exc:
            return outcome.fail("summary", f"result.json unreadable: {exc}")
    failure: dict[str, Any] = {}
    if failure_path.is_file():
        try:
            failure = json.loads(failure_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            failure = {}
    if outcome.status in ("timeout", "interrupted") and outcome.error:
        # run.py stopped it: that is the cause; the pipeline only reports where it was.
        if failure.get("step"):
            outcome.error += f" (during step {failure['step']})"
        return outcome
    if failure:
        status = "interrupted" if failure.get("exit_code") == 130 else "failed"
        return outcome.fail(failure.get("step") or "unknown", failure.get("error") or "unknown error", status)
    meaning = _EXIT_MEANING.get(exit_code, "no result.json or failure.json was written")
    return outcome.fail("pipeline", f"pipeline exited with status {exit_code}: {meaning}")
