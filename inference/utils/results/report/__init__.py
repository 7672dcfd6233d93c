"""report.html: one self-contained page per run, for people.

Built from ``summary.json`` and, per case and host, the files beside it: ``result.json``,
``latencies.npz`` (raw per-query latencies, ``tools.results.result``) and the monitors'
JSON lines. Every plot is an interactive plotly chart that the browser draws from a JSON
figure spec in the page; the page carries its plotly.js and loads nothing from elsewhere.
Sections, in reading order:
  1. the run (vendor, mode, hosts, counts) and the summary table with verdicts;
  2. per case and host: throughput against batch size, latency CDF per row,
     the throughput-latency frontier (when more than one row), the monitors'
     timeline with the measured phases shaded, numeric check and audits, the
     compile report and the top ops of the per-op profile;
  3. the environment: the checkout's git commit and each host's fingerprint.
A part whose data is missing says so in one line instead of plotting nothing.

The modules, by concept:
  ``charts``    the plotly figure specs (what each plot draws);
  ``sections``  the data gathering (a run's files -> the page's tables, plots and notes);
  ``page``      the page: its template ``page.html.j2``, the inlined plotly.js
                (``vendor/``), and the atomic write.
The cells of the tables are formatted by ``utils.results.summary``'s helpers (``fmt``,
``percentile_cell``, ``accuracy_cell``, ``record_mfu_cell``) and a figure's ± by ``common.cells``
(``figure_cell``: ``±1.2%``, or ``± n/a`` for a measured figure without an honest interval), the same
as summary.md's.
"""

from utils.results.report.charts import (
    TOP_OPS,
    TRACE_TYPES,
    decimate,
    ecdf_points,
    frontier_plot,
    latency_plot,
    pareto_front,
    phase_spans,
    repetitions_plot,
    throughput_plot,
    timeline_plot,
    top_ops_plot,
)
from utils.results.report.page import PLOTLY_BUNDLE, REPORT_FILE, plotly_js, render, script_json, write_report
from utils.results.report.sections import case_section, monitor_files

__all__ = [
    "PLOTLY_BUNDLE",
    "REPORT_FILE",
    "TOP_OPS",
    "TRACE_TYPES",
    "case_section",
    "decimate",
    "ecdf_points",
    "frontier_plot",
    "repetitions_plot",
    "latency_plot",
    "monitor_files",
    "pareto_front",
    "phase_spans",
    "plotly_js",
    "render",
    "script_json",
    "throughput_plot",
    "timeline_plot",
    "top_ops_plot",
    "write_report",
]
