"""report.html: one self-contained page per run, for people.

Built from ``summary.json`` and, per case and host, the files beside it:
``result.json``, ``latencies.npz`` (raw per-query latencies, ``tools.results.result``)
and the monitors' JSON lines. Every plot is an interactive plotly chart drawn by the
browser from a JSON figure spec in the page; plotly.min.js (from the installed plotly
package) is inlined once, and the page loads no script, font or style from elsewhere,
so it opens from a file with no network. Sections, in reading order:
  1. the run (vendor, mode, hosts, counts) and the summary table with verdicts;
  2. per case and host: throughput against batch size, latency CDF per row,
     the throughput-latency frontier (when more than one row), the monitors'
     timeline with the measured phases shaded, numeric check and audits, the
     compile report and the top ops of the per-op profile;
  3. the environment: the checkout's git commit and each host's fingerprint.
A part whose data is missing says so in one line instead of plotting nothing.
"""

from __future__ import annotations

import functools
import json
import math
import re
import subprocess
from pathlib import Path
from typing import Any

from common.files import atomic_path
from common.record import RESULT_FILE, Key, read_latencies
from common.sampler import read_samples
from utils.results.aggregate import with_aggregates
from utils.results.summary import _accuracy_cell, _fmt, _mfu_cell, _percentile_cell, memory_kind

REPORT_FILE = "report.html"
TOP_OPS = 12
# Colours of the shaded phases in the timeline.
PHASE_COLOURS = {"validation": "#9ecae1", "inference": "#a1d99b", "performance": "#fdd0a2"}


# ---- plots -----------------------------------------------------------------------
# Every plot is a plotly figure spec, a plain dict {"data": [...], "layout": {...}} built here
# and serialised with json.dumps (no plotly.graph_objects: their validation costs more than
# the rest of the report). The browser draws them: plotly.min.js, read from the installed
# plotly package, is inlined once in the page with one <script type="application/json"> spec
# per plot, so the Python side only sorts and downsamples the data. Long series are thinned
# (LATENCY_POINTS, TIMELINE_POINTS) so the page stays small whatever a run's length.
WIDTH, HEIGHT = 576, 330  # px, the size of the small plots (the matplotlib PNGs were 6 x 3.4 in at 96 dpi)
LATENCY_POINTS = 500  # per CDF curve
TIMELINE_POINTS = 2000  # per monitor series
FONT = {"family": "system-ui, -apple-system, 'Segoe UI', sans-serif", "size": 11, "color": "#222"}
GRID = "#e6e6e6"
COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]  # plotly's and matplotlib's


def _layout(title: str, width: int, height: int, **more: Any) -> dict:
    layout = {
        "title": {"text": title, "font": {"size": 13}, "x": 0.015, "xanchor": "left"},  # left: the modebar is on the right
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


def _axis(title: str | None = None, **more: Any) -> dict:
    axis = {"automargin": True, "showline": True, "linecolor": "#999", "mirror": True, "gridcolor": GRID, "zeroline": False, "ticks": "outside"}
    if title:
        axis["title"] = {"text": title}
    axis.update(more)
    return axis


def _round(values: Any, digits: int = 5) -> list[float]:
    """Floats to ``digits`` significant digits: the JSON is a third of the size of repr's 17."""
    return [float(f"{v:.{digits}g}") for v in values]


def _row_label(row: dict) -> str:
    label = f"bs {row['batch_size']} {row['scenario']}"
    if row.get("clients", 1) != 1:
        label += f" x{row['clients']}"
    if row.get("target_qps") is not None:
        label += f" @{row['target_qps']:.3g}"
    return label


def _valid(row: dict) -> bool:
    """A row is drawn hollow only when its verdict says invalid."""
    return (row.get("verdict") or {}).get("valid", True) is not False


def throughput_plot(rows: list[dict]) -> dict | None:
    """qps against batch size, one line per scenario x clients; hollow markers = invalid rows."""
    rows = [r for r in rows if r.get("qps") is not None]
    if not rows:
        return None
    series: dict[str, list[dict]] = {}
    for row in rows:
        series.setdefault(f"{row['scenario']} x{row['clients']}", []).append(row)
    traces = []
    for number, (name, points) in enumerate(series.items()):
        points.sort(key=lambda r: r["batch_size"])
        valid = [_valid(p) for p in points]
        colour = COLOURS[number % len(COLOURS)]
        traces.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": name,
                "x": [p["batch_size"] for p in points],
                "y": _round(p["qps"] for p in points),
                "text": [f"{_row_label(p)}: {'valid' if v else 'INVALID'}" for p, v in zip(points, valid)],
                "hovertemplate": "%{text}<br>%{y:.4g} samples/s<extra></extra>",
                "line": {"color": colour},
                "marker": {"size": 9, "color": colour, "symbol": ["circle" if v else "circle-open" for v in valid], "line": {"color": colour, "width": 2}},
            }
        )
    sizes = sorted({r["batch_size"] for r in rows})
    return {
        "data": traces,
        "layout": _layout(
            "Throughput vs batch size (hollow = invalid verdict)",
            WIDTH,
            HEIGHT,
            xaxis=_axis("batch size", type="log", tickvals=sizes, ticktext=[str(b) for b in sizes]),
            yaxis=_axis("throughput (samples/s)", rangemode="tozero"),
        ),
    }


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


def latency_plot(rows: list[dict], raw: dict, inference_ns: Any = None) -> dict | None:
    """Empirical CDF of per-query latency (ms, log scale) for each row and the inference pass."""
    curves = []
    if inference_ns is not None and len(inference_ns):
        curves.append(("FlagPerf inference pass (core)", inference_ns))
    for index, row in enumerate(rows):
        values = raw.get(f"performance_{index}")
        if values is not None and len(values):
            curves.append((_row_label(row), values))
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
                "x": _round(xs.tolist()),
                "y": [round(y, 6) for y in ys.tolist()],
                "hovertemplate": "%{x:.4g} ms: %{y:.2%} of queries<extra>" + label + "</extra>",
            }
        )
    marks = (0.5, 0.9, 0.99)
    return {
        "data": traces,
        "layout": _layout(
            "Latency distribution (CDF)",
            WIDTH,
            HEIGHT,
            xaxis=_axis("latency per query (ms, log scale)", type="log"),
            yaxis=_axis("fraction of queries", range=[0, 1.01]),
            shapes=[
                {"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": q, "y1": q, "line": {"color": "grey", "width": 0.8, "dash": "dot"}}
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
            legend={"x": 1, "xanchor": "right", "y": 0.02, "yanchor": "bottom", "font": {"size": 9}, "bgcolor": "rgba(255,255,255,0.75)"},
        ),
    }


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both latency (lower) and
    throughput (higher), ordered by latency: the throughput-latency frontier."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front, best = [], float("-inf")
    for i in order:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return front


def _headline_latency(row: dict) -> tuple[float | None, str]:
    latency = row.get("latency_ms") or {}
    for name in ("p90", "p50", "mean"):
        if latency.get(name) is not None:
            return latency[name], name
    return None, ""


def frontier_plot(rows: list[dict]) -> dict | None:
    """Throughput against latency over every row; the frontier joined. Needs two rows."""
    usable = [(r, *_headline_latency(r)) for r in rows if r.get("qps") is not None]
    usable = [(r, lat, name) for r, lat, name in usable if lat is not None]
    if len(usable) < 2:
        return None
    points = [(lat, r["qps"]) for r, lat, _ in usable]
    front = pareto_front(points)
    middle = (min(p[0] for p in points) + max(p[0] for p in points)) / 2
    rows_trace = {
        "type": "scatter",
        "mode": "markers+text",
        "name": "rows",
        "showlegend": False,
        "x": _round(p[0] for p in points),
        "y": _round(p[1] for p in points),
        "text": [f"{_row_label(r)} ({name})" for r, _, name in usable],
        "textposition": ["top left" if p[0] > middle else "top right" for p in points],  # the labels stay inside
        "textfont": {"size": 9},
        "cliponaxis": False,
        "marker": {"color": "#888888", "size": 7},
        "hovertemplate": "%{text}<br>%{x:.4g} ms, %{y:.4g} samples/s<extra></extra>",
    }
    front_trace = {
        "type": "scatter",
        "mode": "lines+markers",
        "name": "frontier",
        "x": _round(points[i][0] for i in front),
        "y": _round(points[i][1] for i in front),
        "line": {"color": "#d62728", "width": 2},
        "marker": {"color": "#d62728", "size": 8},
        "hovertemplate": "frontier: %{x:.4g} ms, %{y:.4g} samples/s<extra></extra>",
    }
    return {
        "data": [rows_trace, front_trace],
        "layout": _layout(
            "Throughput-latency frontier",
            WIDTH,
            HEIGHT,
            xaxis=_axis("latency per query (ms: p90, else p50, else mean)"),
            yaxis=_axis("throughput (samples/s)"),
            legend={"x": 1, "xanchor": "right", "y": 0.02, "yanchor": "bottom", "font": {"size": 10}, "bgcolor": "rgba(255,255,255,0.75)"},
        ),
    }


def phase_spans(result: dict) -> list[tuple[str, str, float, float]]:
    """(kind, label, start, end) in unix seconds of every measured phase of a result."""
    spans = []
    for phase in ("validation", "inference"):
        block = result.get(phase) or {}
        if block.get("started_at_unix") is not None and block.get("finished_at_unix") is not None:
            spans.append((phase, phase, block["started_at_unix"], block["finished_at_unix"]))
    for row in result.get("performance") or []:
        if row.get("started_at_unix") is not None and row.get("finished_at_unix") is not None:
            spans.append(("performance", _row_label(row), row["started_at_unix"], row["finished_at_unix"]))
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


def timeline_plot(sys_samples: list[dict], vendor_samples: list[dict], spans: list[tuple[str, str, float, float]]) -> dict | None:
    """CPU/accelerator utilisation, memory and power over the case, measured phases shaded."""
    samples = [s for s in sys_samples + vendor_samples if _number(s.get("timestamp"))]
    if not samples:
        return None
    t0 = min(s["timestamp"] for s in samples)
    power = [s for s in sys_samples + vendor_samples if _number(s.get("power_w"))]
    panels = [
        ("utilisation %", [(sys_samples, "cpu_percent", "system CPU %"), (vendor_samples, "utilization", "device utilisation %")], {"range": [0, 105]}),
        (
            "memory (GiB)",
            [(sys_samples, "mem_used_gib", "system memory used"), (vendor_samples, "mem_used_gib", "device memory used")],
            {"rangemode": "tozero"},
        ),
    ]
    if power:
        panels.append(("power (W)", [(sys_samples, "power_w", "package power"), (vendor_samples, "power_w", "device power")], {}))
    count, gap = len(panels), 0.05
    share = (1 - gap * (count - 1)) / count
    traces: list[dict] = []
    shapes: list[dict] = []
    height = int(96 * (1.9 * count + 0.6)) + 60
    # The legend goes under the x axis title: 44 px below the plot area, in plot-area fractions.
    layout = _layout(
        "Monitors over the case (shaded: measured phases)",
        672,
        height,
        legend={"orientation": "h", "x": 0, "xanchor": "left", "y": -44 / (height - 40 - 100), "yanchor": "top", "font": {"size": 10}},
        margin={"l": 60, "r": 16, "t": 40, "b": 100},
    )
    seen: set[str] = set()
    for number, (ylabel, lines, yrange) in enumerate(panels, start=1):
        suffix = "" if number == 1 else str(number)
        top = 1 - (number - 1) * (share + gap)
        layout[f"xaxis{suffix}"] = _axis(
            "seconds since the first monitor sample" if number == count else None,
            anchor=f"y{suffix}",
            showticklabels=number == count,
            **({"matches": "x"} if number > 1 else {}),
        )
        layout[f"yaxis{suffix}"] = _axis(ylabel, anchor=f"x{suffix}", domain=[max(0.0, top - share), top], **yrange)
        for source, key, label in lines:
            points = sorted((s["timestamp"] - t0, s[key]) for s in source if _number(s.get(key)) and _number(s.get("timestamp")))
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
                        "y": _round(p[1] for p in points),
                        "line": {"width": 1.2},
                    }
                )
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
            if number == 1 and kind not in seen:  # one legend entry per kind of phase
                seen.add(kind)
                shape.update(showlegend=True, name=f"{kind} (measured)", legendgroup=kind)
            shapes.append(shape)
    layout["shapes"] = shapes
    return {"data": traces, "layout": layout}


def top_ops_plot(ops: list[dict]) -> dict | None:
    ops = [o for o in ops if o.get("total_ms") is not None][:TOP_OPS]
    if not ops:
        return None
    labels = [f"{o.get('op_type', '?')}: {str(o.get('node', ''))[-40:]}" for o in ops]
    positions = list(range(len(ops)))  # positions, not the labels, so that two equal labels stay two bars
    bars = {
        "type": "bar",
        "orientation": "h",
        "x": _round(o["total_ms"] for o in ops),
        "y": positions,
        "text": [f"{o.get('op_type', '?')}: {o.get('node', '')}" for o in ops],
        "textposition": "none",
        "hovertemplate": "%{text}<br>%{x:.4g} ms<extra></extra>",
        "marker": {"color": "#6baed6"},
        "showlegend": False,
    }
    return {
        "data": [bars],
        "layout": _layout(
            f"Top {len(ops)} ops by time (per-op profile)",
            720,
            int(96 * (0.3 * len(ops) + 1.0)) + 24,
            xaxis=_axis("total time in the profiled calls (ms)", rangemode="tozero"),
            yaxis=_axis(None, tickvals=positions, ticktext=labels, autorange="reversed", tickfont={"size": 9}, showgrid=False),
            bargap=0.25,
        ),
    }


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
    """plotly.min.js from the installed plotly package (its only use here), or None without it.
    The package is found, not imported (importlib.resources would cost more than the read)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("plotly")
        folders = list(spec.submodule_search_locations or []) if spec else []
        text = next((Path(f) / "package_data" / "plotly.min.js" for f in folders), Path("/nonexistent")).read_text(encoding="utf-8")
    except (ImportError, ValueError, OSError):
        return None
    import markupsafe  # jinja2's: a Markup is placed in the page as it is, not escaped or copied

    # Inlined in a <script>: nothing in it may end the element (plotly.js 4 has no such text).
    return markupsafe.Markup(re.sub(r"</(script)", r"<\\/\1", text, flags=re.IGNORECASE))


# ---- data --------------------------------------------------------------------------
def git_commit(path: Path) -> str | None:
    """The checkout's commit (``+dirty`` when it has changes), or None outside git."""
    try:
        commit = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if commit.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, timeout=10)
        return commit.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def _monitor_files(log_dir: Path) -> tuple[list[dict], list[dict]]:
    sys_samples: list[dict] = []
    vendor_samples: list[dict] = []
    for path in sorted(log_dir.glob("*_monitor.jsonl")):
        samples = read_samples(path) or []
        (sys_samples if path.name == "sys_monitor.jsonl" else vendor_samples).extend(samples)
    return sys_samples, vendor_samples


def _flatten(prefix: str, value: Any, out: list[tuple[str, str]]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), item, out)
    elif isinstance(value, list) and not all(isinstance(v, (str, int, float)) for v in value):
        out.append((prefix, json.dumps(value)[:200]))
    else:
        out.append((prefix, ", ".join(map(str, value)) if isinstance(value, list) else _fmt(value, 4)))


def compile_rows(engine: dict | None) -> list[tuple[str, str]]:
    report = (engine or {}).get("compile_report") or {}
    if not report:
        return []
    segments = report.get("segments") or []
    rows = [
        ("engine", str((engine or {}).get("version") or (engine or {}).get("class") or "-")),
        ("status", _fmt(report.get("compile_status"))),
        ("precision", _fmt(report.get("compile_precision"))),
        ("compile duration (s)", _fmt(report.get("compile_duration"), 3)),
        ("sub-graph coverage sg_percent (%)", _fmt(report.get("sg_percent"), 1)),
        ("nodes", _fmt(report.get("node_count"))),
        ("segments (fallback)", f"{len(segments)} ({sum(bool(s.get('is_fallback')) for s in segments)})"),
        ("fallback ops", ", ".join(map(str, report.get("fallback_ops") or [])) or "none"),
    ]
    if (engine or {}).get("best_batch_sizes"):
        rows.append(("engine's best batch sizes", ", ".join(map(str, engine["best_batch_sizes"]))))
    return rows


def check_rows(result: dict) -> list[tuple[str, str, str]]:
    """(check, passed, detail) for the numeric check and every audit."""
    rows = []
    numeric = result.get("numeric")
    if numeric:
        worst = max((o.get("max_rel") or 0.0 for o in numeric.get("outputs") or []), default=None)
        detail = f"{numeric.get('samples')} samples, largest max_rel {worst:.2e}" if worst is not None else ""
        rows.append(("numeric (engine vs framework)", _passed(numeric.get("passed")), "; ".join(numeric.get("reasons") or []) or detail))
    for audit in result.get("audits") or []:
        rows.append((audit.get("name", "audit"), _passed(audit.get("passed")), audit.get("detail") or ""))
    for row in result.get("performance") or []:
        test01 = row.get("accuracy_in_performance_mode")
        if test01:
            rows.append((f"{test01.get('name')} ({_row_label(row)})", _passed(test01.get("passed")), test01.get("detail") or ""))
    return rows


def _passed(value: Any) -> str:
    return {True: "passed", False: "FAILED", None: "not run"}.get(value, str(value))


def summary_rows(records: list[dict]) -> list[dict]:
    """The summary table's cells, the same figures and n/a reasons as summary.md."""
    rows = []
    for r in records:
        latency = r.get("latency_ms") or {}
        count = r.get("latency_batches")
        ok = r["status"] == "success"
        verdict = r.get("verdict")
        rows.append(
            {
                "case": f"{r['case']}:{r['framework']}",
                "host": r["host"],
                "aggregate": bool(r.get("aggregate")),
                "status": r["status"] if ok else f"{r['status']} at {r.get('failed_step')}",
                "ok": ok,
                "verdict": "-" if verdict is None else ("valid" if verdict["valid"] else "INVALID"),
                "valid": bool(verdict and verdict["valid"]),
                "reasons": (verdict or {}).get("reasons") or ([r.get("error")] if not ok and r.get("error") else []),
                "precision": _fmt(r.get("precision")),
                "bs": _fmt(r.get("batchsize")),
                "core_qps": _fmt(r.get(Key.INFER_CORE_QPS)),
                "whole_qps": _fmt(r.get(Key.INFER_WHOLE_QPS)),
                "val_qps": _fmt(r.get(Key.VAL_CORE_QPS)),
                "p50": _percentile_cell(latency, "p50", count),
                "p90": _percentile_cell(latency, "p90", count),
                "p99": _percentile_cell(latency, "p99", count),
                "val_acc": _accuracy_cell(r.get(Key.VAL_ACC), r.get("accuracy_note")),
                "infer_acc": _accuracy_cell(r.get(Key.INFER_ACC), r.get("accuracy_note")),
                "memory": f"{_fmt(r.get('vendor_usage(GiB)'))}/{_fmt(r.get('vendor_max_mem(GiB)'))}" if r.get("vendor_usage(GiB)") is not None else "-",
                "mfu": _mfu_cell(r.get("MFU"), r.get("mfu_is_estimate")) if ok else "-",
            }
        )
    return rows


def performance_table(rows: list[dict]) -> list[dict]:
    out = []
    for row in rows:
        latency = row.get("latency_ms") or {}
        out.append(
            {
                "label": _row_label(row),
                "qps": _fmt(row.get("qps")),
                "p50": _percentile_cell(latency, "p50", row.get("queries")),
                "p90": _percentile_cell(latency, "p90", row.get("queries")),
                "p99": _percentile_cell(latency, "p99", row.get("queries")),
                "mean": _fmt(latency.get("mean"), 3),
                "queries": row.get("queries"),
                "duration": _fmt(row.get("duration_s"), 2),
                "valid": row["verdict"]["valid"],
                "reasons": row["verdict"]["reasons"],
            }
        )
    return out


def own_benchmark_rows(engine: dict, rows: list[dict]) -> dict | None:
    """A backend's own benchmark() (engine.own_benchmark) beside InferPerf's offline row of the same batch size."""
    own = engine.get("own_benchmark")
    if not own:
        return None
    ours = {r["batch_size"]: r for r in rows if r.get("scenario") == "offline" and r.get("clients") == 1}
    table = []
    for item in own.get("rows") or []:
        row = ours.get(item.get("BS")) or {}
        latency = row.get("latency_ms") or {}
        cells = (row.get("qps"), item.get("QPS"), latency.get("mean"), item.get("AVG Latency"), latency.get("p99"), item.get("P99 Latency"))
        shown = [_fmt(v, 3) if isinstance(v, float) else v if v is not None else "-" for v in cells]
        table.append({"bs": item.get("BS"), "cells": shown, "error": item.get("error")})
    return {"source": own.get("source") or "the engine", "rows": table, "error": own.get("error")}


def case_section(record: dict) -> dict:
    """Everything the page shows for one case on one host."""
    section: dict[str, Any] = {
        "title": f"{record['case']}:{record['framework']} on {record['host']}",
        "anchor": f"{record['case']}-{record['framework']}-{record['host']}".replace(":", "-").replace(".", "-").replace(" ", "-"),
        "status": record["status"],
        "error": record.get("error"),
        "failed_step": record.get("failed_step"),
        "plots": [],
        "missing": [],
        "perf_rows": [],
        "compile": [],
        "ops": [],
        "checks": [],
        "best": None,
        "notes": [],
        "aggregate": bool(record.get("aggregate")),
    }
    rows = record.get("performance") or []
    section["perf_rows"] = performance_table(rows)
    if record.get("aggregate"):
        section["notes"].append(
            f"Aggregate of {', '.join(record.get('hosts') or [])}: throughput is the sum of the hosts, percentiles come "
            "from the hosts' raw latencies pooled"
            + {
                True: " (the hosts' inference phases overlapped).",
                False: "; the hosts' inference phases did NOT overlap, so the sum is a capacity, not a measured load.",
                None: ".",
            }[record.get("concurrent")]
        )
        _add(section, "throughput vs batch size", throughput_plot(rows))
        return section
    log_dir = Path(record["log_dir"]) if record.get("log_dir") else None
    result: dict = {}
    if log_dir and (log_dir / RESULT_FILE).is_file():
        result = json.loads((log_dir / RESULT_FILE).read_text(encoding="utf-8"))
    if record["status"] != "success" or not result:
        section["missing"].append("no result.json: the case did not complete, nothing to plot")
        if log_dir:
            sys_samples, vendor_samples = _monitor_files(log_dir)
            _add(section, "monitor timeline", timeline_plot(sys_samples, vendor_samples, []))
        return section
    raw = read_latencies(log_dir)
    if not raw:
        section["notes"].append("no latencies.npz beside result.json (a result from before raw latencies were kept): latency plots are missing")
    section["best"] = result.get("best")
    _add(section, "throughput vs batch size", throughput_plot(rows))
    _add(section, "latency distribution", latency_plot(rows, raw, raw.get("inference")))
    frontier = frontier_plot(rows)
    if frontier:
        _add(section, "throughput-latency frontier", frontier)
    sys_samples, vendor_samples = _monitor_files(log_dir)
    spans = phase_spans(result)
    if not spans:
        section["notes"].append("result.json has no phase time spans (started_at_unix): phases are not shaded")
    _add(section, "monitor timeline", timeline_plot(sys_samples, vendor_samples, spans))
    engine = result.get("engine") or {}
    section["compile"] = compile_rows(engine)
    section["own_benchmark"] = own_benchmark_rows(engine, rows)
    section["ops"] = (engine.get("performance_data") or [])[:TOP_OPS]
    ops_plot = top_ops_plot(section["ops"])
    if ops_plot:
        _add(section, "top ops", ops_plot)
    section["checks"] = check_rows(result)
    section["notes"].extend(result.get("performance_notes") or [])
    env: list[tuple[str, str]] = []
    _flatten("", result.get("env") or {}, env)
    section["env"] = env
    return section


def _add(section: dict, name: str, figure: dict | None) -> None:
    if figure:
        section["plots"].append({"name": name, "figure": figure})
    else:
        section["missing"].append(f"{name}: no data")


@functools.lru_cache(maxsize=1)
def _template():
    """The page's jinja2 template, compiled once per process (a compiled template renders from any thread)."""
    import jinja2

    return jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True).from_string(TEMPLATE)


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
                "modeBarButtonsToRemove": ["select2d", "lasso2d", "zoomIn2d", "zoomOut2d", "autoScale2d"],
                "toImageButtonOptions": {"filename": f"{section['title']} {plot['name']}", "scale": 2},
            }
            plot.update(id=f"plot{number}", width=figure["layout"]["width"], height=figure["layout"]["height"], spec=script_json(figure))


def render(summary: dict, perf_dir: Path | None = None) -> str:
    records = summary.get("results") or []
    aggregates = summary.get("aggregates") or []
    all_rows = with_aggregates(records, aggregates)
    sections = [case_section(r) for r in all_rows]
    _plot_specs(sections)
    environments: dict[str, list[tuple[str, str]]] = {}
    for section, record in zip(sections, all_rows):
        if section.get("env"):
            environments.setdefault(record["host"], section["env"])
    has_plots = any(s["plots"] for s in sections)
    script = plotly_js() if has_plots else None
    return _template().render(
        summary=summary,
        rows=summary_rows(all_rows),
        sections=sections,
        environments=environments,
        commit=git_commit(perf_dir) if perf_dir else None,
        memory_kind=memory_kind(perf_dir, summary.get("vendor")) if perf_dir else "device memory",
        plotly_js=script,
        plotly_missing=has_plots and not script,
    )


def write_report(run_dir: str | Path, perf_dir: Path | None = None) -> Path:
    """Write ``run_dir``/report.html from its summary.json; returns its path."""
    run_dir = Path(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    html = render(summary, perf_dir)
    path = run_dir / REPORT_FILE
    with atomic_path(path) as tmp:
        tmp.write_text(html, encoding="utf-8")
    return path


TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>InferPerf run {{ summary.run_id }}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1400px; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ccc; margin-top: 2em; } h3 { margin-bottom: 0.3em; }
table { border-collapse: collapse; font-size: 0.8em; margin: 0.5em 0; }
.wide { overflow-x: auto; }
th, td { border: 1px solid #ddd; padding: 3px 6px; text-align: right; } th { background: #f3f3f3; }
td.l, th.l { text-align: left; }
.valid { color: #1a7f37; font-weight: 600; } .invalid { color: #cf222e; font-weight: 600; }
tr.agg td { background: #f6f8fa; font-style: italic; }
.badge { display: inline-block; padding: 2px 8px; border-radius: 10px; margin-right: 6px; font-size: 0.85em; background: #eee; }
.badge.bad { background: #ffebe9; color: #cf222e; } .badge.good { background: #dafbe1; color: #1a7f37; }
.plots { display: flex; flex-wrap: wrap; gap: 12px; } .plots figure { margin: 0; } figcaption { font-size: 0.8em; color: #555; }
div.plot { border: 1px solid #eee; color: #cf222e; font-size: 0.85em; }
.note { color: #555; font-size: 0.9em; } ul.reasons { font-size: 0.85em; margin: 0.2em 0 0.6em; }
nav a { margin-right: 1em; font-size: 0.9em; }
</style>
</head>
<body>
<h1>InferPerf run {{ summary.run_id }}</h1>
<p>vendor <b>{{ summary.vendor }}</b>, mode {{ summary.mode }}, hosts {{ summary.hosts | join(", ") }};
{{ summary.started_at }} &rarr; {{ summary.finished_at }}</p>
<p><span class="badge good">{{ summary.succeeded }} succeeded</span>
<span class="badge {{ 'bad' if summary.failed else '' }}">{{ summary.failed }} failed</span>
<span class="badge {{ 'bad' if summary.invalid else '' }}">{{ summary.invalid }} invalid</span></p>
{% if plotly_missing %}<p class="invalid">No plots: the Python package plotly, whose plotly.min.js draws them, is not installed where this report was written (pip install plotly, then rebuild the report).</p>{% endif %}
<nav>{% for s in sections %}<a href="#{{ s.anchor }}">{{ s.title }}</a>{% endfor %}<a href="#environment">environment</a></nav>

<h2>Summary</h2>
<div class="wide"><table id="summary">
<tr><th class="l">case</th><th class="l">host</th><th class="l">status</th><th class="l">verdict</th><th>precision</th><th>bs</th>
<th>infer core qps (samples/s)</th><th>infer whole qps (samples/s)</th><th>val core qps (samples/s)</th>
<th>p50 ms/batch</th><th>p90 ms/batch</th><th>p99 ms/batch</th><th>val acc</th><th>infer acc</th><th>{{ memory_kind }} used/total GiB</th><th>MFU</th></tr>
{% for r in rows %}
<tr{% if r.aggregate %} class="agg"{% endif %}><td class="l">{{ r.case }}</td><td class="l">{{ r.host }}</td>
<td class="l">{{ r.status }}</td><td class="l {{ 'valid' if r.valid else 'invalid' if r.verdict != '-' else '' }}">{{ r.verdict }}</td>
<td>{{ r.precision }}</td><td>{{ r.bs }}</td><td>{{ r.core_qps }}</td><td>{{ r.whole_qps }}</td><td>{{ r.val_qps }}</td>
<td>{{ r.p50 }}</td><td>{{ r.p90 }}</td><td>{{ r.p99 }}</td><td>{{ r.val_acc }}</td><td>{{ r.infer_acc }}</td><td>{{ r.memory }}</td><td>{{ r.mfu }}</td></tr>
{% endfor %}
</table></div>
{% for r in rows if r.reasons %}
<p><b>{{ r.case }} on {{ r.host }}</b> <span class="invalid">{{ r.verdict if r.ok else r.status }}</span>:</p>
<ul class="reasons">{% for reason in r.reasons %}<li>{{ reason }}</li>{% endfor %}</ul>
{% endfor %}

{% for s in sections %}
<h2 id="{{ s.anchor }}">{{ s.title }}</h2>
{% if s.status != "success" %}<p class="invalid">{{ s.status }} at step {{ s.failed_step }}: {{ s.error }}</p>{% endif %}
{% for note in s.notes %}<p class="note">{{ note }}</p>{% endfor %}
{% if s.best %}
<p>Best throughput: bs {{ s.best.throughput.batch_size }} {{ s.best.throughput.scenario }} x{{ s.best.throughput.clients }},
{{ "%.2f" | format(s.best.throughput.qps or 0) }} samples/s. Lowest latency: bs {{ s.best.latency.batch_size }} {{ s.best.latency.scenario }}
{% if s.best.latency.p90_ms is not none %}p90 {{ "%.3f" | format(s.best.latency.p90_ms) }} ms{% elif s.best.latency.mean_ms is not none %}mean {{ "%.3f" | format(s.best.latency.mean_ms) }} ms{% endif %}
{% if not s.best.from_valid_rows %} <span class="invalid">(no row was valid)</span>{% endif %}</p>
{% endif %}
{% if s.perf_rows %}
<table>
<tr><th class="l">row</th><th>qps (samples/s)</th><th>p50 ms/query</th><th>p90 ms/query</th><th>p99 ms/query</th><th>mean ms</th><th>queries</th><th>duration s</th><th class="l">verdict</th></tr>
{% for p in s.perf_rows %}
<tr><td class="l">{{ p.label }}</td><td>{{ p.qps }}</td><td>{{ p.p50 }}</td><td>{{ p.p90 }}</td><td>{{ p.p99 }}</td><td>{{ p.mean }}</td><td>{{ p.queries }}</td><td>{{ p.duration }}</td>
<td class="l {{ 'valid' if p.valid else 'invalid' }}" title="{{ p.reasons | join('; ') }}">{{ 'valid' if p.valid else 'INVALID (%d, see the reasons above)' % (p.reasons | length) }}</td></tr>
{% endfor %}
</table>
{% endif %}
{% if s.own_benchmark %}
<p>The backend's own benchmark() ({{ s.own_benchmark.source }}): its own timing, beside InferPerf's offline row of the same batch size; never instead of it.</p>
{% if s.own_benchmark.error %}<p class="invalid">{{ s.own_benchmark.error }}</p>{% endif %}
<table>
<tr><th>bs</th><th>InferPerf qps</th><th>backend QPS</th><th>InferPerf mean ms</th><th>backend AVG ms</th><th>InferPerf p99 ms</th><th>backend P99 ms</th></tr>
{% for o in s.own_benchmark.rows %}<tr><td>{{ o.bs }}</td>{% for c in o.cells %}<td>{{ c }}</td>{% endfor %}{% if o.error %}<td class="l invalid">{{ o.error }}</td>{% endif %}</tr>
{% endfor %}
</table>
{% endif %}
<div class="plots">
{% for p in s.plots %}
<figure><div class="plot" id="{{ p.id }}" role="img" aria-label="{{ p.name }}" style="width:{{ p.width }}px;height:{{ p.height }}px"></div>
<script type="application/json" id="{{ p.id }}-spec">{{ p.spec | safe }}</script><figcaption>{{ p.name }}</figcaption></figure>
{% endfor %}
</div>
{% for m in s.missing %}<p class="note">{{ m }}</p>{% endfor %}
{% if s.checks %}
<h3>Checks</h3>
<table>{% for name, passed, detail in s.checks %}<tr><td class="l">{{ name }}</td><td class="l {{ 'valid' if passed == 'passed' else 'invalid' if passed == 'FAILED' else '' }}">{{ passed }}</td><td class="l">{{ detail }}</td></tr>{% endfor %}</table>
{% endif %}
{% if s.compile %}
<h3>Compile report</h3>
<table>{% for k, v in s.compile %}<tr><th class="l">{{ k }}</th><td class="l">{{ v }}</td></tr>{% endfor %}</table>
{% endif %}
{% if s.ops %}
<h3>Top ops (per-op profile)</h3>
<table><tr><th class="l">node</th><th class="l">op type</th><th>calls</th><th>mean ms</th><th>total ms</th></tr>
{% for o in s.ops %}<tr><td class="l">{{ o.node }}</td><td class="l">{{ o.op_type }}</td><td>{{ o.calls }}</td><td>{{ "%.4f" | format(o.mean_ms or 0) }}</td><td>{{ "%.4f" | format(o.total_ms or 0) }}</td></tr>{% endfor %}
</table>
{% endif %}
{% endfor %}

<h2 id="environment">Environment</h2>
<p>checkout: git commit <code>{{ commit or "unknown (not a git checkout)" }}</code></p>
{% for host, env in environments.items() %}
<h3>{{ host }}</h3>
<table>{% for k, v in env %}<tr><th class="l">{{ k }}</th><td class="l">{{ v }}</td></tr>{% endfor %}</table>
{% endfor %}
{% if plotly_js %}
<script>{{ plotly_js }}</script>
{% endif %}
<script>
(function () {
  "use strict";
  var plots = document.querySelectorAll("div.plot");
  function failed(div, error) {
    div.textContent = "plot not drawn: " + error;
    console.error("report.html: " + div.getAttribute("aria-label") + " (" + div.id + "): " + error);
  }
  for (var i = 0; i < plots.length; i++) {
    var div = plots[i];
    if (typeof Plotly === "undefined") { div.textContent = "plot not drawn: plotly.js is not in this page"; continue; }
    try {
      var spec = JSON.parse(document.getElementById(div.id + "-spec").textContent);
      Plotly.newPlot(div, spec.data, spec.layout, spec.config).catch(failed.bind(null, div));
    } catch (error) {
      failed(div, error);
    }
  }
})();
</script>
</body>
</html>
"""
