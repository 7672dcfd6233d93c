"""report.html's charts: one plotly figure spec per plot, a plain dict {"data": [...], "layout": {...}}.

The specs are built here and serialised as JSON (no plotly.graph_objects: their validation
costs more than the rest of the report); the browser draws them with the plotly.js bundle
that ``page`` inlines. Only the trace types of ``TRACE_TYPES`` are used, so the page carries
plotly.js's basic bundle (scatter, bar, pie), not the whole library: a chart that needs
another type needs a bundle that has it (``page.PLOTLY_BUNDLE``). Long series are thinned
(``LATENCY_POINTS``, ``TIMELINE_POINTS``) so the page stays small whatever a run's length.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from common.stats import pareto_front  # the one frontier: a serving run's (common/serving_record.py) too

if TYPE_CHECKING:
    from common.record import CaseResult, PerformanceRow
    from common.summary_record import Repetitions, Row

# The trace types the charts use: each must be in the inlined bundle (plotly.js-basic-dist-min).
TRACE_TYPES = ("scatter", "bar")
TOP_OPS = 12
# Colours of the shaded phases in the timeline.
PHASE_COLOURS = {"validation": "#9ecae1", "inference": "#a1d99b", "performance": "#fdd0a2"}

WIDTH, HEIGHT = 576, 330  # px, the size of the small plots (the matplotlib PNGs were 6 x 3.4 in at 96 dpi)
LATENCY_POINTS = 500  # per CDF curve
TIMELINE_POINTS = 2000  # per monitor series
FONT = {"family": "system-ui, -apple-system, 'Segoe UI', sans-serif", "size": 11, "color": "#222"}
GRID = "#e6e6e6"
COLOURS = [
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
]  # plotly's and matplotlib's


def figure_layout(title: str, width: int, height: int, **more: Any) -> dict:
    """A chart's layout in the report's style (title left, white, small fonts), ``more`` added or replacing."""
    layout = {
        "title": {
            "text": title,
            "font": {"size": 13},
            "x": 0.015,
            "xanchor": "left",
        },  # left: the modebar is on the right
        "width": width,
        "height": height,
        "margin": {"l": 60, "r": 16, "t": 40, "b": 46},
        "font": FONT,
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "hovermode": "closest",
        "legend": {"font": {"size": 10}, "bgcolor": "rgba(255,255,255,0.75)"},
    }
    layout.update(more)
    return layout


def verdict_symbols(valid: Iterable[bool]) -> list[str]:
    """A point per row: a filled circle for a valid verdict, a hollow one for an INVALID one."""
    return ["circle" if ok else "circle-open" for ok in valid]


def verdict_marker(size: int, colour: str, valid: Iterable[bool]) -> dict:
    """Markers of ``colour``, hollow where the verdict is INVALID (``verdict_symbols``), outlined in ``colour``."""
    return {"size": size, "color": colour, "symbol": verdict_symbols(valid), "line": {"color": colour, "width": 2}}


def lower_right_legend(font_size: int) -> dict:
    """A legend inside the plot's lower right corner, on a translucent white ground."""
    return {
        "x": 1,
        "xanchor": "right",
        "y": 0.02,
        "yanchor": "bottom",
        "font": {"size": font_size},
        "bgcolor": "rgba(255,255,255,0.75)",
    }


def frontier_trace(points: list[tuple[float, float]], front: list[int], units: str) -> dict:
    """The throughput-latency frontier (``pareto_front``'s points) joined by a red line; ``units``
    names the hover's two figures, e.g. ``%{x:.4g} ms, %{y:.4g} samples/s``."""
    return {
        "type": "scatter",
        "mode": "lines+markers",
        "name": "frontier",
        "x": rounded(points[i][0] for i in front),
        "y": rounded(points[i][1] for i in front),
        "line": {"color": "#d62728", "width": 2},
        "marker": {"color": "#d62728", "size": 8},
        "hovertemplate": f"frontier: {units}<extra></extra>",
    }


def chart(data: list[dict], title: str, *, width: int = WIDTH, height: int = HEIGHT, **more: Any) -> dict:
    """A figure spec: ``data``'s traces in a ``figure_layout`` (``more`` added to it)."""
    return {"data": data, "layout": figure_layout(title, width, height, **more)}


def axis(title: str | None = None, **more: Any) -> dict:
    """An axis in the report's style (framed, light grid, ticks outside), ``more`` added or replacing."""
    axis = {
        "automargin": True,
        "showline": True,
        "linecolor": "#999",
        "mirror": True,
        "gridcolor": GRID,
        "zeroline": False,
        "ticks": "outside",
    }
    if title:
        axis["title"] = {"text": title}
    axis.update(more)
    return axis


def rounded(values: Any, digits: int = 5) -> list[float]:
    """Floats to ``digits`` significant digits: the JSON is a third of the size of repr's 17."""
    return [float(f"{v:.{digits}g}") for v in values]


def row_label(row: PerformanceRow | Row) -> str:
    """A performance row as its charts and tables name it: ``bs 4 offline x2 @100``."""
    label = f"bs {row.batch_size} {row.scenario}"
    if row.clients != 1:
        label += f" x{row.clients}"
    if row.target_qps is not None:
        label += f" @{row.target_qps:.3g}"
    return label


def throughput_plot(rows: Sequence[Row]) -> dict | None:
    """qps against batch size, one line per scenario x clients; hollow markers = invalid rows."""
    measured = [r for r in rows if r.qps is not None]
    if not measured:
        return None
    series: dict[str, list[Row]] = {}
    for row in measured:
        series.setdefault(f"{row.scenario} x{row.clients}", []).append(row)
    traces = []
    for number, (name, points) in enumerate(series.items()):
        points.sort(key=lambda r: r.batch_size)
        valid = [p.verdict.valid for p in points]
        colour = COLOURS[number % len(COLOURS)]
        traces.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": name,
                "x": [p.batch_size for p in points],
                "y": rounded(p.qps for p in points),
                "text": [f"{row_label(p)}: {'valid' if v else 'INVALID'}" for p, v in zip(points, valid)],
                "hovertemplate": "%{text}<br>%{y:.4g} samples/s<extra></extra>",
                "line": {"color": colour},
                "marker": verdict_marker(9, colour, valid),
            }
        )
    sizes = sorted({r.batch_size for r in measured})
    return chart(
        traces,
        "Throughput vs batch size (hollow = invalid verdict)",
        xaxis=axis("batch size", type="log", tickvals=sizes, ticktext=[str(b) for b in sizes]),
        yaxis=axis("throughput (samples/s)", rangemode="tozero"),
    )


def repetitions_plot(block: Repetitions | None) -> dict | None:
    """A case run N times (run.py --repeat): each figure's repetitions as a strip, relative to their
    geometric mean (1.0), with the t-interval across them as an error bar; hollow = an INVALID repetition."""
    figures = [f for f in (block.figures if block else ()) if f.geomean]
    if block is None or not figures:
        return None
    names = [f"{f.row} {f.figure}" for f in figures]
    strips = {
        "type": "scatter",
        "mode": "markers",
        "name": "repetitions",
        "x": [v / f.geomean for f in figures for v in f.values],
        "y": [name for name, f in zip(names, figures) for _ in f.values],
        "text": [f"repetition {k}: {v:.4g} {f.unit}" for f in figures for k, v in enumerate(f.values, 1)],
        "hovertemplate": "%{text}<extra></extra>",
        "marker": {
            "size": 9,
            "color": COLOURS[0],
            "symbol": verdict_symbols(ok for f in figures for ok in f.valid),
        },
    }
    spans = [(f, f.ci95) for f in figures if f.ci95]
    means = {
        "type": "scatter",
        "mode": "markers",
        "name": "geometric mean ± 95 % across repetitions",
        "x": [1.0] * len(spans),
        "y": [f"{f.row} {f.figure}" for f, _ in spans],
        "error_x": {
            "type": "data",
            "symmetric": False,
            "array": [ci[1] / f.geomean - 1 for f, ci in spans],
            "arrayminus": [1 - ci[0] / f.geomean for f, ci in spans],
        },
        "marker": {"size": 11, "color": COLOURS[1 % len(COLOURS)], "symbol": "line-ns-open"},
    }
    return chart(
        [strips, means],
        f"{block.count} repetitions: each figure over its geometric mean (hollow = invalid)",
        height=max(HEIGHT, 60 + 28 * len(figures)),
        xaxis=axis("figure / geometric mean of its repetitions"),
        yaxis=axis(None, automargin=True),
    )


def ecdf_points(values: Any, limit: int = LATENCY_POINTS) -> tuple[Any, Any]:
    """(ms, fraction) of the empirical CDF of ``values`` (ns) at no more than ``limit`` of its
    steps: evenly spaced ranks for the body, geometrically spaced ones toward the slowest query
    for the tail; the first and last steps always. Every point lies on the exact CDF."""
    import numpy as np

    ms = np.sort(np.asarray(values, dtype=np.float64)) / 1e6
    n = len(ms)
    if n <= limit:
        index = np.arange(n)
    else:
        tail = limit // 4
        body = np.linspace(0, n - 1, limit - tail)
        top = n - np.geomspace(1, n, tail)  # n-1 ... 0, dense near n-1
        index = np.unique(np.clip(np.concatenate([body, top]).round(), 0, n - 1).astype(np.int64))
    return ms[index], (index + 1) / n


def latency_plot(rows: Sequence[Row], raw: dict, inference_ns: Any = None) -> dict | None:
    """Empirical CDF of per-query latency (ms, log scale) for each row and the inference pass."""
    curves = []
    if inference_ns is not None and len(inference_ns):
        curves.append(("FlagPerf inference pass (core)", inference_ns))
    for index, row in enumerate(rows):
        values = raw.get(f"performance_{index}")
        if values is not None and len(values):
            curves.append((row_label(row), values))
    if not curves:
        return None
    traces = []
    for label, values in curves:
        xs, ys = ecdf_points(values)
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "line": {"shape": "hv", "width": 1.5},
                "name": f"{label} (n={len(values)})",
                "x": rounded(xs.tolist()),
                "y": [round(y, 6) for y in ys.tolist()],
                "hovertemplate": "%{x:.4g} ms: %{y:.2%} of queries<extra>" + label + "</extra>",
            }
        )
    marks = (0.5, 0.9, 0.99)
    return chart(
        traces,
        "Latency distribution (CDF)",
        xaxis=axis("latency per query (ms, log scale)", type="log"),
        yaxis=axis("fraction of queries", range=[0, 1.01]),
        shapes=[
            {
                "type": "line",
                "xref": "paper",
                "x0": 0,
                "x1": 1,
                "yref": "y",
                "y0": q,
                "y1": q,
                "line": {"color": "grey", "width": 0.8, "dash": "dot"},
            }
            for q in marks
        ],
        annotations=[
            {
                "xref": "paper",
                "x": 0,
                "yref": "y",
                "y": q,
                "text": f"p{int(q * 100)}",
                "showarrow": False,
                "xanchor": "left",
                "yanchor": "bottom",
                "font": {"size": 9, "color": "grey"},
            }
            for q in marks
        ],
        legend=lower_right_legend(9),
    )


def _headline_latency(row: Row) -> tuple[float | None, str]:
    for name in ("p90", "p50", "mean"):
        value = getattr(row.latency_ms, name) if row.latency_ms is not None else None
        if value is not None:
            return value, name
    return None, ""


def labelled_points(points: list[tuple[float, float]], text: list[str], units: str, name: str) -> dict:
    """A frontier plot's points, each labelled with ``text`` (hover: ``units``, as ``frontier_trace``'s)."""
    middle = (min(p[0] for p in points) + max(p[0] for p in points)) / 2
    return {
        "type": "scatter",
        "mode": "markers+text",
        "name": name,
        "showlegend": False,
        "x": rounded(p[0] for p in points),
        "y": rounded(p[1] for p in points),
        "text": text,
        "textposition": ["top left" if p[0] > middle else "top right" for p in points],  # the labels stay inside
        "textfont": {"size": 9},
        "cliponaxis": False,
        "marker": {"color": "#888888", "size": 7},
        "hovertemplate": f"%{{text}}<br>{units}<extra></extra>",
    }


def frontier_plot(rows: Sequence[Row]) -> dict | None:
    """Throughput against latency over every row; the frontier joined. Needs two rows."""
    measured = [(r, r.qps, *_headline_latency(r)) for r in rows if r.qps is not None]
    usable = [(r, qps, lat, name) for r, qps, lat, name in measured if lat is not None and qps is not None]
    if len(usable) < 2:
        return None
    points = [(float(lat), float(qps)) for _, qps, lat, _ in usable]
    front = pareto_front(points)
    units = "%{x:.4g} ms, %{y:.4g} samples/s"
    rows_trace = labelled_points(points, [f"{row_label(r)} ({name})" for r, _, _, name in usable], units, "rows")
    front_trace = frontier_trace(points, front, units)
    return chart(
        [rows_trace, front_trace],
        "Throughput-latency frontier",
        xaxis=axis("latency per query (ms: p90, else p50, else mean)"),
        yaxis=axis("throughput (samples/s)"),
        legend=lower_right_legend(10),
    )


def phase_spans(result: CaseResult) -> list[tuple[str, str, float, float]]:
    """(kind, label, start, end) in unix seconds of every measured phase of a result."""
    spans = []
    for phase, block in (("validation", result.validation), ("inference", result.inference)):
        if block is not None and block.started_at_unix is not None and block.finished_at_unix is not None:
            spans.append((phase, phase, block.started_at_unix, block.finished_at_unix))
    for row in result.performance:
        if row.started_at_unix is not None and row.finished_at_unix is not None:
            spans.append(("performance", row_label(row), row.started_at_unix, row.finished_at_unix))
    return spans


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def decimate(points: list[tuple[float, float]], limit: int = TIMELINE_POINTS) -> list[tuple[float, float]]:
    """At most ``limit`` of the (t, value) points, in time order: the lowest and the highest
    point of each of limit/2 runs of consecutive points, so that no spike or dip is lost."""
    if len(points) <= limit:
        return points
    buckets, n, out = limit // 2, len(points), []
    for b in range(buckets):
        chunk = points[b * n // buckets : (b + 1) * n // buckets]
        low = min(chunk, key=lambda p: p[1])
        high = max(chunk, key=lambda p: p[1])
        out.extend(sorted({low, high}))
    return out


def timeline_plot(
    sys_samples: list[dict], vendor_samples: list[dict], spans: list[tuple[str, str, float, float]]
) -> dict | None:
    """CPU/accelerator utilisation, memory and power over the case, one panel each on a shared
    time axis, the measured phases shaded."""
    samples = [s for s in sys_samples + vendor_samples if _number(s.get("timestamp"))]
    if not samples:
        return None
    t0 = min(s["timestamp"] for s in samples)
    panels = _monitor_panels(sys_samples, vendor_samples)
    count, gap = len(panels), 0.05
    share = (1 - gap * (count - 1)) / count
    height = int(96 * (1.9 * count + 0.6)) + 60
    # The legend goes under the x axis title: 44 px below the plot area, in plot-area fractions.
    layout = figure_layout(
        "Monitors over the case (shaded: measured phases)",
        672,
        height,
        legend={
            "orientation": "h",
            "x": 0,
            "xanchor": "left",
            "y": -44 / (height - 40 - 100),
            "yanchor": "top",
            "font": {"size": 10},
        },
        margin={"l": 60, "r": 16, "t": 40, "b": 100},
    )
    traces: list[dict] = []
    shapes: list[dict] = []
    for number, (ylabel, lines, yrange) in enumerate(panels, start=1):
        suffix = "" if number == 1 else str(number)
        top = 1 - (number - 1) * (share + gap)
        layout[f"xaxis{suffix}"] = axis(
            "seconds since the first monitor sample" if number == count else None,
            anchor=f"y{suffix}",
            showticklabels=number == count,
            **({"matches": "x"} if number > 1 else {}),
        )
        layout[f"yaxis{suffix}"] = axis(ylabel, anchor=f"x{suffix}", domain=[max(0.0, top - share), top], **yrange)
        traces += _monitor_traces(lines, t0, suffix)
        shapes += _phase_shapes(spans, t0, suffix, legend=number == 1)
    layout["shapes"] = shapes
    return {"data": traces, "layout": layout}


def _monitor_panels(
    sys_samples: list[dict], vendor_samples: list[dict]
) -> list[tuple[str, list[tuple[list[dict], str, str]], dict[str, Any]]]:
    """The timeline's panels: (y axis title, its lines as (samples, key, name), the axis's range options);
    power only where a monitor reads it."""
    panels: list[tuple[str, list[tuple[list[dict], str, str]], dict[str, Any]]] = [
        (
            "utilisation %",
            [(sys_samples, "cpu_percent", "system CPU %"), (vendor_samples, "utilization", "device utilisation %")],
            {"range": [0, 105]},
        ),
        (
            "memory (GiB)",
            [
                (sys_samples, "mem_used_gib", "system memory used"),
                (vendor_samples, "mem_used_gib", "device memory used"),
            ],
            {"rangemode": "tozero"},
        ),
    ]
    if any(_number(s.get("power_w")) for s in sys_samples + vendor_samples):
        panels.append(
            ("power (W)", [(sys_samples, "power_w", "package power"), (vendor_samples, "power_w", "device power")], {})
        )
    return panels


def _monitor_traces(lines: list[tuple[list[dict], str, str]], t0: float, suffix: str) -> list[dict]:
    """One line per (samples, key, label) that has readings, on the panel's axes; long series decimated."""
    traces = []
    for source, key, label in lines:
        points = sorted(
            (s["timestamp"] - t0, s[key]) for s in source if _number(s.get(key)) and _number(s.get("timestamp"))
        )
        if points:
            points = decimate(points)
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": label,
                    "xaxis": f"x{suffix}",
                    "yaxis": f"y{suffix}",
                    "x": [round(p[0], 3) for p in points],
                    "y": rounded(p[1] for p in points),
                    "line": {"width": 1.2},
                }
            )
    return traces


def _phase_shapes(spans: list[tuple[str, str, float, float]], t0: float, suffix: str, legend: bool) -> list[dict]:
    """The measured phases as shaded rectangles on one panel; with ``legend``, one legend entry per kind of phase."""
    shapes, seen = [], set()
    for kind, label, start, end in spans:
        shape = {
            "type": "rect",
            "xref": f"x{suffix}",
            "yref": f"y{suffix} domain",
            "x0": round(start - t0, 3),
            "x1": round(end - t0, 3),
            "y0": 0,
            "y1": 1,
            "fillcolor": PHASE_COLOURS[kind],
            "opacity": 0.5,
            "line": {"width": 0},
            "layer": "below",
            "name": label,
        }
        if legend and kind not in seen:
            seen.add(kind)
            shape.update(showlegend=True, name=f"{kind} (measured)", legendgroup=kind)
        shapes.append(shape)
    return shapes


def top_ops_plot(ops: list[dict]) -> dict | None:
    """The per-op profile's top ``TOP_OPS`` ops by total time, as horizontal bars."""
    ops = [o for o in ops if o.get("total_ms") is not None][:TOP_OPS]
    if not ops:
        return None
    labels = [f"{o.get('op_type', '?')}: {str(o.get('node', ''))[-40:]}" for o in ops]
    positions = list(range(len(ops)))  # positions, not the labels, so that two equal labels stay two bars
    bars = {
        "type": "bar",
        "orientation": "h",
        "x": rounded(o["total_ms"] for o in ops),
        "y": positions,
        "text": [f"{o.get('op_type', '?')}: {o.get('node', '')}" for o in ops],
        "textposition": "none",
        "hovertemplate": "%{text}<br>%{x:.4g} ms<extra></extra>",
        "marker": {"color": "#6baed6"},
        "showlegend": False,
    }
    return chart(
        [bars],
        f"Top {len(ops)} ops by time (per-op profile)",
        width=720,
        height=int(96 * (0.3 * len(ops) + 1.0)) + 24,
        xaxis=axis("total time in the profiled calls (ms)", rangemode="tozero"),
        yaxis=axis(
            None, tickvals=positions, ticktext=labels, autorange="reversed", tickfont={"size": 9}, showgrid=False
        ),
        bargap=0.25,
    )
