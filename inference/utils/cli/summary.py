"""A run's end: summary.json/md and report.html, one line per failure, the run in the results
history, and the exit status."""

from __future__ import annotations

from pathlib import Path

from loguru import logger

from common.errors import InferPerfError, one_line
from common.files import atomic_path
from utils.cli.hosts import Run
from utils.cli.stops import restore
from utils.executors.base import CaseOutcome
from utils.host_config import HostConfig


def finish_run(
    config: HostConfig, run: Run, outcomes: list[CaseOutcome], interrupted: bool, strict: bool, previous_handlers: dict
) -> int:
    """summary.json/md and report.html, one line per failure, the exit status."""
    from utils.results.baselines import store_outcomes
    from utils.results.summary import summary_records, write_summary

    store_outcomes(outcomes, config.vendor, run.run_id)  # measured peaks first: every record's MFU may use them
    records = summary_records(outcomes, config.flagperf_path, config.vendor)  # a case run N times: one record
    try:
        json_path, md_path = write_summary(run.run_dir, run.run_id, config, records, run.started_at)
    except InferPerfError as exc:  # the disk filled (or turned read-only) under the summary: one line, its exit status
        restore(previous_handlers)
        _remove_partial_summary(run.run_dir)
        logger.error(f"{one_line(exc)}: summary not written; each case's own files are in {run.run_dir}")
        return exc.exit_code
    print(md_path.read_text(encoding="utf-8"))
    logger.debug(f"summary: {json_path} and {md_path}")  # beside report.html, whose path ends the output
    report_path = write_report_safely(run.run_dir, config.flagperf_path)
    failed = [r for r in records if not r.succeeded]
    for r in failed:
        logger.error(f"FAILED {r.name} on host {r.host} at step {r.failed_step}: {r.error}")
    invalid = [r for r in records if r.invalid]
    if invalid:
        logger.warning(
            f"{len(invalid)} result(s) INVALID: see the reasons under the table"
            + ("" if strict else " (--strict makes this exit 3)")
        )
    unjudged = [r for r in records if r.verdict is not None and r.verdict.not_judged]
    if unjudged and strict:  # --strict: a check that could not run is no pass
        logger.warning(f"{len(unjudged)} result(s) with checks not judged (--strict): see the list under the table")
        invalid += [r for r in unjudged if r not in invalid]
    record_history(config.history, run.run_dir, md_path)
    restore(previous_handlers)
    code = 130 if interrupted else 1 if failed or not records else 3 if strict and invalid else 0
    print(f"report: {report_path}" if report_path else "report: not written (see the error above)", flush=True)
    return code


def record_history(url: str | None, run_dir: Path, md_path: Path) -> None:
    """The run's figures into the results history (utils/history/), after its own files are written: a
    failure of the store is one line, here and at the end of summary.md, and never fails the run."""
    from utils.history.ingest import record_runs

    line = record_runs([run_dir], url)
    (logger.warning if line.startswith("history not updated") else logger.info)(line)
    try:
        with atomic_path(md_path) as tmp:
            tmp.write_text(md_path.read_text(encoding="utf-8") + f"\n{line}\n", encoding="utf-8")
    except OSError as exc:
        logger.warning(f"summary.md does not say it: {one_line(exc)}")


def _remove_partial_summary(run_dir: Path) -> None:
    """summary.json and summary.md come together or not at all (each is written atomically)."""
    for name in ("summary.json", "summary.md"):
        try:
            (run_dir / name).unlink(missing_ok=True)
        except OSError as exc:
            logger.warning(f"could not remove {run_dir / name}: {exc.strerror or exc}")


def write_report_safely(run_dir: Path, perf_dir: Path) -> Path | None:
    """report.html beside summary.json; a failure to draw it never fails the run."""
    try:
        from utils.results.report import write_report

        return write_report(run_dir, perf_dir)
    except Exception as exc:
        logger.error(f"report.html not written: {one_line(exc)}")
        return None
