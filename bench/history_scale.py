"""What does the results history cost at scale? ``run.py history import`` of 10 000 run folders of 20
figures each, ``run.py history`` over them, and the size of history.html at 1 000 points a figure.

    python3 -m bench.history_scale [--runs 10000] [--page-points 1000] [--workdir DIR] [--keep]

Goals (issue 40, item 8), on SQLite: the import and the history command each under 10 s; history.html
with 1 000 points per figure under 3 MB.

What it builds: ``--runs`` synthetic run folders, each a finished run of the digits case with four
performance rows (20 figures: inference core qps, p50/p90/p99 ms, and each row's qps, p50/p90/p99 ms).
The first is written by the host's own summary path (tests/infra/history_runs.py); the others are
copies of it, each with its own run id, start time (an hour apart) and folder, and its throughputs
drawn around a level with a 2 % between-run spread and a 10 % step at 60 % of the series (each row
with a little spread of its own; latencies follow as their inverse), so that the history has its
noise to learn and a change point to find. The store is a new SQLite file in the work folder.

What it times, each as the user runs it (a fresh ``python run.py ...`` process, interpreter start and
imports included, wall clock):

- ``import``: ``run.py history import DIR --history STORE`` of the folder of runs;
- ``history``: ``run.py history --history STORE --out FILE``: the store read, each series' noise and
  change points, the text and history.html;
- ``add_runs``: in this process, ``Store.add_runs`` of the same runs (already read) into another new
  store: the store's own share of the import;
- ``page``: ``run.py history`` over a store of the first ``--page-points`` runs, whose page's size is
  what the 3 MB goal is about.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
INFERENCE = REPO / "inference"
EXTRA_ROWS = (1, 8, 32)  # with the recorded bs 16 row and the inference figures: 20 figures a run
GOAL_S = 10.0
GOAL_PAGE_BYTES = 3_000_000
SPREAD = 0.02  # between-run spread of a run's figure (its log's standard deviation)
STEP = 0.9  # the throughput level after the step, at STEP_AT of the runs
STEP_AT = 0.6

for path in (str(INFERENCE), str(REPO)):
    if path not in sys.path:
        sys.path.insert(0, path)


def _iso(hour: int) -> str:
    from datetime import datetime, timedelta, timezone

    return (datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(hours=hour)).isoformat(timespec="seconds")


def write_runs(root: Path, count: int, seed: int = 0) -> list[Path]:
    """``count`` run folders under ``root`` (module docstring); their paths, oldest first."""
    from tests.infra.history_runs import CASE_DIR, write_case_run

    template = write_case_run(root / "template", "run00000", started_at=_iso(0), extra_rows=EXTRA_ROWS)
    summary = json.loads((template / "summary.json").read_text(encoding="utf-8"))
    result = (template.joinpath(*CASE_DIR) / "result.json").read_bytes()
    record = summary["results"][0]
    base_qps = record["*p_inference_core(qps)"]
    rows = [(row["qps"], dict(row["latency_ms"])) for row in record["performance"]]
    latency = dict(record["latency_ms"])
    rng = random.Random(seed)
    out = []
    for k in range(count):
        name = f"run{k:05d}"
        run_dir = root / name
        log_dir = run_dir.joinpath(*CASE_DIR)
        log_dir.mkdir(parents=True)
        level = STEP if k >= STEP_AT * count else 1.0
        factor = level * math.exp(rng.gauss(0.0, SPREAD))
        record["*p_inference_core(qps)"] = base_qps * factor
        record["ci95"]["*p_inference_core(qps)"] = [base_qps * factor * 0.99, base_qps * factor * 1.01]
        record["latency_ms"] = {q: (v / factor if isinstance(v, float) else v) for q, v in latency.items()}
        for row, (qps, row_latency) in zip(record["performance"], rows):
            row_factor = factor * math.exp(rng.gauss(0.0, SPREAD / 4))
            row["qps"] = qps * row_factor
            row["latency_ms"] = {q: (v / row_factor if isinstance(v, float) else v) for q, v in row_latency.items()}
        record["log_dir"] = str(log_dir)
        summary.update(run_id=name, started_at=_iso(k), finished_at=_iso(k))
        (run_dir / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
        (log_dir / "result.json").write_bytes(result)
        out.append(run_dir)
    shutil.rmtree(root / "template")
    return out


def _run_py(*args: str) -> tuple[float, str]:
    """(wall seconds, stdout) of ``python run.py ARGS`` in inference/; fails loudly on a non-zero exit."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "run.py", *args], cwd=INFERENCE, capture_output=True, text=True)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"run.py {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return took, proc.stdout


def measure(runs: int, page_points: int, workdir: Path) -> dict[str, Any]:
    from utils.history.points import project_version, run_entries
    from utils.history.store import Store

    folder = workdir / "result"
    start = time.perf_counter()
    made = write_runs(folder, runs)
    generated = time.perf_counter() - start
    store = workdir / "history.sqlite"
    import_s, import_out = _run_py("history", "import", str(folder), "--history", str(store))
    page = workdir / "history.html"
    history_s, history_out = _run_py("history", "--history", str(store), "--out", str(page))
    series_shown = len([line for line in history_out.splitlines() if line.count(" | ") == 4])

    project = project_version(str(INFERENCE))
    entries = [entry for run_dir in made for entry in run_entries(run_dir, project)]
    direct = Store.open(f"sqlite:///{workdir / 'direct.sqlite'}")
    try:
        start = time.perf_counter()
        added = direct.add_runs(entries)
        add_runs_s = time.perf_counter() - start
        counted = direct.count()
    finally:
        direct.close()

    small = Store.open(f"sqlite:///{workdir / 'page.sqlite'}")
    try:
        small.add_runs(entries[:page_points])
    finally:
        small.close()
    small_page = workdir / "history_page.html"
    page_s, _ = _run_py("history", "--history", str(workdir / "page.sqlite"), "--out", str(small_page))
    return {
        "runs": counted[0],
        "figures_per_run": counted[2] // max(counted[0], 1),
        "points": counted[2],
        "series": counted[1],
        "series_shown": series_shown,
        "generate_s": generated,
        "import_s": import_s,
        "import_line": import_out.strip().splitlines()[-1],
        "history_s": history_s,
        "history_page_bytes": page.stat().st_size,
        "add_runs_s": add_runs_s,
        "added": list(added),
        "page_points_per_figure": min(page_points, runs),
        "page_s": page_s,
        "page_bytes": small_page.stat().st_size,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10_000, help="run folders to import (default 10000)")
    parser.add_argument("--page-points", type=int, default=1_000, help="points per figure of the sized page")
    parser.add_argument("--workdir", type=Path, help="where to build (default: a temporary folder, removed)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="history_scale_"))
    try:
        figures = measure(args.runs, args.page_points, workdir)
    finally:
        if args.workdir is None and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    mark = lambda ok: "ok" if ok else "MISSED"  # noqa: E731
    print(f"runs {figures['runs']} x {figures['figures_per_run']} figures = {figures['points']} points, "
          f"{figures['series']} series (folders written in {figures['generate_s']:.1f} s)")  # fmt: skip
    print(f"import   run.py history import   {figures['import_s']:6.2f} s  (goal < {GOAL_S:g} s: "
          f"{mark(figures['import_s'] < GOAL_S)}); {figures['import_line']}")  # fmt: skip
    print(f"history  run.py history          {figures['history_s']:6.2f} s  (goal < {GOAL_S:g} s: "
          f"{mark(figures['history_s'] < GOAL_S)}); {figures['series_shown']} series shown, "
          f"page {figures['history_page_bytes'] / 1e6:.2f} MB")  # fmt: skip
    print(f"add_runs Store.add_runs alone    {figures['add_runs_s']:6.2f} s")
    print(f"page     {figures['page_points_per_figure']} points a figure: {figures['page_bytes'] / 1e6:.2f} MB "
          f"(goal < {GOAL_PAGE_BYTES / 1e6:g} MB: {mark(figures['page_bytes'] < GOAL_PAGE_BYTES)}), "
          f"run.py history {figures['page_s']:.2f} s")  # fmt: skip
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
