"""A run's hosts: its id and folder with their logs (``open_run``), one thread per host running the
plan (``run_hosts``, ``host_worker``), and every planned case's outcome, whatever happened
(``collect_outcomes``)."""

from __future__ import annotations

import secrets
import signal
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from loguru import logger

from common.errors import InferPerfError, one_line
from common.files import LogFileSink, storage_error
from common.log_lock import release_after_signal
from utils import executors
from utils.cli.stops import HELD, STOP_SIGNALS, ignore_while_stopping, raise_keyboard_interrupt
from utils.executors.base import CaseOutcome, HostSession, case_result_dir
from utils.host_config import HostConfig
from utils.run_plan import Planned

if TYPE_CHECKING:
    from utils.run_progress import ProgressConsole

INTERRUPT_GRACE_S = 60.0


@dataclass(frozen=True)
class Run:
    """One run.py run: its id, its folder (FLAGPERF_LOG_PATH/run<id>/) and when it started."""

    run_id: str
    run_dir: Path
    started_at: datetime


def _run_log_ended(path: Path) -> Callable[[OSError], None]:
    """run.log's failure: a write the file system refuses (full, read-only) ends run.log with one
    line on the console, instead of loguru's traceback under every later log line."""

    def ended(exc: OSError) -> None:
        sys.stderr.write(f"run.log ends here: {storage_error(exc, path) or one_line(exc)}\n")

    return ended


def open_run(config: HostConfig) -> Run:
    """The run's id and folder, and its logs: the console at LOG_LEVEL, run.log with everything."""
    run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)
    run = Run(run_id, config.log_path / f"run{run_id}", datetime.now(timezone.utc))
    try:
        run.run_dir.mkdir(parents=True, exist_ok=True)
        run_log = LogFileSink(run.run_dir / "run.log", _run_log_ended(run.run_dir / "run.log"))
    except OSError as exc:  # the disk filled (or turned read-only) since host.yaml's check
        raise (storage_error(exc, run.run_dir, "creating") or exc) from None
    logger.remove()
    logger.add(console_sink, level=config.log_level, format=CONSOLE_FORMAT)
    logger.add(run_log, level="DEBUG", format="{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <7} | {message}")
    logger.info(
        f"run {run_id}: {len(config.cases)} case(s) x {len(config.hosts)} host(s), mode {config.mode}, vendor "
        f"{config.vendor}"
    )
    return run


def _progress_display(verbose: bool, total: int) -> ProgressConsole | None:
    """On a terminal without --verbose, a live display of every case x host; otherwise (CI,
    pipes) nothing per line: one line per case and host."""
    if verbose or not sys.stdout.isatty():
        return None
    try:
        from utils.run_progress import ProgressConsole

        return ProgressConsole(total).start()
    except ImportError as exc:  # rich missing (a venv older than pyproject.toml): the plain console
        logger.debug(f"no progress display: {one_line(exc)}")
        return None


def _import_report(history: str | None) -> None:
    """What the run's end needs, made while the hosts prepare (waiting on SSH and the engine) rather than
    after the last case, when the run's end waits on it: the report's and the results history's modules,
    numpy among them, the report's compiled template, and SQLAlchemy with the history's dialect
    (``history``: host.yaml's HISTORY URL, None when off)."""
    try:
        import numpy  # noqa: F401

        import utils.history.ingest  # noqa: F401
        import utils.results.llm_plots  # noqa: F401
        import utils.results.report  # noqa: F401
        import utils.results.serving_compare  # noqa: F401
        from utils.results.report.page import page_template

        page_template()
        if history is not None:
            from utils.history.store import warm

            warm(history)
    except Exception:  # noqa: BLE001 - write_report_safely and record_history import them again and say what failed
        return


def run_hosts(config: HostConfig, run: Run, verbose: bool, plan: list[Planned]) -> tuple[list[CaseOutcome], bool]:
    """Every case on every host, one thread per host; Ctrl-C (or SIGTERM, SIGHUP) stops every
    host's case, and every session is cleaned up whatever happens. Returns the outcomes and
    whether the run was interrupted."""
    abort = threading.Event()
    sessions: list[HostSession] = []
    futures: list[Future] = []
    display: ProgressConsole | None = None
    pool: ThreadPoolExecutor | None = None
    interrupted = False
    try:
        # A stop held since the run folder was opened (main) is raised here, where it is handled.
        for sig in STOP_SIGNALS:
            signal.signal(sig, raise_keyboard_interrupt)
        if HELD:
            raise KeyboardInterrupt(signal.Signals(HELD[0]).name)
        for i in range(len(config.hosts)):
            sessions.append(executors.create(config, i, run.run_id, abort, run.run_dir))
        display = _progress_display(verbose, len(plan) * len(sessions))
        if config.executor.in_container:
            logger.info("preparing the hosts: code sync and image check (an image build takes minutes the first time)")
        echo = _console_echo() if verbose else display.echo if display else None
        for session in sessions:
            session.echo = echo
        pool = ThreadPoolExecutor(max_workers=len(sessions), thread_name_prefix="host")
        futures.extend(pool.submit(host_worker, session, plan) for session in sessions)
        threading.Thread(target=_import_report, args=(config.history,), name="import-report", daemon=True).start()
        pending = set(futures)
        while pending:
            # A bounded wait keeps the main thread responsive to Ctrl-C.
            _, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
        for sig in STOP_SIGNALS:  # every case ended: a late Ctrl-C must not cut the cleanup and summary short
            signal.signal(sig, ignore_while_stopping)
    except KeyboardInterrupt:
        for sig in STOP_SIGNALS:
            signal.signal(sig, ignore_while_stopping)
        interrupted = True
        abort.set()
        release_after_signal()  # this thread's mark only: the host workers go on logging
        logger.error("interrupted: stopping containers and monitors on every host")
        for session in sessions:
            session.interrupt()
        wait(futures, timeout=INTERRUPT_GRACE_S)
    finally:
        if display is not None:
            display.stop()
        for session in sessions:
            try:
                session.cleanup()
            except Exception as exc:
                logger.warning(f"host {session.label}: cleanup failed: {one_line(exc)}")
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
    return collect_outcomes(plan, sessions, futures), interrupted


def collect_outcomes(plan: list[Planned], sessions: list[HostSession], futures: list[Future]) -> list[CaseOutcome]:
    """Each host's outcomes; a host whose work did not end in time (or broke) still gets a line per case."""
    outcomes: list[CaseOutcome] = []
    for session, future in zip(sessions, futures):
        if future.done() and future.exception() is None:
            outcomes.extend(future.result())
            continue
        broken = future.exception() if future.done() else None
        why = f"host worker failed: {one_line(broken)}" if broken else "run interrupted; the host did not stop in time"
        for item in plan:
            local = case_result_dir(item.run_dir, item.spec, session.label, session.noderank, item.repetition)
            outcomes.append(
                CaseOutcome(item.spec, session.label, session.noderank, local).fail(
                    "host" if broken else "interrupted", why, "failed" if broken else "interrupted"
                )
            )
    return outcomes


def host_worker(session: HostSession, plan: list[Planned]) -> list[CaseOutcome]:
    """Every planned case run on one host, in the plan's order (utils/run_plan.py): one outcome each."""

    def case_dir(item: Planned) -> Path:
        return case_result_dir(item.run_dir, item.spec, session.label, session.noderank, item.repetition)

    try:
        session.prepare()
    except Exception as exc:  # one host's failure is reported and must not stop the others
        message = one_line(exc) if isinstance(exc, InferPerfError) else f"host {session.label}: {one_line(exc)}"
        logger.error(message)
        status = "interrupted" if session.abort.is_set() else "failed"  # Ctrl-C cut the preparation short
        return [
            CaseOutcome(i.spec, session.label, session.noderank, case_dir(i)).fail(
                session.preflight_step or "preflight", message, status
            )
            for i in plan
        ]
    outcomes = []
    for item in plan:
        spec = item.spec
        if session.abort.is_set():
            outcomes.append(
                CaseOutcome(spec, session.label, session.noderank, case_dir(item)).fail(
                    "interrupted", "run interrupted before this case started", "interrupted"
                )
            )
            continue
        name = (
            spec.key
            + (f" {item.variant}" if item.variant else "")
            + (f" repetition {item.repetition}" if item.repetition > 1 else "")
        )
        logger.debug(f"host {session.label}: running {name}")  # run.log; the console shows progress
        try:
            outcome = session.run_case(spec, case_dir(item))
        except Exception as exc:
            outcome = CaseOutcome(spec, session.label, session.noderank, case_dir(item)).fail(
                "container", one_line(exc)
            )
        level = "INFO" if outcome.status == "success" else "ERROR"
        logger.log(
            level,
            f"host {session.label}: {name} {outcome.status}"
            + (f" at step {outcome.step}: {outcome.error}" if outcome.error else ""),
        )
        outcomes.append(outcome)
    return outcomes


def console_sink(message) -> None:
    """The console's log lines, on the sys.stderr of the moment: a live progress display
    (utils/run_progress.py) redirects it and prints them above itself."""
    sys.stderr.write(message)
    sys.stderr.flush()


CONSOLE_FORMAT = "{time:HH:mm:ss} | {level: <7} | {message}"


def _console_echo() -> Callable[[str], None]:
    """--verbose: every pipeline's log lines on the console, behind one lock so lines never interleave."""
    lock = threading.Lock()

    def echo(line: str) -> None:
        with lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    return echo
