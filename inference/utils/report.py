"""report.html: one self-contained page per run, for people.

Built from ``summary.json`` and, per case and host, the files beside it:
``result.json``, ``latencies.npz`` (raw per-query latencies, ``tools.result``)
and the monitors' JSON lines. Every plot is a matplotlib PNG embedded as a
``data:`` URI and the page has no script, font or style from elsewhere, so it
opens from a file with no network. Sections, in reading order:
  1. the run (vendor, mode, hosts, counts) and the summary table with verdicts;
  2. per case and host: throughput against batch size, latency CDF per row,
     the throughput-latency frontier (when more than one row), the monitors'
     timeline with the measured phases shaded, numeric check and audits, the
     compile report and the top ops of the per-op profile;
  3. the environment: the checkout's git commit and each host's fingerprint.
A part whose data is missing says so in one line instead of plotting nothing.
"""

from __future__ import annotations

import base64
import io
import json
import subprocess
from pathlib import Path
from typing import Any

from common.files import atomic_path
from common.record import RESULT_FILE, Key, read_latencies
from common.sampler import read_samples
from utils.aggregate import with_aggregates
from utils.summary import _accuracy_cell, _fmt, _mfu_cell, _percentile_cell, memory_kind

REPORT_FILE = "report.html"
TOP_OPS = 12
# Colours of the shaded phases in the timeline.
PHASE_COLOURS = {"validation": "#9ecae1", "inference": "#a1d99b", "performance": "#fdd0a2"}


# ---- plots -----------------------------------------------------------------------
def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig) -> str:
    """The figure as a data: URI (PNG, base64); closes it."""
    plt = _pyplot()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=96, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _row_label(row: dict) -> str:
    label = f"bs {row['batch_size']} {row['scenario']}"
    if row.get("clients", 1) != 1:
        label += f" x{row['clients']}"
    if row.get("target_qps") is not None:
        label += f" @{row['target_qps']:.3g}"
    return label


def throughput_plot(rows: list[dict]) -> str | None:
    """qps against batch size, one line per scenario x clients; hollow markers = invalid rows."""
    rows = [r for r in rows if r.get("qps") is not None]
    if not rows:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 3.4))
    series: dict[str, list[dict]] = {}
    for row in rows:
        series.setdefault(f"{row['scenario']} x{row['clients']}", []).append(row)
    for name, points in series.items():
        points.sort(key=lambda r: r["batch_size"])
        xs, ys = [p["batch_size"] for p in points], [p["qps"] for p in points]
        (line,) = ax.plot(xs, ys, "-", label=name)
        for x, y, p in zip(xs, ys, points):
            valid = p["verdict"]["valid"]
            ax.plot([x], [y], "o", color=line.get_color(), markerfacecolor=line.get_color() if valid else "white")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({r["batch_size"] for r in rows}), labels=[str(b) for b in sorted({r["batch_size"] for r in rows})])
    ax.set_xlabel("batch size")
    ax.set_ylabel("throughput (samples/s)")
    ax.set_ylim(bottom=0)
    ax.set_title("Throughput vs batch size (hollow = invalid verdict)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def latency_plot(rows: list[dict], raw: dict, inference_ns: Any = None) -> str | None:
    """Empirical CDF of per-query latency (ms, log scale) for each row and the inference pass."""
    import numpy as np

    curves = []
    if inference_ns is not None and len(inference_ns):
        curves.append(("FlagPerf inference pass (core)", np.asarray(inference_ns)))
    for index, row in enumerate(rows):
        values = raw.get(f"performance_{index}")
        if values is not None and len(values):
            curves.append((_row_label(row), np.asarray(values)))
    if not curves:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 3.4))
    for label, values in curves:
        ms = np.sort(values) / 1e6
        ax.step(ms, np.arange(1, len(ms) + 1) / len(ms), where="post", label=f"{label} (n={len(ms)})")
    for q in (0.5, 0.9, 0.99):
        ax.axhline(q, color="grey", lw=0.6, ls=":")
        ax.text(ax.get_xlim()[0], q, f" p{int(q * 100)}", fontsize=7, va="bottom", color="grey")
    ax.set_xscale("log")
    ax.set_xlabel("latency per query (ms, log scale)")
    ax.set_ylabel("fraction of queries")
    ax.set_ylim(0, 1.01)
    ax.set_title("Latency distribution (CDF)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="lower right")
    return _png(fig)


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


def frontier_plot(rows: list[dict]) -> str | None:
    """Throughput against latency over every row; the frontier joined. Needs two rows."""
    usable = [(r, *_headline_latency(r)) for r in rows if r.get("qps") is not None]
    usable = [(r, lat, name) for r, lat, name in usable if lat is not None]
    if len(usable) < 2:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 3.4))
    points = [(lat, r["qps"]) for r, lat, _ in usable]
    front = pareto_front(points)
    ax.scatter([p[0] for p in points], [p[1] for p in points], color="#888888", zorder=2)
    ax.plot([points[i][0] for i in front], [points[i][1] for i in front], "-o", color="#d62728", zorder=3, label="frontier")
    for (r, _, name), (x, y) in zip(usable, points):
        ax.annotate(f"{_row_label(r)} ({name})", (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("latency per query (ms: p90, else p50, else mean)")
    ax.set_ylabel("throughput (samples/s)")
    ax.set_title("Throughput-latency frontier", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


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


def timeline_plot(sys_samples: list[dict], vendor_samples: list[dict], spans: list[tuple[str, str, float, float]]) -> str | None:
    """CPU/accelerator utilisation, memory and power over the case, measured phases shaded."""
    samples = [s for s in sys_samples + vendor_samples if s.get("timestamp") is not None]
    if not samples:
        return None
    t0 = min(s["timestamp"] for s in samples)
    power = [s for s in sys_samples + vendor_samples if s.get("power_w") is not None]
    plt = _pyplot()
    panels = 3 if power else 2
    fig, axes = plt.subplots(panels, 1, figsize=(7.0, 1.9 * panels + 0.6), sharex=True)

    def line(ax, source: list[dict], key: str, label: str) -> None:
        points = [(s["timestamp"] - t0, s[key]) for s in source if s.get(key) is not None and s.get("timestamp") is not None]
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], label=label, lw=1.2)

    line(axes[0], sys_samples, "cpu_percent", "system CPU %")
    line(axes[0], vendor_samples, "utilization", "device utilisation %")
    axes[0].set_ylabel("utilisation %")
    axes[0].set_ylim(0, 105)
    line(axes[1], sys_samples, "mem_used_gib", "system memory used")
    line(axes[1], vendor_samples, "mem_used_gib", "device memory used")
    axes[1].set_ylabel("memory (GiB)")
    axes[1].set_ylim(bottom=0)
    if power:
        line(axes[2], sys_samples, "power_w", "package power")
        line(axes[2], vendor_samples, "power_w", "device power")
        axes[2].set_ylabel("power (W)")
    seen = set()
    for ax in axes:
        for kind, label, start, end in spans:
            name = kind if kind not in seen and ax is axes[0] else None
            ax.axvspan(start - t0, end - t0, color=PHASE_COLOURS[kind], alpha=0.5, lw=0, label=name and f"{kind} (measured)")
            if ax is axes[0]:
                seen.add(kind)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    axes[-1].set_xlabel("seconds since the first monitor sample")
    axes[0].set_title("Monitors over the case (shaded: measured phases)", fontsize=10)
    return _png(fig)


def top_ops_plot(ops: list[dict]) -> str | None:
    ops = [o for o in ops if o.get("total_ms") is not None][:TOP_OPS]
    if not ops:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 0.3 * len(ops) + 1.0))
    labels = [f"{o.get('op_type', '?')}: {str(o.get('node', ''))[-40:]}" for o in ops][::-1]
    ax.barh(labels, [o["total_ms"] for o in ops][::-1], color="#6baed6")
    ax.set_xlabel("total time in the profiled calls (ms)")
    ax.set_title(f"Top {len(ops)} ops by time (per-op profile)", fontsize=10)
    ax.tick_params(axis="y", labelsize=7)
    ax.grid(alpha=0.3, axis="x")
    return _png(fig)


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
        section["plots"].append(("throughput-latency frontier", frontier))
    sys_samples, vendor_samples = _monitor_files(log_dir)
    spans = phase_spans(result)
    if not spans:
        section["notes"].append("result.json has no phase time spans (started_at_unix): phases are not shaded")
    _add(section, "monitor timeline", timeline_plot(sys_samples, vendor_samples, spans))
    engine = result.get("engine") or {}
    section["compile"] = compile_rows(engine)
    section["ops"] = (engine.get("performance_data") or [])[:TOP_OPS]
    ops_plot = top_ops_plot(section["ops"])
    if ops_plot:
        section["plots"].append(("top ops", ops_plot))
    section["checks"] = check_rows(result)
    section["notes"].extend(result.get("performance_notes") or [])
    env: list[tuple[str, str]] = []
    _flatten("", result.get("env") or {}, env)
    section["env"] = env
    return section


def _add(section: dict, name: str, plot: str | None) -> None:
    if plot:
        section["plots"].append((name, plot))
    else:
        section["missing"].append(f"{name}: no data")


def render(summary: dict, perf_dir: Path | None = None) -> str:
    import jinja2

    records = summary.get("results") or []
    aggregates = summary.get("aggregates") or []
    all_rows = with_aggregates(records, aggregates)
    sections = [case_section(r) for r in all_rows]
    environments: dict[str, list[tuple[str, str]]] = {}
    for section, record in zip(sections, all_rows):
        if section.get("env"):
            environments.setdefault(record["host"], section["env"])
    template = jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True).from_string(TEMPLATE)
    return template.render(
        summary=summary,
        rows=summary_rows(all_rows),
        sections=sections,
        environments=environments,
        commit=git_commit(perf_dir) if perf_dir else None,
        memory_kind=memory_kind(perf_dir, summary.get("vendor")) if perf_dir else "device memory",
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
<div class="plots">
{% for name, uri in s.plots %}<figure><img class="plot" alt="{{ name }}" src="{{ uri }}"><figcaption>{{ name }}</figcaption></figure>{% endfor %}
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
</body>
</html>
"""
