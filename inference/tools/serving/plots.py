"""serving/report.html: the figures of a serving run as plain SVG (no script, opens anywhere).

Four plots over the steps (sweep steps and capacity probes, ordered by load within each kind):
TTFT p50 and p90 against load, TPOT p50 against load, output tokens/s and goodput (tokens/s
meeting the SLO) against load, and tokens/s per user against output tokens/s with the Pareto
frontier joined. Each throughput point carries its 95 % interval as a bar. Then, where the steps
have them: the timeslices (each step's output tokens/s and TTFT p50 per slice of its window), the
server's own figures over time (KV-cache use and requests running, from its /metrics samples), and a
table of the server's figures per step beside the client's TTFT, with the TTFT cross-check.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

W, H, PAD_L, PAD_R, PAD_T, PAD_B = 470, 300, 76, 16, 28, 56
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")


def _load_key(step: dict) -> tuple:
    load = step.get("load") or {}
    if load.get("concurrency") is not None:
        return (0, float(load["concurrency"]))
    rate = load.get("request_rate")
    return (1, math.inf if rate == "inf" else float(rate or 0.0))


def ordered(steps: list[dict]) -> list[dict]:
    return sorted(steps, key=_load_key)


def _scale(values: list[float], lo_pad: float = 0.0) -> tuple[float, float]:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return 0.0, 1.0
    low, high = min(min(finite), lo_pad), max(finite)
    return (low, high if high > low else low + 1.0)


Points = list[tuple[float, float | None, list[float] | None]]  # (x, y, [lo, hi] or None)


@dataclass(frozen=True)
class Chart:
    """One plot: ``series`` (name, points); x is a position (categorical, labelled by ``x_labels``,
    ``kinds`` saying which load kind each position is: a line never joins two kinds) or a value."""

    title: str
    x_labels: list[str] | None
    series: list[tuple[str, Points]]
    y_name: str
    x_name: str
    kinds: list[int] | None = None


@dataclass(frozen=True)
class _Axes:
    x0: float
    x1: float
    y0: float
    y1: float

    def px(self, x: float) -> float:
        if not self.x1 > self.x0:
            return (W + PAD_L - PAD_R) / 2
        return PAD_L + (x - self.x0) / (self.x1 - self.x0) * (W - PAD_L - PAD_R)

    def py(self, y: float) -> float:
        return H - PAD_B - (max(y, self.y0) - self.y0) / (self.y1 - self.y0) * (H - PAD_T - PAD_B)


def _svg(chart: Chart) -> str:
    xs = [x for _, pts in chart.series for x, _, _ in pts]
    ys = [v for _, pts in chart.series for _, y, ci in pts for v in ([y] + list(ci or [])) if v is not None]
    x0, x1 = _scale(xs, min(xs) if xs else 0.0)
    y0, y1 = _scale(ys)
    # every plotted figure is >= 0; an interval's low end below 0 is cut at the axis
    axes = _Axes(x0, x1, max(y0, 0.0), y1)
    out = _frame(chart, axes)
    for n, (name, pts) in enumerate(chart.series):
        out += _marks(name, pts, COLOURS[n % len(COLOURS)], chart.kinds, axes)
        out.append(
            f'<text x="{W - PAD_R - 4}" y="{PAD_T + 12 + 13 * n}" text-anchor="end" font-size="10" '
            f'fill="{COLOURS[n % len(COLOURS)]}">{html.escape(name)}</text>'
        )
    out.append("</svg>")
    return "\n".join(out)


def _frame(chart: Chart, axes: _Axes) -> list[str]:
    """The SVG's opening, title, axes, ticks and axis names."""
    title, px, py, y0, y1 = html.escape(chart.title), axes.px, axes.py, axes.y0, axes.y1
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" role="img" aria-label="{title}">']
    out.append(f'<text x="{W / 2}" y="16" text-anchor="middle" font-size="13">{title}</text>')
    out.append(f'<line x1="{PAD_L}" y1="{H - PAD_B}" x2="{W - PAD_R}" y2="{H - PAD_B}" stroke="#444"/>')
    out.append(f'<line x1="{PAD_L}" y1="{PAD_T}" x2="{PAD_L}" y2="{H - PAD_B}" stroke="#444"/>')
    for k in range(5):
        value = y0 + (y1 - y0) * k / 4
        out.append(f'<text x="{PAD_L - 4}" y="{py(value) + 4:.1f}" text-anchor="end" font-size="10">{value:.3g}</text>')
    if chart.x_labels is not None:
        for i, label in enumerate(chart.x_labels):
            out.append(
                f'<text x="{px(i):.1f}" y="{H - PAD_B + 14}" text-anchor="middle" font-size="9">'
                f"{html.escape(label)}</text>"
            )
    else:
        for k in range(5):
            value = axes.x0 + (axes.x1 - axes.x0) * k / 4
            out.append(
                f'<text x="{px(value):.1f}" y="{H - PAD_B + 14}" text-anchor="middle" font-size="10">{value:.3g}</text>'
            )
    out.append(f'<text x="{W / 2}" y="{H - 8}" text-anchor="middle" font-size="11">{html.escape(chart.x_name)}</text>')
    out.append(
        f'<text x="12" y="{H / 2}" text-anchor="middle" font-size="11" transform="rotate(-90 12 {H / 2})">'
        f"{html.escape(chart.y_name)}</text>"
    )
    return out


def _marks(name: str, pts: Points, colour: str, kinds: list[int] | None, axes: _Axes) -> list[str]:
    """A series' lines (one per run of points of one load kind), points and interval bars."""
    px, py = axes.px, axes.py
    shown = [(x, y, ci) for x, y, ci in pts if y is not None]
    runs: list[list[tuple]] = []
    for point in shown:
        kind = kinds[int(point[0])] if kinds is not None else 0
        if runs and runs[-1][-1][0] == kind:
            runs[-1].append((kind, point))
        else:
            runs.append([(kind, point)])
    out = []
    for run in runs:
        if len(run) > 1:
            path = " ".join(f"{px(x):.1f},{py(y):.1f}" for _, (x, y, _) in run)
            out.append(
                f'<polyline class="series" data-name="{html.escape(name)}" points="{path}" '
                f'fill="none" stroke="{colour}"/>'
            )
    for x, y, ci in shown:
        out.append(
            f'<circle class="point" cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}">'
            f"<title>{html.escape(name)}: {y:.4g}</title></circle>"
        )
        if ci:
            out.append(
                f'<line class="interval" x1="{px(x):.1f}" y1="{py(ci[0]):.1f}" '
                f'x2="{px(x):.1f}" y2="{py(ci[1]):.1f}" stroke="{colour}"/>'
            )
    return out


def report(result: dict) -> str:
    """serving/report.html: a heading, the run's facts and ``figures``."""
    capacity = result.get("capacity")
    head = (
        f"<h1>Serving: {html.escape(str(result.get('served_model')))} "
        f"at {html.escape(str(result.get('endpoint')))}</h1>"
    )
    counted = ", ".join(result.get("token_source") or []) or "nothing"
    facts = f"<p>tokens counted by {html.escape(counted)}; client: {html.escape(str(result.get('client_location')))}"
    if capacity:
        facts += (
            f"; capacity ({html.escape(capacity['kind'])}): {capacity['capacity']} "
            f"in {capacity['interval']} after {capacity['probes']} probes"
        )
    facts += "</p>"
    return (
        "<!doctype html>\n<html><head><meta charset='utf-8'><title>serving</title></head><body>\n"
        + head
        + facts
        + "\n"
        + "\n".join(svg for _, svg in figures(result))
        + "\n"
        + server_table(result)
        + "\n</body></html>\n"
    )


def server_table(result: dict) -> str:
    """The server's own figures per step (its /metrics) beside the client's TTFT, as an HTML table; one
    line when the server exposes none."""
    from tools.serving import metrics

    steps = ordered(list(result.get("steps") or []) + list(result.get("capacity_steps") or []))
    blocks = [s.get("server_metrics") for s in steps]
    if not any(isinstance(b, dict) for b in blocks):
        return ""
    if not any(isinstance(b, dict) and b.get("exposed") for b in blocks):
        note = next((b.get("note") for b in blocks if isinstance(b, dict) and b.get("note")), metrics.NOT_EXPOSED)
        return f"<p>server metrics: {html.escape(str(note))}</p>"
    rows = [metrics.summary_row(s["label"], b or {}, s.get("ttft_ms") or {}) for s, b in zip(steps, blocks)]
    keys = list(next(r for r in rows if len(r) > 2))
    out = ["<h2>The server's own figures (/metrics)</h2>", '<table class="server-metrics" border="1">']
    out.append("<tr>" + "".join(f"<th>{html.escape(k)}</th>" for k in keys) + "</tr>")
    for row in rows:
        out.append(
            "<tr>" + "".join(f"<td>{html.escape(str(row.get(k, metrics.NOT_EXPOSED)))}</td>" for k in keys) + "</tr>"
        )
    out.append("</table>")
    for s, b in zip(steps, blocks):
        check = (b or {}).get("ttft_crosscheck") if isinstance(b, dict) else None
        if isinstance(check, dict) and check.get("judged"):
            out.append(
                f"<p>TTFT cross-check, {html.escape(s['label'])}: client mean {check['client_mean_ms']:.2f} ms, "
                f"server {check['server_mean_ms']:.2f} ms (client - server {check['difference_mean_ms']:+.2f} ms)</p>"
            )
    out.append(f"<p>{html.escape(metrics.CROSSCHECK_WHY)}.</p>")
    return "\n".join(out)


def figures(result: dict) -> list[tuple[str, str]]:
    """(name, SVG) of the four plots of ``result``'s ``steps`` (and ``capacity_steps``) and ``pareto``:
    serving/report.html's, and a serving vendor's case in report.html (tools/measure/serving_stage.py)."""
    steps = ordered(list(result.get("steps") or []) + list(result.get("capacity_steps") or []))
    out = [(name, _svg(chart)) for name, chart in load_charts(steps)]
    out.append(("pareto", _svg(pareto_chart(steps, result.get("pareto") or []))))
    return out + timeslice_figures(steps) + server_figures(steps)


def load_charts(steps: list[dict]) -> list[tuple[str, Chart]]:
    """TTFT, TPOT, and throughput and goodput, each against the steps' loads."""
    labels = [
        s["label"]
        .replace("concurrency ", "c=")
        .replace("rate ", "")
        .replace(" poisson", "")
        .replace(", max concurrency ", " ≤")
        for s in steps
    ]
    kinds = [_load_key(s)[0] for s in steps]

    def line(get) -> Points:
        return [(float(i), *get(s)) for i, s in enumerate(steps)]

    def quantile(key: str, q: str) -> Points:
        return line(lambda s: (s[key][q], (s[key].get("ci95") or {}).get(q)))

    def rate(name: str) -> Points:
        return line(lambda s: (s["throughput"][name]["value"], s["throughput"][name]["ci95"]))

    series = [("output tokens/s", rate("output_tokens_per_s"))]
    if steps and "goodput_tokens_per_s" in steps[0]["throughput"]:
        series.append(("goodput tokens/s", rate("goodput_tokens_per_s")))
    return [
        (
            "ttft",
            Chart(
                "TTFT against load",
                labels,
                [("p50", quantile("ttft_ms", "p50")), ("p90", quantile("ttft_ms", "p90"))],
                "ms",
                "load",
                kinds,
            ),
        ),
        ("tpot", Chart("TPOT against load", labels, [("p50", quantile("tpot_ms", "p50"))], "ms", "load", kinds)),
        ("goodput", Chart("Throughput and goodput against load", labels, series, "tokens/s", "load", kinds)),
    ]


def pareto_chart(steps: list[dict], pareto: list[dict]) -> Chart:
    """Tokens/s per user against output tokens/s, the Pareto frontier joined."""
    points: Points = [
        (s["throughput"]["output_tokens_per_s"]["value"], s["tokens_per_s_per_user"], None)
        for s in steps
        if s.get("tokens_per_s_per_user")
    ]
    frontier: Points = sorted((p["output_tokens_per_s"], p["tokens_per_s_per_user"], None) for p in pareto)
    return Chart(
        "Tokens/s per user against output tokens/s",
        None,
        [("steps", sorted(points)), ("Pareto frontier", frontier)],
        "tokens/s per user",
        "output tokens/s",
    )


def timeslice_figures(steps: list[dict]) -> list[tuple[str, str]]:
    """Each step's output tokens/s and TTFT p50 per slice of its window (``timeslices`` in result.json)."""
    sliced = [s for s in steps if (s.get("timeslices") or {}).get("items")]
    if not sliced:
        return []
    count = max(len(s["timeslices"]["items"]) for s in sliced)
    labels = [f"{i + 1}/{count}" for i in range(count)]

    def series(get) -> list[tuple[str, Points]]:
        return [(s["label"], [(float(i["index"]), get(i), None) for i in s["timeslices"]["items"]]) for s in sliced]

    tokens = _svg(
        Chart(
            "Output tokens/s per timeslice",
            labels,
            series(lambda i: i["output_tokens_per_s"]),
            "tokens/s",
            "slice of the step",
        )
    )
    ttft = _svg(
        Chart(
            "TTFT p50 per timeslice (requests sent in it)",
            labels,
            series(lambda i: i["ttft_ms"]["p50"]),
            "ms",
            "slice of the step",
        )
    )
    return [("timeslice_tokens", tokens), ("timeslice_ttft", ttft)]


def server_figures(steps: list[dict]) -> list[tuple[str, str]]:
    """The server's KV-cache use and requests running over each step (its /metrics samples)."""
    sampled = [
        s
        for s in steps
        if isinstance(s.get("server_metrics"), dict)
        and s["server_metrics"].get("exposed")
        and s["server_metrics"].get("timeline")
    ]
    out = []
    for key, title, scale, unit in (
        ("kv_cache_usage", "Server KV-cache use over each step", 100.0, "%"),
        ("running", "Server requests running over each step", 1.0, "requests"),
    ):
        series: list[tuple[str, Points]] = [
            (s["label"], [(p["t_s"], p[key] * scale, None) for p in s["server_metrics"]["timeline"] if key in p])
            for s in sampled
        ]
        series = [(name, pts) for name, pts in series if pts]
        if series:
            out.append((f"server_{key}", _svg(Chart(title, None, series, unit, "seconds into the step"))))
    return out
