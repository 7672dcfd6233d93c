"""run.py's console while cases run: each case x host's pipeline step and measured phase.

run.py hands every pipeline line a session echoes (``[<host> <case:framework>] <line>``)
to ``ProgressConsole.echo``, which follows each case x host through the pipeline's
step lines and the measured loops' PROGRESS lines (both defined once in
``common/pipeline_lines.py``; ``tools/measure/phase_progress.py`` says a PROGRESS line's keys:
phase, queries done, the target the loop's stop rule will reach, elapsed and remaining seconds), and draws
them with rich as a live display on a terminal. Off a terminal (CI, pipes) run.py
uses none of this: it prints one line per case and host.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from typing import Any

from loguru import logger

from common.pipeline_lines import PROGRESS_PREFIX, STEPS, parse_step

# ---- reading the pipeline's lines ------------------------------------------------------------
_ECHO = re.compile(r"^\[(?P<host>[^\s\]]+) (?P<case>[^\s\]]+)\] (?P<text>.*)$")
_PROGRESS = re.compile(r"\b" + re.escape(PROGRESS_PREFIX) + r"(?P<json>\{.*\})\s*$")
_LEVEL = re.compile(r"\|\s*(?P<level>WARNING|ERROR|CRITICAL)\s*\|")


@dataclass
class Event:
    """What one pipeline line says. ``kind``: step, progress, warning or line."""

    kind: str
    host: str | None = None
    case: str | None = None
    step: tuple[int, int, str, str] | None = None  # (index, total, name, start|done|skipped)
    progress: dict | None = None
    text: str = ""


def parse_line(line: str) -> Event:
    """One line as a session echoes it (``[host case] ...``) or as the pipeline prints it."""
    host = case = None
    text = line.rstrip("\r\n")
    match = _ECHO.match(text)
    if match:
        host, case, text = match["host"], match["case"], match["text"]
    progress = _PROGRESS.search(text)
    if progress:
        try:
            payload = json.loads(progress["json"])
        except ValueError:
            payload = None
        if isinstance(payload, dict) and isinstance(payload.get("phase"), str):
            return Event("progress", host, case, progress=payload, text=text)
    step = parse_step(text)
    if step:
        return Event("step", host, case, step=(step.index, step.total, step.name, step.state), text=text)
    if _LEVEL.search(text):
        return Event("warning", host, case, text=text)
    return Event("line", host, case, text=text)


@dataclass
class CaseProgress:
    """Where one case x host stands."""

    host: str | None
    case: str | None
    step_index: int = 0
    step_total: int = len(STEPS)
    step_name: str = "starting"
    step_state: str = ""
    phase: str | None = None
    done: int = 0
    target: int | None = None
    elapsed_s: float | None = None
    eta_s: float | None = None
    warnings: int = 0
    finished: bool = False

    @property
    def step_text(self) -> str:
        return f"{self.step_index}/{self.step_total} {self.step_name}" if self.step_index else self.step_name


class RunProgress:
    """The state of every case x host, from their lines."""

    def __init__(self) -> None:
        self.cases: dict[tuple[str | None, str | None], CaseProgress] = {}

    def get(self, host: str | None, case: str | None) -> CaseProgress:
        key = (host, case)
        if key not in self.cases:
            self.cases[key] = CaseProgress(host, case)
        return self.cases[key]

    def feed(self, line: str) -> tuple[CaseProgress, Event]:
        event = parse_line(line)
        state = self.get(event.host, event.case)
        if event.step is not None:  # kind "step"
            index, total, name, status = event.step
            state.step_index, state.step_total, state.step_name, state.step_state = index, total, name, status
            if status == "start":
                state.phase, state.done, state.target, state.elapsed_s, state.eta_s = None, 0, None, None, None
            if status != "start" and index == total:
                state.finished = True
        elif event.progress is not None:  # kind "progress"
            p = event.progress
            state.phase = p["phase"]
            state.done = int(p.get("done") or 0)
            state.target = p.get("target")
            state.elapsed_s, state.eta_s = p.get("elapsed_s"), p.get("eta_s")
        elif event.kind == "warning":
            state.warnings += 1
        return state, event


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


# run.py's own lines this display follows (utils/executors/images.py's image builds, the case outcomes)
_HOST_RUNNING = re.compile(r"^host (?P<host>\S+): running (?P<case>\S+)$")
_HOST_OUTCOME = re.compile(r"^host (?P<host>\S+): (?P<case>\S+:\S+) (?P<status>[a-z_]+)\b")
_IMAGE_BUILD = re.compile(r"^host (?P<host>\S+): building image (?P<tag>\S+)")
_IMAGE_READY = re.compile(r"^host (?P<host>\S+): (?:built|reusing) image ")


class ProgressConsole:
    """A rich live display of every case x host: pipeline step, measured phase, progress, ETA.

    ``echo`` takes the sessions' pipeline lines; ``log`` (a loguru sink, added
    by ``start``) follows run.py's own lines for case outcomes and image builds.
    Finished cases leave the display (run.py logs one line each); it disappears on ``stop``.
    """

    def __init__(self, total: int, console: Any = None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn

        self.lock = threading.Lock()
        self.state = RunProgress()
        self.total = total
        self.finished = 0
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(bar_width=24),
            TextColumn("{task.fields[count]}"),
            TextColumn("{task.fields[eta]}"),
            console=console or Console(),
            transient=True,
            refresh_per_second=4,
        )
        self.overall = self.progress.add_task(self._overall_text(), total=max(total, 1), count="", eta="")
        self.tasks: dict[tuple, Any] = {}
        self.builds: dict[str, Any] = {}
        self._sink_id: int | None = None

    def _overall_text(self) -> str:
        return f"[bold]InferPerf[/bold]: {self.finished}/{self.total} case(s) x host(s) done"

    def start(self) -> "ProgressConsole":
        self.progress.start()
        self._sink_id = logger.add(self.log, level="DEBUG", format="{message}", catch=True)
        return self

    def stop(self) -> None:
        if self._sink_id is not None:
            logger.remove(self._sink_id)
            self._sink_id = None
        self.progress.stop()

    def echo(self, line: str) -> None:
        with self.lock:
            state, event = self.state.feed(line)
            if event.kind in ("step", "progress") and not state.finished:
                self._draw(state)

    def _draw(self, state: CaseProgress) -> None:
        from rich.markup import escape

        key = (state.host, state.case)
        description = f"{escape(str(state.host))} {escape(str(state.case))}  [cyan]{escape(state.step_text)}[/cyan]"
        if state.phase:
            description += f"  {escape(state.phase)}"
        total = state.target if state.phase and state.target else None
        completed = state.done if state.phase else 0
        count = f"{state.done}/{state.target}" if state.phase and state.target else ""
        eta = f"ETA {_duration(state.eta_s)}" if state.phase and state.eta_s is not None else ""
        if key not in self.tasks:
            self.tasks[key] = self.progress.add_task(
                description, total=total, completed=completed, count=count, eta=eta
            )
        else:
            self.progress.update(
                self.tasks[key], description=description, total=total, completed=completed, count=count, eta=eta
            )

    def log(self, message: Any) -> None:
        """loguru sink: run.py's lines about cases and image builds."""
        text = str(message).strip()
        with self.lock:
            match = _HOST_RUNNING.match(text)
            if match:
                self._draw(self.state.get(match["host"], match["case"]))
                return
            match = _HOST_OUTCOME.match(text)
            if match:
                key = (match["host"], match["case"])
                self.state.get(*key).finished = True
                if key in self.tasks:
                    self.progress.remove_task(self.tasks.pop(key))
                self.finished += 1
                self.progress.update(self.overall, completed=self.finished, description=self._overall_text())
                return
            match = _IMAGE_BUILD.match(text)
            if match and match["host"] not in self.builds:
                from rich.markup import escape

                self.builds[match["host"]] = self.progress.add_task(
                    escape(f"{match['host']} building image {match['tag']} (the first time: minutes)"),
                    total=None,
                    count="",
                    eta="",
                )
                return
            match = _IMAGE_READY.match(text)
            if match and match["host"] in self.builds:
                self.progress.remove_task(self.builds.pop(match["host"]))
