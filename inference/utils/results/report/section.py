"""A report page's section, empty: the keys the page template reads, for every kind of section
(a case's, a serving run's, the roofline)."""

from __future__ import annotations

from typing import Any


def new_section(title: str, anchor: str, status: str = "success", **given: Any) -> dict[str, Any]:
    """A page section with nothing in it yet (the page template reads every key)."""
    empty: dict[str, list] = {
        "plots": [],
        "tables": [],  # {caption, columns, rows, notes}: a served LLM's server figures (report/serving.py)
        "missing": [],
        "perf_rows": [],
        "compile": [],
        "ops": [],
        "checks": [],
        "notes": [],
    }
    return {
        "title": title,
        "anchor": anchor,
        "status": status,
        "error": None,
        "failed_step": None,
        **empty,
        "best": None,
        "aggregate": False,
        **given,
    }
