"""A serving run folder's summary.md, written as run.py writes it (``entry/endpoint.py``): the tests
that run tools/serving/cli.py itself read the folder's summary.md through this."""

from __future__ import annotations

from pathlib import Path


def summary_md(run_dir: Path) -> str:
    """``run_dir``'s summary.md (written by run.py's one summary writer from its summary.json), as text."""
    from entry.endpoint import write_summary_md
    from utils.results.serving_compare import read_serving_summary

    return write_summary_md(run_dir, read_serving_summary(run_dir), [run_dir]).read_text(encoding="utf-8")
