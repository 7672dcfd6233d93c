"""``run.py history`` and ``run.py calibrate`` (docs/history.md).

    run.py history [--case C] [--figure F] [--check] [--history URL] [--config host.yaml] [--out FILE]
    run.py history import DIR... [--history URL] [--config host.yaml]
    run.py calibrate [--runs N] [--gap S] [run.py's options ...]

``history`` prints each series with its learned noise and change points (when, how large with its
95 % interval, what changed in software between the points) and writes ``history.html`` beside the
store (or ``--out``). ``--check`` is a gate: exit 1 when a series' newest change point is in its
worse direction, so its newest point lies past a step for the worse. ``import`` adds finished run
folders (a folder of runs is searched one level down); adding a run twice adds nothing, and a corrupt
or partial folder is skipped with one line. ``calibrate`` runs ``run.py`` N times as fresh processes,
``--gap`` seconds apart: the history then knows this host's between-run noise.

Exit status: 0 done; 1 ``--check`` found a series worse since its newest change point, or a
calibration run failed; 2 bad input (one line: an unknown case or figure, listing what exists; a
malformed ``--history``; ``calibrate`` with fewer than 3 runs; a store that cannot be read).
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.errors import ConfigError, one_line
from utils.history.noise import MIN_POINTS
from utils.history.store import DEFAULT_FILE, HistoryError, Point, Series, Store, resolve_url, shown_url

EXIT_WORSE = 1
EXIT_BAD_INPUT = 2
MIN_CALIBRATION_RUNS = 3


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2
        raise ConfigError(f"{self.prog}: {message}")


@dataclass
class Located:
    url: str
    folder: Path  # where history.html goes by default


def locate(history: str | None, config: Path, inference_dir: Path) -> Located:
    """The store: ``--history``, else host.yaml's HISTORY (only that key and FLAGPERF_LOG_PATH are read)."""
    from common.yamlio import load_yaml_mapping

    data = load_yaml_mapping(config) if config.is_file() else {}
    log = Path(str(data.get("FLAGPERF_LOG_PATH") or "result"))
    log = log if log.is_absolute() else inference_dir / log
    try:
        url = resolve_url(history if history is not None else data.get("HISTORY"), log)
    except ValueError as exc:
        where = "--history" if history is not None else f"{config}: key 'HISTORY'"
        raise ConfigError(f"{where} {exc}") from None
    if url is None:
        raise ConfigError(f"{config}: key 'HISTORY' is off: no history to read (--history URL names one)")
    folder = Path(url.split(":///", 1)[1]).parent if url.startswith("sqlite") else log
    return Located(url, folder)


def _common(parser: argparse.ArgumentParser, inference_dir: Path) -> None:
    parser.add_argument("--history", default=None, help="the store: a SQLAlchemy URL or a SQLite file")
    parser.add_argument(
        "--config", type=Path, default=inference_dir / "configs" / "host.yaml", help="host.yaml (its HISTORY)"
    )


def main(argv: list[str], inference_dir: Path) -> int:
    """``run.py history ...``."""
    try:
        if argv[:1] == ["import"]:
            return _import(argv[1:], inference_dir)
        return _show(argv, inference_dir)
    except (ConfigError, HistoryError) as exc:
        print(one_line(exc), file=sys.stderr)
        return EXIT_BAD_INPUT


def _import(argv: list[str], inference_dir: Path) -> int:
    from utils.history.ingest import import_folders

    parser = _Parser(prog="run.py history import", description="add finished run folders to the history")
    parser.add_argument("folders", nargs="+", type=Path, metavar="DIR", help="run folders, or folders of runs")
    _common(parser, inference_dir)
    args = parser.parse_args(argv)
    where = locate(args.history, args.config, inference_dir)
    store = Store.open(where.url)
    try:
        runs, points, skipped = import_folders(store, args.folders)
    finally:
        store.close()
    print(f"history {shown_url(where.url)}: {runs} run(s), {points} figure(s) added; {skipped} folder(s) skipped")
    return 0


@dataclass
class Shown:
    """A series as ``history`` shows it: its points, learned noise and change points."""

    series: Series
    points: list[Point]
    noise: Any
    changes: list


def _show(argv: list[str], inference_dir: Path) -> int:
    from utils.history.changes import changes
    from utils.history.noise import NoiseModel
    from utils.history.page import write_page

    parser = _Parser(prog="run.py history", description="each series with its noise and change points")
    parser.add_argument("--case", help="only this case (digits:pytorch, or digits)")
    parser.add_argument("--figure", help="only this figure (core qps, p99 ms, TTFT p50 ms, ...)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a series is worse since its newest change")
    parser.add_argument("--out", type=Path, help="where to write history.html (default: beside the store)")
    _common(parser, inference_dir)
    args = parser.parse_args(argv)
    where = locate(args.history, args.config, inference_dir)
    store = Store.open(where.url, create=False)
    try:
        every = store.all_series()
        chosen = _select(every, args.case, args.figure)
        points = store.points(chosen)
    finally:
        store.close()
    model = NoiseModel({s: points[s.id] for s in chosen if s.id is not None})
    shown = [
        Shown(s, points[s.id], model.of(s), changes(points[s.id], s.higher_is_better))
        for s in sorted(chosen, key=lambda s: (s.key.case, s.host, s.key.row, s.key.figure, s.key.compiler))
        if s.id is not None
    ]
    worse = [item for item in shown if item.changes and item.changes[-1].worse]
    for item in shown:
        print(_text(item))
    page = write_page(shown, args.out or where.folder / "history.html", shown_url(where.url))
    print(f"{len(shown)} series; page: {page}")
    if args.check:
        for item in worse:
            last = item.changes[-1]
            print(f"CHECK: {item.series.key.label} on {item.series.host} is worse since {last.at} "
                  f"(x{last.ratio:.3f} [{last.low:.3f}, {last.high:.3f}])")  # fmt: skip
        if not worse:
            print(f"check: no series is worse since its newest change point ({len(shown)} checked)")
        return EXIT_WORSE if worse else 0
    return 0


def _select(every: list[Series], case: str | None, figure: str | None) -> list[Series]:
    """The series asked for; a ConfigError listing what exists when a case or figure is unknown."""
    chosen = every
    if case is not None:
        chosen = [s for s in chosen if case in (s.key.case, s.key.case.split(":")[0])]
        if not chosen:
            cases = ", ".join(sorted({s.key.case for s in every})) or "none yet"
            raise ConfigError(f"run.py history: --case {case!r} is not in the history (cases: {cases})")
    if figure is not None:
        narrowed = [s for s in chosen if s.key.figure == figure]
        if not narrowed:
            figures = ", ".join(sorted({s.key.figure for s in chosen})) or "none yet"
            raise ConfigError(f"run.py history: --figure {figure!r} is not in the history (figures: {figures})")
        chosen = narrowed
    return chosen


def _text(item: Shown) -> str:
    s, pts = item.series, item.points
    valid = [p for p in pts if p.valid]
    direction = "higher is better" if s.higher_is_better else "lower is better"
    engine = f"{s.key.vendor}/{s.key.compiler}"
    head = f"{s.key.case} | {s.key.row} | {s.key.figure} ({s.unit}, {direction}) | {engine} | {s.host}"
    noise = f"noise ±{item.noise.cv:.1%} ({item.noise.source})" if item.noise else "noise unknown (too few runs)"
    newest = f"newest {pts[-1].value:.4g} at {pts[-1].at}" if pts else "no point"
    lines = [head, f"  {len(pts)} run(s), {len(valid)} valid; {newest}; {noise}"]
    if not item.changes:
        lines.append("  change points: none")
    for c in item.changes:
        changed = "; changed: " + ", ".join(c.changed) if c.changed else "; no software change recorded"
        word = "worse" if c.worse else "better"
        lines.append(
            f"  change at {c.at} (run {c.run_key}): x{c.ratio:.3f} [{c.low:.3f}, {c.high:.3f}] {word}{changed}"
        )
    return "\n".join(lines)


# ---- run.py calibrate --------------------------------------------------------------------------------
def calibrate(argv: list[str], inference_dir: Path) -> int:
    """``run.py calibrate [--runs N] [--gap S] [run.py options]``: N fresh runs, S seconds apart."""
    parser = _Parser(
        prog="run.py calibrate",
        description="run the benchmark N times, spread over time, so the history learns this host's noise",
    )
    parser.add_argument(
        "--runs", type=int, default=MIN_POINTS, help=f"how many runs (at least 3; default {MIN_POINTS})"
    )
    parser.add_argument("--gap", type=float, default=60.0, help="seconds between the end of a run and the next")
    try:
        args, rest = parser.parse_known_args(argv)
        if args.runs < MIN_CALIBRATION_RUNS:
            raise ConfigError(
                f"run.py calibrate: --runs {args.runs}: at least {MIN_CALIBRATION_RUNS} runs are needed to "
                f"learn a spread ({MIN_POINTS} give a series its own estimate: docs/history.md)"
            )
        if not (math.isfinite(args.gap) and 0 <= args.gap <= 86400):
            raise ConfigError(f"run.py calibrate: --gap {args.gap:g}: seconds in [0, 86400]")
    except ConfigError as exc:
        print(one_line(exc), file=sys.stderr)
        return EXIT_BAD_INPUT
    command = [sys.executable, str(inference_dir / "run.py"), *rest]
    failed = 0
    for k in range(1, args.runs + 1):
        print(f"calibrate: run {k} of {args.runs}", flush=True)
        code = subprocess.run(command, cwd=inference_dir).returncode
        if code in (2, 130, 143) or code < 0:  # bad input, or stopped: the next run would do the same
            print(f"calibrate: run {k} exited {code}: stopping", file=sys.stderr)
            return code if code > 0 else 128 - code
        failed += code != 0
        if k < args.runs:
            time.sleep(args.gap)
    print(
        f"calibrate: {args.runs} runs done, {failed} with a failure; `run.py history` shows the noise learned "
        f"({DEFAULT_FILE} by default)"
    )
    return 1 if failed else 0
