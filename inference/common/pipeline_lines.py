"""The pipeline's console lines that run.py reads: defined once for the writer and the reader.

The container side writes them (``tools/pipeline.py``: the steps; ``tools/measure/phase_progress.py``:
PROGRESS lines); the host side reads them from the output a session streams back
(``utils/run_progress.py``'s live display). Two kinds:

- a step line, inside a log line::

      [3/7 framework_validation] start
      [3/7 framework_validation] done in 1.19 s
      [4/7 onnx_export] skipped (exist_onnx_path is set)

  ``[index/total name] state`` and an optional detail; ``name`` is one of ``STEPS``
  (FlagPerf's seven steps, spec §2.2.3), ``state`` one of ``STEP_STATES``;
- a PROGRESS line: ``PROGRESS_PREFIX`` and one JSON object (phase_progress.py says its keys).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# FlagPerf's in-container steps, in the order they run.
STEPS = (
    "init",
    "dataset_and_model",
    "framework_validation",
    "onnx_export",
    "vendor_compile",
    "engine_inference",
    "summary",
)
STEP_STATES = ("start", "done", "skipped")
PROGRESS_PREFIX = "PROGRESS "

_STEP = re.compile(r"\[(?P<index>\d+)/(?P<total>\d+) (?P<name>\w+)\] (?P<state>" + "|".join(STEP_STATES) + r")\b")


@dataclass(frozen=True)
class StepLine:
    """What one step line says."""

    index: int  # 1-based position in STEPS
    total: int
    name: str
    state: str  # start | done | skipped


def step_line(name: str, state: str, detail: str = "") -> str:
    """The text of a step line (the logger adds its time and level): ``[3/7 name] state detail``."""
    if name not in STEPS or state not in STEP_STATES:
        raise ValueError(
            f"step line for {name!r} {state!r}: the step must be one of STEPS and the state one of STEP_STATES"
        )
    text = f"[{STEPS.index(name) + 1}/{len(STEPS)} {name}] {state}"
    return f"{text} {detail}" if detail else text


def parse_step(text: str) -> StepLine | None:
    """The step line inside ``text`` (a whole log line), or None."""
    match = _STEP.search(text)
    if match is None:
        return None
    return StepLine(int(match["index"]), int(match["total"]), match["name"], match["state"])
