"""A finished run folder as history points: each figure ``run.py compare`` decides on, in its series.

A run of cases: every record of ``summary.json`` that succeeded gives its figures
(``utils/results/figures.py::repetition_figures``: core qps and latency percentiles, every
performance row's, an LLM row's TTFT, TPOT and tokens/s, a base-tier case's rows), each the geometric
mean of its repetitions with their t-interval, or one repetition with its window's own interval; a
base-tier case's figures (``baseline.figures``: ``fp32 GEMM FLOP/s``, ``STREAM triad B/s``) in its row
``base tier``.
The series comes from the record's ``result.json``: the host fingerprint of its ``env``
(``utils/results/baselines.py::fingerprint``), the resolved case ``config`` (without the keys that
name this run's own folders), the vendor and the compiler. The software it ran on: the Python
packages, the platform (kernel), the accelerator and its driver, the engine's version, the
container or not, and the project's version and commit.

A serving run (``run.py --endpoint``) gives each load step's figures, read as a record's
(``utils/results/serving_compare.py``), with their repetitions (``--repeat N``); its series is the
endpoint's machine (without the port) and the served model, its config the workload, SLO and API.

``run_entries`` reads one folder: a ``run.py ab`` folder gives its two sides (``-A``, ``-B``). A
folder that is not a finished run raises ``ValueError`` (one line naming it).
"""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Any

from common.record import RecordError
from common.summary_record import SUMMARY_FILE, Summary, SummaryRecord
from utils.history.store import Point, RunEntry, Series, SeriesKey
from utils.results.baselines import fingerprint
from utils.results.decide import across
from utils.results.figures import KINDS, repetition_figures

# Keys of a resolved case config that say how often or where, not what, a run ran: the repetitions,
# and every folder or file path (``*_dir``, ``*_path``): a clone elsewhere runs the same case. A file
# the user chose (``exist_onnx_path``, ``exist_compiler_path``) is kept by its name.
RUN_LOCAL_KEYS = frozenset({"repetitions"})
USER_FILES = frozenset({"exist_onnx_path", "exist_compiler_path", "model_path"})
AB_SIDES = ("A", "B")


@lru_cache(maxsize=4)
def project_version(root: str) -> dict[str, Any]:
    """The project's VERSION and git commit (``+dirty`` with uncommitted changes); None where unknown."""
    here = Path(root)
    out: dict[str, Any] = {"inferperf": None, "commit": None}
    version = here / "common" / "VERSION"
    if version.is_file():
        out["inferperf"] = version.read_text(encoding="utf-8").strip()
    try:
        commit = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()  # fmt: skip
        out["commit"] = commit[:12] + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def config_hash(config: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(hash, the config hashed): the resolved case config without ``RUN_LOCAL_KEYS`` and paths."""
    kept = {
        key: Path(value).name if key in USER_FILES and isinstance(value, str) else value
        for key, value in sorted(config.items())
        if key not in RUN_LOCAL_KEYS and (key in USER_FILES or not key.endswith(("_dir", "_path")))
    }
    text = json.dumps(kept, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16], kept


def software_of(result: dict[str, Any], project: dict[str, Any]) -> dict[str, Any]:
    env, engine = _object(result.get("env")), _object(result.get("engine"))
    accelerator = env.get("accelerator")
    return {
        "packages": env.get("packages") or {},
        "python": env.get("python"),
        "platform": env.get("platform"),
        "driver": accelerator.get("driver") if isinstance(accelerator, dict) else None,
        "engine": engine.get("version"),
        "in_container": env.get("in_container"),
        **project,
    }


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _log_dir(record: SummaryRecord, run_dir: Path) -> Path | None:
    """Where the record's result.json is: its log_dir (the first repetition's), moved with the run folder."""
    dirs = list(record.repetitions.log_dirs) if record.repetitions and record.repetitions.log_dirs else []
    first = dirs[0] if dirs else record.log_dir
    if not first:
        return None
    path = Path(first)
    if (path / "result.json").is_file():
        return path
    for depth in (2, 3):  # the run folder was moved or copied: <run>/<case>/<host>/ (ab: <run>/A/<case>/<host>/)
        moved = run_dir.joinpath(*path.parts[-depth:])
        if (moved / "result.json").is_file():
            return moved
    return None


def _interval(samples: list) -> tuple[float | None, float | None]:
    if len(samples) >= 2:
        _, interval, _ = across(samples)
        return interval if interval else (None, None)
    only = samples[0].interval
    return (only[0], only[1]) if only else (None, None)


def case_points(
    run_dir: Path, started_at: str, run_key: str, report: str | None, project: dict, data: dict[str, Any]
) -> list[Point]:
    """The points of a run of cases (module docstring); ``data``: its summary.json, parsed."""
    summary = Summary.from_json(data, str(run_dir / SUMMARY_FILE))
    out: list[Point] = []
    for record in summary.results:
        if not record.succeeded:
            continue
        log_dir = _log_dir(record, run_dir)
        result = _read_json(log_dir / "result.json") if log_dir else None
        if result is None:
            continue
        config = _object(result.get("config"))
        vendor = record.vendor or summary.vendor or str(config.get("vendor") or "")
        found = fingerprint(result.get("env"), vendor, config.get("device"))
        if found is None:
            continue
        digest, hardware = found
        chash, kept = config_hash(config)
        software = software_of(result, project)
        compiler = record.compiler or str(config.get("compiler") or "none")
        described = {"hardware": hardware, **kept}  # one object for every series of the record
        for (row, figure), samples in repetition_figures(record).items():
            kind = KINDS[figure]
            key = SeriesKey(digest, record.name, row, figure, chash, vendor, compiler)
            series = Series(key, record.host, kind.unit, kind.higher_is_better, described)
            value = math.exp(sum(math.log(s.value) for s in samples) / len(samples))
            low, high = _interval(samples)
            out.append(
                Point(series, started_at, value, low, high, len(samples), all(s.valid for s in samples),
                      software, run_key, report)
            )  # fmt: skip
        for name, unit, value, ci, valid in baseline_figures(record):
            key = SeriesKey(digest, record.name, BASELINE_ROW, name, chash, vendor, compiler)
            series = Series(key, record.host, unit, True, described)
            out.append(Point(series, started_at, value, ci[0] if ci else None, ci[1] if ci else None, 1, valid,
                             software, run_key, report))  # fmt: skip
    return out


BASELINE_ROW = "base tier"


def baseline_figures(record: SummaryRecord) -> list[tuple[str, str, float, tuple[float, float] | None, bool]]:
    """A base-tier case's figures (``baseline.figures``: a GEMM's FLOP/s, STREAM's and a transfer's B/s):
    (name with its unit, unit, value, 95 % interval, valid); higher is better for each."""
    out = []
    for entry in (record.baseline or {}).get("figures") or []:
        if not isinstance(entry, dict):
            continue
        value, unit, name = entry.get("value"), entry.get("unit"), entry.get("name")
        if not (isinstance(value, (int, float)) and value > 0 and math.isfinite(value) and name and unit):
            continue
        ci = entry.get("ci95")
        interval = (float(ci[0]), float(ci[1])) if isinstance(ci, list) and len(ci) == 2 and ci[0] and ci[1] else None
        valid = bool((entry.get("verdict") or {}).get("valid", True))
        out.append((f"{name} {unit}", str(unit), float(value), interval, valid))
    return out


def serving_points(
    run_dir: Path, started_at: str, run_key: str, report: str | None, project: dict, data: dict[str, Any]
) -> list[Point]:
    """The points of a serving run: each load step's figures, with their repetitions (module docstring)."""
    from utils.results.serving_compare import read_serving_run

    run = read_serving_run(run_dir)
    summary = run.summary
    result = _read_json(run_dir / "serving" / "result.json") or _first_repetition_result(summary) or {}
    config = {"served_model": summary.served_model, "api": result.get("api"), "workload": run.workload,
              "slo": summary.slo}  # fmt: skip
    chash, kept = config_hash(config)
    where = hashlib.sha256(json.dumps([_server_host(summary.endpoint), summary.served_model]).encode()).hexdigest()[:16]
    software = {"tokenizer": result.get("tokenizer"), "token_source": result.get("token_source"), **project}
    out = []
    for (row, figure), samples in repetition_figures(run.record).items():
        kind = KINDS[figure]
        key = SeriesKey(where, "serving", row, figure, chash, "serving", summary.served_model)
        series = Series(key, summary.endpoint, kind.unit, kind.higher_is_better, kept)
        value = math.exp(sum(math.log(s.value) for s in samples) / len(samples))
        low, high = _interval(samples)
        out.append(Point(series, started_at, value, low, high, len(samples), all(s.valid for s in samples),
                         software, run_key, report))  # fmt: skip
    return out


def _first_repetition_result(summary: Any) -> dict[str, Any] | None:
    """A repeated serving run's serving/result.json: its first repetition's (each in a folder of its own)."""
    dirs = summary.repetitions.log_dirs if summary.repetitions else []
    return _read_json(Path(dirs[0]) / "serving" / "result.json") if dirs and dirs[0] else None


def _server_host(endpoint: str) -> str:
    """The machine an endpoint names, without its port or scheme: a server restarted on another port
    (a launched one takes a free port) is the same series."""
    from urllib.parse import urlsplit

    try:
        return urlsplit(endpoint).hostname or endpoint
    except ValueError:
        return endpoint


def _started(run_dir: Path, summary: dict[str, Any]) -> str:
    """When the run started: summary.json's ``started_at``, else the run id's time, else the folder's."""
    text = summary.get("started_at")
    if isinstance(text, str) and text:
        return text
    run_id = str(summary.get("run_id") or run_dir.name.removeprefix("run"))
    from datetime import datetime, timezone

    try:
        return datetime.strptime(run_id[:15], "%Y%m%d-%H%M%S").replace(tzinfo=timezone.utc).isoformat()
    except ValueError:
        return datetime.fromtimestamp(run_dir.stat().st_mtime, timezone.utc).isoformat(timespec="seconds")


def run_entries(run_dir: Path, project: dict[str, Any] | None = None) -> list[tuple[RunEntry, list[Point]]]:
    """Every run in ``run_dir`` with its points: one, or a ``run.py ab`` folder's two sides.
    ``ValueError`` (one line naming the folder) for a folder that is not a finished run."""
    run_dir = Path(run_dir).resolve()
    if not (run_dir / SUMMARY_FILE).is_file():
        sides = [run_dir / side for side in AB_SIDES if (run_dir / side / SUMMARY_FILE).is_file()]
        if not sides:
            raise ValueError(f"{run_dir}: no summary.json (not a finished run)")
        return [entry for side in sides for entry in run_entries(side, project)]
    summary = _read_json(run_dir / SUMMARY_FILE)
    if summary is None:
        raise ValueError(f"{run_dir / SUMMARY_FILE}: unreadable or not a JSON object")
    if project is None:
        project = project_version(str(Path(__file__).resolve().parents[2]))
    run_id = str(summary.get("run_id") or run_dir.name.removeprefix("run"))
    side = run_dir.name if run_dir.name in AB_SIDES and not run_id.endswith(f"-{run_dir.name}") else None
    run_key = f"{run_id}-{side}" if side else run_id
    started = _started(run_dir, summary)
    serving = summary.get("kind") == "serving"
    page = run_dir / "report.html"
    if serving and not page.is_file():  # a serving run written without run.py has only its own page
        page = run_dir / "serving" / "report.html"
    report = str(page) if page.is_file() else None
    try:
        points = (serving_points if serving else case_points)(run_dir, started, run_key, report, project, summary)
    except RecordError as exc:
        raise ValueError(str(exc)) from None
    entry = RunEntry(run_key, started, str(run_dir), report, summary.get("mode"))
    return [(entry, points)]
