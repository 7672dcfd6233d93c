"""Adding run folders to the history: at the end of every run, and ``run.py history import DIR…``.

A history must never cost a benchmark its result: ``record_runs`` is called after the run's own
files are written, catches every failure of the store (unreachable, read-only, full, locked, corrupt,
another schema) and returns the one line the run prints, naming why and how to add the run later.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Iterator

from common.errors import one_line
from utils.history.points import run_entries
from utils.history.store import Point, RunEntry, Store, shown_url


def record_runs(run_dirs: list[Path], url: str | None) -> str:
    """Add ``run_dirs`` (this run's folder, or an ab run's two sides) to the history at ``url``;
    the line to print. Never raises but for a stop signal."""
    if url is None:
        return "history: off (HISTORY: off in host.yaml)"
    try:
        entries = [entry for run_dir in run_dirs for entry in run_entries(run_dir)]
        store = Store.open(url)
        try:
            runs, points = store.add_runs(entries)
        finally:
            store.close()
    except Exception as exc:  # noqa: BLE001 - the history is never worth the run's result (module docstring)
        folders = " ".join(str(d) for d in run_dirs)
        return f"history not updated: {one_line(exc)}; `run.py history import {folders}` adds this run later"
    return f"history: {points} figure(s) of {runs} run(s) added to {shown_url(url)}"


def folders(paths: Iterable[Path]) -> Iterator[Path]:
    """Each run folder named, or found one level under a folder of runs (FLAGPERF_LOG_PATH)."""
    for path in paths:
        if (path / "summary.json").is_file() or any((path / side / "summary.json").is_file() for side in "AB"):
            yield path
        elif path.is_dir():  # a folder of runs; one with none (a run killed before its summary): said as skipped
            yield from sorted(p for p in path.iterdir() if p.is_dir() and p.name.startswith("run")) or [path]
        else:
            yield path  # named, but not a folder: said as a skipped folder


PARALLEL_FROM = 64  # folders: fewer are read in this process (a pool's start costs more than it saves)


def read_folder(folder: Path) -> tuple[list[tuple[RunEntry, list[Point]]], str | None]:
    """A folder's runs, or the line that says why it is skipped (``ValueError``'s text names the file)."""
    try:
        return run_entries(folder), None
    except ValueError as exc:
        return [], f"skipped {exc}"
    except OSError as exc:
        return [], f"skipped {folder}: {exc.strerror or exc}"


def import_folders(store: Store, paths: list[Path], echo=print) -> tuple[int, int, int]:
    """``run.py history import``: every finished run under ``paths``; a corrupt or partial folder is
    skipped with one line naming it. Returns (runs added, points added, folders skipped). Many
    folders are read by a pool of processes, one per CPU (reading and parsing them is most of an
    import's time), in their order."""
    import os
    from concurrent.futures import ProcessPoolExecutor

    found = list(folders(paths))
    skipped = 0
    workers = min(os.cpu_count() or 1, 8)

    def readable() -> Iterator[tuple[RunEntry, list[Point]]]:
        nonlocal skipped
        if len(found) < PARALLEL_FROM or workers < 2:
            results: Iterable = map(read_folder, found)
            pool = None
        else:
            pool = ProcessPoolExecutor(max_workers=workers)
            results = pool.map(read_folder, found, chunksize=32)
        try:
            for entries, why in results:
                if why is not None:
                    skipped += 1
                    echo(why)
                yield from entries
        finally:
            if pool is not None:
                pool.shutdown(cancel_futures=True)

    runs, points = store.add_runs(readable())
    return runs, points, skipped
