"""report.html's page: the template (``page.html.j2``), the inlined plotly.js and the writing.

Every plot is a ``<div>`` with its figure spec in a ``<script type="application/json">``
beside it; one small script draws them all with plotly.js, which is inlined once. The
bundle is plotly.js's basic one (scatter, bar, pie: what ``charts.TRACE_TYPES`` needs),
vendored beside this module (``PLOTLY_BUNDLE``, see ``vendor/README.md``), about a quarter
of the whole library's size. The page loads no script, font or style from elsewhere, so it
opens from a file with no network, and nothing is fetched when a report is written.
"""

from __future__ import annotations

import functools
import json
import math
import re
from pathlib import Path
from typing import Any

from common.files import atomic_path
from common.summary_record import SUMMARY_FILE, Summary, read_summary
from utils.results.aggregate import with_aggregates
from utils.results.report.roofline import roofline_section
from utils.results.report.sections import case_section, git_commit, summary_rows
from utils.results.summary import memory_kind

REPORT_FILE = "report.html"
TEMPLATE_FILE = Path(__file__).with_name("page.html.j2")
PLOTLY_BUNDLE = Path(__file__).with_name("vendor") / "plotly-basic.min.js"  # plotly.js-basic-dist-min 4.1.1 (npm)
# Modebar buttons that mean nothing on these plots.
MODEBAR_REMOVE = ["select2d", "lasso2d", "zoomIn2d", "zoomOut2d", "autoScale2d"]


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinity replaced by None (JSON has neither)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def script_json(value: Any) -> str:
    """``value`` as JSON safe to place between <script> and </script>: no "<", ">" or "&"
    (written as \\u003c, \\u003e, \\u0026, which JSON.parse reads back), so no text in it can
    close the element or open a comment; non-ASCII is escaped too (json.dumps' default)."""
    try:
        text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    except ValueError:  # a NaN or infinity somewhere: null instead
        text = json.dumps(_finite(value), separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


@functools.lru_cache(maxsize=1)
def plotly_js() -> str | None:
    """The vendored plotly.js bundle, ready to inline in a <script>; None when the file is missing."""
    try:
        text = PLOTLY_BUNDLE.read_text(encoding="utf-8")
    except OSError:
        return None
    import markupsafe  # jinja2's: a Markup is placed in the page as it is, not escaped or copied

    # Inlined in a <script>: nothing in it may end the element (plotly.js 4 has no such text).
    return markupsafe.Markup(re.sub(r"</(script)", r"<\\/\1", text, flags=re.IGNORECASE))


@functools.lru_cache(maxsize=1)
def page_template():
    """The page's jinja2 template, compiled once per process (a compiled template renders from any thread)."""
    import jinja2

    environment = jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True)
    return environment.from_string(TEMPLATE_FILE.read_text(encoding="utf-8"))


def _plot_specs(sections: list[dict]) -> None:
    """Give every plot of the page its element id, size and spec (JSON safe inside <script>)."""
    number = 0
    for section in sections:
        for plot in section["plots"]:
            number += 1
            figure = plot.pop("figure")
            # The modebar's "download as PNG" names the file after the case, host and plot.
            figure["config"] = {
                "displaylogo": False,
                "modeBarButtonsToRemove": MODEBAR_REMOVE,
                "toImageButtonOptions": {"filename": f"{section['title']} {plot['name']}", "scale": 2},
            }
            plot.update(
                id=f"plot{number}",
                width=figure["layout"]["width"],
                height=figure["layout"]["height"],
                spec=script_json(figure),
            )


def render(summary: Summary, perf_dir: Path | None = None) -> str:
    """The page of a run's ``summary`` (summary.json); ``perf_dir`` (inference/) gives the git commit and the
    vendor's memory kind."""
    all_rows = with_aggregates(list(summary.results), list(summary.aggregates))
    vendor = str(summary.vendor)
    sections = [case_section(r) for r in all_rows]
    roofline = roofline_section(all_rows, vendor)  # the measured roofs and each case's point (report/roofline.py)
    _plot_specs(sections + ([roofline] if roofline else []))
    environments: dict[str, list[tuple[str, str]]] = {}
    for section, record in zip(sections, all_rows):
        if section.get("env"):
            environments.setdefault(record.host, section["env"])
    if roofline:
        sections.insert(0, roofline)
    has_plots = any(s["plots"] for s in sections)
    script = plotly_js() if has_plots else None
    missing = (
        f"plotly.js ({PLOTLY_BUNDLE.name}) is missing beside {Path(__file__).name} in this checkout"
        if has_plots and not script
        else None
    )
    return page_template().render(
        summary=summary,
        rows=summary_rows(all_rows),
        sections=sections,
        environments=environments,
        commit=git_commit(perf_dir) if perf_dir else None,
        memory_kind=memory_kind(perf_dir, vendor) if perf_dir else "device memory",
        plotly_js=script,
        plotly_missing=missing,
    )


def _serving_page(run_dir: Path, perf_dir: Path | None) -> str | None:
    """A serving run's page: its summary.json's typed rows (``report/serving.py``); None for a run of cases."""
    from utils.results.serving_compare import is_serving_run, read_serving_summary

    if not is_serving_run(run_dir):
        return None
    from utils.results.report.serving import serving_section, step_table

    summary = read_serving_summary(run_dir)
    sections = [serving_section(summary)]
    _plot_specs(sections)
    script = plotly_js() if sections[0]["plots"] else None
    table = step_table(summary.rows)
    return page_template().render(
        serving=summary,
        serving_rows=table,
        invalid=sum(1 for row in table if not row["valid"]),
        summary=summary,
        rows=[],
        sections=sections,
        environments={},
        commit=git_commit(perf_dir) if perf_dir else None,
        plotly_js=script,
        plotly_missing=f"plotly.js ({PLOTLY_BUNDLE.name}) is missing" if sections[0]["plots"] and not script else None,
    )


def write_report(run_dir: str | Path, perf_dir: Path | None = None) -> Path:
    """Write ``run_dir``/report.html from its summary.json, atomically; returns its path."""
    run_dir = Path(run_dir)
    html = _serving_page(run_dir, perf_dir) or render(read_summary(run_dir / SUMMARY_FILE), perf_dir)
    path = run_dir / REPORT_FILE
    with atomic_path(path) as tmp:
        tmp.write_text(html, encoding="utf-8")
    return path
