"""report.html of a serving run (``run.py --endpoint``): its summary.json's typed rows
(``common/record.py::ServingStep``) drawn with the report's one chart stack (``charts``; ``page``
renders them into its template with the inlined plotly.js).

The page: the run (endpoint, model, API, counts of valid and INVALID steps), a table of every step (the
sweep's, then the capacity probes'), and three plots over the sweep's steps, ordered by load within each
kind (streams, then rates): TTFT p50/p90 and TPOT p50 against load, output tokens/s and goodput against
load (each with its window's interval), and the throughput-latency frontier (output tokens/s against TPOT
p50; the frontier is ``common.stats.pareto_front``'s, the same as every run's: a lower TPOT is more tokens/s per
user). Hollow markers are INVALID steps.
"""

from __future__ import annotations

import math
from typing import Any

from common.serving_record import ServingStep, ServingSummary
from utils.results.report.charts import (
    COLOURS,
    axis,
    chart,
    frontier_trace,
    labelled_points,
    lower_right_legend,
    pareto_front,
    rounded,
    verdict_marker,
)
from utils.results.report.sections import new_section


def _load_key(step: ServingStep) -> tuple[int, float]:
    if step.concurrency is not None:
        return 0, float(step.concurrency)
    rate = step.request_rate
    return 1, math.inf if rate == "inf" else float(rate or 0.0)


def ordered(steps: tuple[ServingStep, ...]) -> list[ServingStep]:
    return sorted(steps, key=_load_key)


def _error_bars(steps: list[ServingStep], name: str) -> dict | None:
    """The throughput ``name``'s 95 % intervals as plotly error bars (None: no step has one)."""
    values = [s.rate(name) for s in steps]
    intervals = [(s.throughput.get(name) or {}).get("ci95") for s in steps]
    if not any(intervals):
        return None
    plus = [ci[1] - v if ci and v is not None else 0.0 for ci, v in zip(intervals, values)]
    minus = [v - ci[0] if ci and v is not None else 0.0 for ci, v in zip(intervals, values)]
    return {"type": "data", "symmetric": False, "array": rounded(plus), "arrayminus": rounded(minus)}


def _trace(steps: list[ServingStep], name: str, values: list[Any], colour: str, unit: str) -> dict:
    valid = [s.verdict.valid for s in steps]
    return {
        "type": "scatter",
        "mode": "lines+markers",
        "name": name,
        "x": [s.label for s in steps],
        "y": [None if v is None else round(float(v), 5) for v in values],
        "text": [f"{s.label}: {'valid' if ok else 'INVALID'}" for s, ok in zip(steps, valid)],
        "hovertemplate": f"%{{text}}<br>{name} %{{y:.4g}} {unit}<extra></extra>",
        "line": {"color": colour},
        "marker": verdict_marker(8, colour, valid),
    }


def latency_plot(steps: list[ServingStep]) -> dict | None:
    """TTFT p50 and p90 and TPOT p50 (ms) against each step's load."""
    if not steps:
        return None
    traces = [
        _trace(steps, label, [getattr(s, key).get(q) for s in steps], COLOURS[n], "ms")
        for n, (label, key, q) in enumerate(
            (("TTFT p50", "ttft_ms", "p50"), ("TTFT p90", "ttft_ms", "p90"), ("TPOT p50", "tpot_ms", "p50"))
        )
    ]
    return chart(traces, "Latency against load (hollow = INVALID step)", xaxis=axis("load"), yaxis=axis("ms"))


def throughput_plot(steps: list[ServingStep]) -> dict | None:
    """Output tokens/s (and goodput tokens/s under an SLO) against each step's load, with intervals."""
    if not steps:
        return None
    traces = []
    for n, (label, name) in enumerate(
        (("output tokens/s", "output_tokens_per_s"), ("goodput tokens/s", "goodput_tokens_per_s"))
    ):
        if not any(name in s.throughput for s in steps):
            continue
        trace = _trace(steps, label, [s.rate(name) for s in steps], COLOURS[n], "tokens/s")
        bars = _error_bars(steps, name)
        if bars is not None:
            trace["error_y"] = {**bars, "color": COLOURS[n]}
        traces.append(trace)
    return chart(traces, "Throughput against load", xaxis=axis("load"), yaxis=axis("tokens/s", rangemode="tozero"))


def frontier_plot(steps: list[ServingStep]) -> dict | None:
    """Output tokens/s against TPOT p50 over the steps, the frontier joined. Needs two steps."""
    usable: list[tuple[ServingStep, float, float]] = []
    for step in steps:
        tpot, rate = step.tpot_ms.get("p50"), step.rate("output_tokens_per_s")
        if tpot and rate:
            usable.append((step, float(tpot), float(rate)))
    if len(usable) < 2:
        return None
    points = [(tpot, rate) for _, tpot, rate in usable]
    units = "TPOT p50 %{x:.4g} ms, %{y:.4g} tokens/s"
    steps_trace = labelled_points(points, [s.label for s, _, _ in usable], units, "steps")
    return chart(
        [steps_trace, frontier_trace(points, pareto_front(points), units)],
        "Throughput-latency frontier (fewer ms per token: more tokens/s per user)",
        xaxis=axis("TPOT p50 (ms per output token)"),
        yaxis=axis("output tokens/s"),
        legend=lower_right_legend(10),
    )


def _cell(value: Any, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def step_table(rows: tuple[ServingStep, ...]) -> list[dict]:
    """The page's table: a row of text per step."""
    return [
        {
            "step": f"{s.label}" + (" (capacity probe)" if s.phase == "capacity" else ""),
            "requests": f"{s.completed}/{s.requests}",
            "failed": s.failed,
            "output_tokens_per_s": _cell(s.rate("output_tokens_per_s")),
            "requests_per_s": _cell(s.rate("requests_per_s"), 2),
            "ttft_p50_ms": _cell(s.ttft_ms.get("p50")),
            "tpot_p50_ms": _cell(s.tpot_ms.get("p50"), 2),
            "e2e_p90_ms": _cell(s.e2e_ms.get("p90")),
            "valid": s.verdict.valid,
            "verdict": "VALID" if s.verdict.valid else "INVALID: " + "; ".join(s.verdict.reasons),
        }
        for s in rows
    ]


def serving_section(summary: ServingSummary) -> dict:
    """The run's one section: its plots over the sweep's steps."""
    section = new_section(f"{summary.served_model} at {summary.endpoint}", "serving")
    steps = ordered(summary.steps)
    for name, figure in (
        ("latency against load", latency_plot(steps)),
        ("throughput against load", throughput_plot(steps)),
        ("throughput-latency frontier", frontier_plot(steps)),
    ):
        if figure is not None:
            section["plots"].append({"name": name, "figure": figure})
    if len(steps) < 2:
        section["missing"].append("no frontier: it needs two steps")
    return section
