"""Complete result.json records for tests that need one: a real recorded result with top-level keys changed.

The host parses result.json once into ``common.record.CaseResult``, whose ``from_json`` needs the
keys a real run writes (schema_version, vendor, compiler, precision, case, framework, verdict). A
test that cares about a few keys starts from the recorded digits result
(tests/fixtures/golden/results/digits/result.json) and overrides those; every other key is the
real one. FlagPerf's keys ("*p_inference_core(qps)", "e2e_time(second)") are not Python
identifiers: pass them in a dict, ``result_json({Key.INFER_CORE_QPS: 1.0}, flops=2.0)``.
"""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from common.record import RESULT_FILE, CaseResult

BASE_RESULT = Path(__file__).resolve().parent / "fixtures" / "golden" / "results" / "digits" / RESULT_FILE


@lru_cache(maxsize=1)
def _base() -> str:
    return BASE_RESULT.read_text(encoding="utf-8")


def result_json(changes: dict[str, Any] | None = None, /, **overrides: Any) -> dict[str, Any]:
    """A complete result.json dict: the recorded digits result, top-level keys replaced by
    ``changes`` then ``overrides`` (a fresh copy each call: change it freely)."""
    data = json.loads(_base())
    data.update(copy.deepcopy(changes or {}))
    data.update(copy.deepcopy(overrides))
    return data


def performance_row(changes: dict[str, Any] | None = None, /, **overrides: Any) -> dict[str, Any]:
    """A complete performance row (the recorded one: bs 16 offline x1), keys replaced."""
    return {**result_json()["performance"][0], **copy.deepcopy(changes or {}), **copy.deepcopy(overrides)}


def phase_block(phase: str = "inference", changes: dict[str, Any] | None = None, /, **overrides: Any) -> dict[str, Any]:
    """A complete ``validation`` or ``inference`` block (the recorded one), keys replaced."""
    return {**result_json()[phase], **copy.deepcopy(changes or {}), **copy.deepcopy(overrides)}


def case_result(changes: dict[str, Any] | None = None, /, **overrides: Any) -> CaseResult:
    """``result_json(...)`` parsed as the host parses it."""
    return CaseResult.from_json(result_json(changes, **overrides))


def write_result(log_dir: Path, changes: dict[str, Any] | None = None, /, **overrides: Any) -> Path:
    """``result_json(...)`` written as ``log_dir``/result.json; its path."""
    path = Path(log_dir) / RESULT_FILE
    path.write_text(json.dumps(result_json(changes, **overrides)), encoding="utf-8")
    return path
