"""Finished run folders for the results history's tests and bench, written by the project's own code.

:func:`write_case_run` writes what ``run.py`` leaves behind for one digits case on one host: the
case's ``result.json`` (the recorded digits result, tests/result_records.py, with the changes asked
for) in ``<run>/digits:pytorch/127.0.0.1_noderank0/``, then ``summary.json`` and ``summary.md`` by the
host's own path: ``utils.executors.base.read_outcome`` parses the result as the executor does,
``utils.results.summary.summary_records`` makes the record and ``write_summary`` writes the files.
``utils.history.points.run_entries`` then reads the folder as it reads a real run's.

Its figures (``utils/results/figures.py``): ``inference`` core qps, p50/p90/p99 ms, and each
performance row's qps, p50/p90/p99 ms; the recorded result has one row (bs 16), ``extra_rows`` adds
one per batch size (8 figures, and 4 more a row).

The fixture ``store_url`` (import it into a test module) is a new, empty store on each backend in
turn: a SQLite file under the test's tmp_path, then a fresh database of the session's real
PostgreSQL server (tests/infra/postgres.py).
"""

from __future__ import annotations

import copy
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Sequence

import pytest

from common.record import Key
from tests.result_records import performance_row, result_json, write_result

INFERENCE = Path(__file__).resolve().parents[2] / "inference"
CASE_DIR = ("digits:pytorch", "127.0.0.1_noderank0")
STARTED = "2026-12-01T00:00:00+00:00"


def write_case_run(
    root: Path,
    run_id: str,
    *,
    started_at: str = STARTED,
    qps: float | None = None,
    config: dict[str, Any] | None = None,
    env: dict[str, Any] | None = None,
    extra_rows: Sequence[int] = (),
    valid: bool = True,
) -> Path:
    """A finished run folder ``root/run_id`` of the digits case (module docstring); its path.
    ``qps``: the inference core qps (its interval ±2 %); ``config``/``env``: keys of result.json's
    ``config``/``env`` replaced; ``extra_rows``: batch sizes of more performance rows; ``valid``: the
    case's verdict."""
    from utils.case_specs import CaseSpec
    from utils.executors.base import CaseOutcome, read_outcome
    from utils.results.summary import summary_records, write_summary

    run_dir = Path(root) / run_id
    local = run_dir.joinpath(*CASE_DIR)
    local.mkdir(parents=True)
    base = result_json()
    changes: dict[str, Any] = {"config": {**base["config"], "log_dir": str(local), **(config or {})}}
    if qps is not None:
        changes[Key.INFER_CORE_QPS] = qps
        changes["ci95"] = {**base["ci95"], Key.INFER_CORE_QPS: [qps * 0.98, qps * 1.02]}
    if env:
        changes["env"] = {**base["env"], **env}
    if extra_rows:
        changes["performance"] = [*base["performance"], *(performance_row(batch_size=bs) for bs in extra_rows)]
    if not valid:
        changes["verdict"] = {"valid": False, "reasons": ["contention: other processes used 40 %"]}
    write_result(local, copy.deepcopy(changes))
    spec = CaseSpec("digits", "pytorch", "/data")
    outcome = read_outcome(CaseOutcome(spec, "127.0.0.1", 0, local, wall_time_s=1.0), 0)
    records = summary_records([outcome], INFERENCE, "cpu")
    host = SimpleNamespace(
        mode="local", vendor="cpu", hosts=[SimpleNamespace(label="127.0.0.1")], flagperf_path=INFERENCE
    )
    write_summary(run_dir, run_id, host, records, datetime.fromisoformat(started_at))  # type: ignore[arg-type]
    return run_dir


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path) -> str:
    """A new store's URL as ``HISTORY`` resolves it, on each backend (module docstring)."""
    from utils.history.store import resolve_url

    given = str(tmp_path / "history.sqlite") if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    url = resolve_url(given, tmp_path)
    assert url is not None and url.startswith(request.param)
    return url
