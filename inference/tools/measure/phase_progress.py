"""PROGRESS lines: how far a measured loop is, for run.py's progress display (utils/run_progress.py).

The measured loops of ``tools/measure/loop.py`` and ``tools/measure/scenarios.py`` say how far
they are, at most every ``INTERVAL_S``, as one line on stdout (beside the
logger's lines, not through it, so container.out.log keeps the pipeline's own)::

    PROGRESS {"phase": "inference", "done": 120, "target": 640, "elapsed_s": 3.1, "eta_s": 12.0}

``target`` and ``eta_s`` come from the loop's own stopping rule (``repeat``
passes, then passes until ``min_query_count`` queries and ``min_duration_s``
are measured, or ``max_duration_s`` passes; a scenario run stops between any
two queries) at the rate so far. The loop hands over the clock reading it has
already taken, so no clock is read and nothing is formatted per query: one
integer comparison per query, one line per interval. A last line with
``eta_s`` 0 ends every phase. Nothing here changes what is measured.
"""

from __future__ import annotations

import json
import math
import sys
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, Unpack

from common.pipeline_lines import PROGRESS_PREFIX as PREFIX  # the line run.py reads

if TYPE_CHECKING:
    from contract.config import CaseView

INTERVAL_S = 0.5
INTERVAL_NS = int(INTERVAL_S * 1e9)


class StopRule(TypedDict):
    """A measured loop's stop rule, as ``estimate`` and ``PhaseProgress`` take it (keywords)."""

    min_queries: int
    min_duration_s: float
    max_duration_s: float
    repeat: NotRequired[int]  # default 0
    per_pass: NotRequired[int | None]  # default None: 1


def estimate(done: int, elapsed_s: float, **rule: Unpack[StopRule]) -> tuple[int | None, float | None]:
    """(queries the loop will have run when it stops, seconds until then) at the rate so far.

    The loop stops at the first pass boundary (``per_pass`` queries a pass; a
    scenario run: 1) where ``repeat`` passes, ``min_queries`` queries and
    ``min_duration_s`` are reached, or the first after ``max_duration_s``.
    (None, None) before the first query.
    """
    if done <= 0 or elapsed_s <= 0:
        return None, None
    min_queries, min_duration_s, max_duration_s = rule["min_queries"], rule["min_duration_s"], rule["max_duration_s"]
    repeat, per_pass = rule.get("repeat", 0), rule.get("per_pass")
    rate = done / elapsed_s
    size = per_pass if per_pass and per_pass > 0 else 1
    passes = max(repeat, -(-min_queries // size), math.ceil(min_duration_s * rate / size), 1)
    cap = max(math.ceil(max_duration_s * rate / size), 1)
    target = max(min(passes, cap), -(-done // size)) * size  # a pass under way is finished
    return target, (target - done) / rate


def _length(loader: Any) -> int | None:
    try:
        return int(len(loader))
    except Exception:  # a generator, an iterable dataset: passes are counted as they end
        return None


class PhaseProgress:
    """One measured loop's reporter. ``due = p.begin(start_ns)`` before the loop;
    per query ``if now_ns >= due: due = p.update(queries_done, now_ns)``;
    ``p.finish(queries, elapsed_s)`` after it."""

    __slots__ = ("phase", "rule", "start_ns")

    def __init__(self, phase: str, **rule: Unpack[StopRule]) -> None:
        self.phase = phase
        self.rule: StopRule = {
            "min_queries": int(rule["min_queries"]),
            "min_duration_s": float(rule["min_duration_s"]),
            "max_duration_s": float(rule["max_duration_s"]),
            "repeat": int(rule.get("repeat", 0)),
            "per_pass": rule.get("per_pass"),
        }
        self.start_ns = 0

    @classmethod
    def for_passes(cls, phase: str, config: CaseView, dataloader: Any) -> "PhaseProgress":
        """The reporter of tools.measure.loop's pass loop, its stop rule read from ``config``."""
        from contract.config.case import setting

        def value(key: str) -> Any:
            return setting(config, key)

        return cls(
            phase,
            min_queries=int(value("min_query_count")),
            min_duration_s=float(value("min_duration_s")),
            max_duration_s=float(value("max_duration_s")),
            repeat=int(value("repeat")),
            per_pass=_length(dataloader),
        )

    def begin(self, start_ns: int) -> int:
        self.start_ns = start_ns
        return start_ns + INTERVAL_NS

    def update(self, done: int, now_ns: int) -> int:
        elapsed = (now_ns - self.start_ns) / 1e9
        target, eta = estimate(done, elapsed, **self.rule)
        emit(self.phase, done, target, elapsed, eta)
        return now_ns + INTERVAL_NS

    def finish(self, done: int, elapsed_s: float) -> None:
        emit(self.phase, done, done, elapsed_s, 0.0)


def emit(phase: str, done: int, target: int | None, elapsed_s: float, eta_s: float | None) -> None:
    """One PROGRESS line on stdout (the pipeline's stdout is what a session streams to run.py),
    not through the logger: container.out.log keeps the pipeline's own lines only."""
    payload = {
        "phase": phase,
        "done": done,
        "target": target,
        "elapsed_s": round(elapsed_s, 2),
        "eta_s": None if eta_s is None else round(eta_s, 1),
    }
    stream = sys.stdout
    try:
        stream.write(PREFIX + json.dumps(payload) + "\n")
        stream.flush()
    except (OSError, ValueError):  # stdout gone (closed pipe): progress is never worth failing a measurement
        pass
