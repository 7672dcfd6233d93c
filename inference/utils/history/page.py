"""history.html: one plot per series, each point with its ±, the learned noise band and the change points.

Drawn with the report's plotly.js bundle, inlined once (``utils/results/report/page.py``): the page
loads nothing from elsewhere. A point's 95 % interval is its error bar; the band around each level
(between change points) is that level's geometric mean ± 1.96 × the series' learned noise, where
the history knows it; a change point is a dashed line with its ratio. INVALID points are grey and
take no part in levels or noise. Clicking a point opens its run's report.html, linked relative to
the page (a run whose report is gone has no link). Values are kept to 5 significant digits, and
each run's link once per page, to keep the page small (bench/history_scale.py measures it).
"""

from __future__ import annotations

import html
import math
import os
from pathlib import Path
from typing import Any

from common.files import atomic_path

Z975 = 1.959964


def _short(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(f"{value:.5g}")


def _link(report: str | None, page_dir: Path) -> str | None:
    if not report:
        return None
    try:
        return Path(os.path.relpath(report, page_dir)).as_posix()
    except ValueError:  # another drive
        return Path(report).as_uri()


def _figure(item: Any, runs: dict[str, int], page_dir: Path, links: list[str | None]) -> dict[str, Any]:
    """The plotly spec of one series (``cli.Shown``)."""
    s, points = item.series, item.points
    traces: list[dict[str, Any]] = []
    for is_valid, name, color in ((True, "valid", "#1f77b4"), (False, "INVALID", "#aaaaaa")):
        chosen = [p for p in points if p.valid == is_valid]
        if not chosen:
            continue
        ids = []
        for p in chosen:
            if p.run_key not in runs:
                runs[p.run_key] = len(links)
                links.append(_link(p.report, page_dir))
            ids.append(runs[p.run_key])
        traces.append({
            "type": "scatter", "mode": "markers", "name": name, "x": [p.at for p in chosen],
            "y": [_short(p.value) for p in chosen], "customdata": ids, "marker": {"color": color, "size": 6},
            "error_y": {
                "type": "data", "symmetric": False, "color": color, "thickness": 1, "width": 0,
                "array": [_short(p.high - p.value) if p.high is not None else None for p in chosen],
                "arrayminus": [_short(p.value - p.low) if p.low is not None else None for p in chosen],
            },
            "hovertemplate": "%{y} at %{x}<extra>" + name + "</extra>",
        })  # fmt: skip
    valid = [p for p in points if p.valid and p.value > 0]
    bounds = [0, *[c.index for c in item.changes], len(valid)]
    shapes = []
    for a, b in zip(bounds, bounds[1:]):
        level = valid[a:b]
        if not level:
            continue
        mean = math.exp(sum(math.log(p.value) for p in level) / len(level))
        spread = math.exp(Z975 * item.noise.cv) if item.noise else 1.0
        traces.append({
            "type": "scatter", "mode": "lines", "name": "level ± noise" if a == 0 else None,
            "showlegend": a == 0, "x": [level[0].at, level[-1].at, level[-1].at, level[0].at],
            "y": [_short(mean * spread), _short(mean * spread), _short(mean / spread), _short(mean / spread)],
            "fill": "toself", "line": {"width": 0}, "fillcolor": "rgba(31,119,180,0.12)", "hoverinfo": "skip",
        })  # fmt: skip
    annotations = []
    for c in item.changes:
        color = "#d62728" if c.worse else "#2ca02c"
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": c.at, "x1": c.at, "y0": 0, "y1": 1,
                       "line": {"dash": "dash", "color": color, "width": 1.5}})  # fmt: skip
        annotations.append({"x": c.at, "y": 1, "xref": "x", "yref": "paper", "showarrow": False, "yanchor": "bottom",
                            "text": f"x{c.ratio:.3f}", "font": {"color": color, "size": 11}})  # fmt: skip
    return {
        "data": traces,
        "layout": {
            "width": 900, "height": 320, "margin": {"l": 60, "r": 20, "t": 30, "b": 40},
            "yaxis": {"title": {"text": f"{s.key.figure} ({s.unit})"}}, "xaxis": {"type": "date"},
            "shapes": shapes, "annotations": annotations, "legend": {"orientation": "h", "y": -0.2},
        },
        "config": {"displaylogo": False, "responsive": False},
    }  # fmt: skip


def render(shown: list[Any], page_dir: Path, store: str) -> str:
    from utils.results.report.page import plotly_js, script_json

    runs: dict[str, int] = {}
    links: list[str | None] = []
    specs = [_figure(item, runs, page_dir, links) for item in shown]
    bundle = plotly_js() if shown else ""
    sections = []
    for number, item in enumerate(shown):
        s = item.series
        noise = f"noise ±{item.noise.cv:.1%} ({html.escape(item.noise.source)})" if item.noise else "noise unknown"
        steps = "".join(
            f"<li>{html.escape(c.at)}: x{c.ratio:.3f} [{c.low:.3f}, {c.high:.3f}] {'worse' if c.worse else 'better'}"
            + (f"; changed: {html.escape(', '.join(c.changed))}" if c.changed else "")
            + "</li>"
            for c in item.changes
        )
        sections.append(
            f"<section><h2>{html.escape(s.key.case)} | {html.escape(s.key.row)} | {html.escape(s.key.figure)}</h2>"
            f"<p>{html.escape(s.key.vendor)}/{html.escape(s.key.compiler)} on {html.escape(s.host)}; "
            f"{len(item.points)} run(s); {noise}</p>"
            f'<div class="plot" id="plot{number}"></div>'
            + (f'<ul class="changes">{steps}</ul>' if steps else "<p>No change point.</p>")
            + "</section>"
        )
    body = "\n".join(sections) or "<p>The history has no series yet.</p>"
    missing = "" if bundle or not shown else "<p>plotly.js is missing from this checkout: no plot drawn.</p>"
    script = (
        f"<script>{bundle}</script><script>const SPECS={script_json(specs)};const LINKS={script_json(links)};"
        "SPECS.forEach(function(s,i){var el=document.getElementById('plot'+i);"
        "Plotly.newPlot(el,s.data,s.layout,s.config);"
        "el.on('plotly_click',function(e){var k=e.points[0].customdata;"
        "if(k!==undefined&&LINKS[k]){window.location.href=LINKS[k];}});});</script>"
        if bundle
        else ""
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>InferPerf history</title>"
        "<style>body{font-family:sans-serif;margin:1.5em}h2{font-size:1.05em;margin-bottom:.2em}"
        "section{margin-bottom:1.5em}ul.changes{font-size:.9em}</style></head><body>"
        f"<h1>InferPerf history</h1><p>Store: {html.escape(store)}. Each point: one run's figure with its 95 % "
        "interval; the band: each level's geometric mean ± 1.96 × the learned noise; dashed lines: change points "
        "(red worse, green better). Click a point for its run's report.</p>"
        f"{missing}{body}{script}</body></html>"
    )


def write_page(shown: list[Any], path: Path, store: str) -> Path:
    """history.html, written atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = render(shown, path.parent.resolve(), store)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path
