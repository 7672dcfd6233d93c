"""report.html of a serving run (``run.py --endpoint``): its summary.json's typed rows
(``common/record.py::ServingStep``) drawn with the report's one chart stack (``charts``; ``page``
renders them into its template with the inlined plotly.js).

The page: the run (endpoint, model, API, counts of valid and INVALID steps), a table of every step (the
sweep's, then the capacity probes'), and the plots over the sweep's steps, ordered by load within each
kind (streams, then rates): TTFT p50/p90 and TPOT p50 against load, output tokens/s and goodput against
load (each with its window's interval), and the throughput-latency frontier (output tokens/s against TPOT
p50; the frontier is ``common.stats.pareto_front``'s, the same as every run's: a lower TPOT is more tokens/s per
user); hollow markers are INVALID steps. Then each step's timeslices (output tokens/s and TTFT p50 per
slice of its window), the server's KV-cache use and requests running over each step (its /metrics
samples), and the server's own figures beside the client's TTFT with the TTFT cross-check. A serving
vendor's case (``llm.serving``, the same rows) gets the same in its section of a run's page (``add_steps``).
"""

from __future__ import annotations

import math
from typing import Any

from common.serving_record import ServingStep, ServingSummary, server_rows
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
from utils.results.report.section import new_section


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


def _lines(series: list[tuple[str, list[float], list[Any]]], title: str, xtitle: str, ytitle: str) -> dict | None:
    """One line per (name, x, y) series, or None when none has a point."""
    traces = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": name,
            "x": rounded(xs),
            "y": [None if y is None else round(float(y), 5) for y in ys],
            "line": {"color": COLOURS[n % len(COLOURS)]},
        }
        for n, (name, xs, ys) in enumerate(series)
        if xs
    ]
    return chart(traces, title, xaxis=axis(xtitle), yaxis=axis(ytitle, rangemode="tozero")) if traces else None


def timeslice_plots(steps: list[ServingStep]) -> list[tuple[str, dict | None]]:
    """Each step's output tokens/s and TTFT p50 per slice of its window (its ``timeslices``); [] without."""
    sliced = [(s.label, (s.timeslices or {}).get("items") or []) for s in steps]
    sliced = [(label, items) for label, items in sliced if items]
    if not sliced:
        return []

    def series(get: Any) -> list[tuple[str, list[float], list[Any]]]:
        return [(label, [float(i["index"]) + 1 for i in items], [get(i) for i in items]) for label, items in sliced]

    return [
        ("output tokens/s per timeslice", _lines(series(lambda i: i.get("output_tokens_per_s")),
            "Output tokens/s per timeslice", "slice of the step", "tokens/s")),
        ("TTFT p50 per timeslice", _lines(series(lambda i: (i.get("ttft_ms") or {}).get("p50")),
            "TTFT p50 per timeslice (requests sent in it)", "slice of the step", "ms")),
    ]  # fmt: skip


def server_plots(steps: list[ServingStep]) -> list[tuple[str, dict | None]]:
    """The server's KV-cache use and requests running over each step (its /metrics samples); [] without."""
    sampled = [(s.label, (s.server_metrics or {}).get("timeline") or []) for s in steps]
    sampled = [(label, points) for label, points in sampled if points]
    out: list[tuple[str, dict | None]] = []
    for key, title, scale, unit in (
        ("kv_cache_usage", "Server KV-cache use over each step", 100.0, "%"),
        ("running", "Server requests running over each step", 1.0, "requests"),
    ):
        series = [
            (label, [p["t_s"] for p in points if key in p], [p[key] * scale for p in points if key in p])
            for label, points in sampled
        ]
        figure = _lines(series, title, "seconds into the step", unit)
        if figure is not None:
            out.append((title.lower(), figure))
    return out


def server_table(steps: list[ServingStep]) -> dict | None:
    """The server's own figures per step beside the client's TTFT, and each judged TTFT cross-check
    (client minus server, with why they differ); None when the server exposed none."""
    rows = server_rows(steps)
    if not rows:
        return None
    notes, why = [], None
    for step in steps:
        check = (step.server_metrics or {}).get("ttft_crosscheck")
        if isinstance(check, dict) and check.get("judged"):
            notes.append(
                f"TTFT cross-check, {step.label}: client mean {check['client_mean_ms']:.2f} ms, server "
                f"{check['server_mean_ms']:.2f} ms (client - server {check['difference_mean_ms']:+.2f} ms)"
            )
            why = check.get("why")
    if notes and why:
        notes.append(f"{why}.")
    return {"caption": "The server's own figures (/metrics; mean / peak over each step)", "columns": list(rows[0]),
            "rows": rows, "notes": notes}  # fmt: skip


def add_steps(section: dict, steps: list[ServingStep]) -> None:
    """A served LLM's load steps into ``section``: the plots against load, the frontier (two steps or
    more), the timeslices and the server's timeline, and the server's table."""
    for name, figure in (
        ("latency against load", latency_plot(steps)),
        ("throughput against load", throughput_plot(steps)),
        ("throughput-latency frontier", frontier_plot(steps)),
        *timeslice_plots(steps),
        *server_plots(steps),
    ):
        if figure is not None:
            section["plots"].append({"name": name, "figure": figure})
    if len(steps) < 2:
        section["missing"].append("no frontier: it needs two steps")
    table = server_table(steps)
    if table is not None:
        section["tables"].append(table)


def serving_section(summary: ServingSummary) -> dict:
    """The run's one section: its plots over the sweep's steps, and the server's table."""
    section = new_section(f"{summary.served_model} at {summary.endpoint}", "serving")
    add_steps(section, ordered(summary.steps))
    return section
