"""report.html's plots of an LLM case (result.json's ``llm`` block, a ``common.record.LLMBlock``): TTFT and TPOT against
batch size, and the throughput-latency frontier of its cells and server rows. Plain plotly
specs built with ``report.charts``' helpers, drawn by ``report.sections`` where a result has an ``llm`` block."""

from __future__ import annotations

from typing import Sequence

from common.record import LLMBlock, LLMRow
from utils.results.report.charts import COLOURS, HEIGHT, WIDTH, frontier_trace, pareto_front
from utils.results.report.charts import (
    axis as _axis,
)  # the report's public chart helpers (utils/results/report/charts.py)
from utils.results.report.charts import figure_layout as _layout
from utils.results.report.charts import rounded as _round


def _p50(row: LLMRow, metric: str) -> float | None:
    return (row.ttft_ms if metric == "ttft" else row.tpot_ms).get("p50")


def _valid(row: LLMRow) -> bool:
    return row.verdict.valid


def ttft_tpot_plot(table: Sequence[LLMRow]) -> dict | None:
    """TTFT p50 (left axis, solid) and TPOT p50 (right axis, dashed) against batch size, one pair per input length."""
    cells = [c for c in table if _p50(c, "ttft") is not None]
    if not cells:
        return None
    traces = []
    for number, length in enumerate(sorted({c.input_length or 0 for c in cells})):
        points = sorted((c for c in cells if (c.input_length or 0) == length), key=lambda c: c.batch_size or 0)
        colour = COLOURS[number % len(COLOURS)]
        symbols = ["circle" if _valid(c) else "circle-open" for c in points]
        for metric, dash, axis in (("ttft", "solid", "y"), ("tpot", "dash", "y2")):
            usable = [(c, s) for c, s in zip(points, symbols) if _p50(c, metric) is not None]
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines+markers",
                    "name": f"{metric.upper()} in {length}",
                    "yaxis": axis,
                    "x": [c.batch_size for c, _ in usable],
                    "y": _round(_p50(c, metric) for c, _ in usable),
                    "hovertemplate": f"{metric.upper()} p50, input {length}, bs %{{x}}: %{{y:.4g}} ms<extra></extra>",
                    "line": {"color": colour, "dash": dash},
                    "marker": {
                        "size": 8,
                        "color": colour,
                        "symbol": [s for _, s in usable],
                        "line": {"color": colour, "width": 2},
                    },
                }
            )
    sizes = sorted({c.batch_size or 0 for c in cells})
    return {
        "data": traces,
        "layout": _layout(
            "TTFT and TPOT vs batch size (p50; hollow = invalid verdict)",
            WIDTH,
            HEIGHT,
            xaxis=_axis("batch size", type="log", tickvals=sizes, ticktext=[str(b) for b in sizes]),
            yaxis=_axis("TTFT (ms, solid)", rangemode="tozero"),
            yaxis2=_axis("TPOT (ms, dashed)", overlaying="y", side="right", rangemode="tozero", showgrid=False),
        ),
    }


def _label(row: LLMRow) -> str:
    if row.scheduled:
        return f"{row.scenario} @{row.target_qps:g} req/s"
    return f"bs {row.batch_size} in {row.input_length}"


def frontier_plot(rows: Sequence[LLMRow]) -> dict | None:
    """Output tokens/s against TPOT p50 over every cell and server row; the frontier joined."""
    usable = [
        (r, r.output_tokens_per_s, tpot)
        for r in rows
        if r.output_tokens_per_s is not None and (tpot := _p50(r, "tpot")) is not None
    ]
    if len(usable) < 2:
        return None
    points = [(float(tpot), float(rate)) for _, rate, tpot in usable]
    front = pareto_front(points)
    return {
        "data": [
            {
                "type": "scatter",
                "mode": "markers+text",
                "name": "cells and server rows",
                "x": _round(p[0] for p in points),
                "y": _round(p[1] for p in points),
                "text": [_label(r) for r, _, _ in usable],
                "textposition": "top right",
                "textfont": {"size": 9},
                "cliponaxis": False,
                "marker": {
                    "color": "#888888",
                    "size": 7,
                    "symbol": ["circle" if _valid(r) else "circle-open" for r, _, _ in usable],
                },
                "hovertemplate": "%{text}<br>TPOT %{x:.4g} ms, %{y:.4g} output tokens/s<extra></extra>",
            },
            frontier_trace(points, front, "TPOT %{x:.4g} ms, %{y:.4g} output tokens/s"),
        ],
        "layout": _layout(
            "Throughput-latency frontier (generation)",
            WIDTH,
            HEIGHT,
            xaxis=_axis("TPOT p50 (ms per output token)"),
            yaxis=_axis("output tokens/s", rangemode="tozero"),
        ),
    }


def llm_figures(llm: LLMBlock | None) -> list[tuple[str, dict | None]]:
    """(plot name, figure or None) for the page; [] for a result without an ``llm`` block, and for a served
    LLM's (its rows are load steps over HTTP: ``report/serving.py::add_steps`` draws them)."""
    if llm is None or (llm.serving and not llm.table):
        return []
    return [
        ("LLM TTFT and TPOT vs batch size", ttft_tpot_plot(llm.table)),
        ("LLM throughput-latency frontier", frontier_plot(llm.rows)),
    ]
