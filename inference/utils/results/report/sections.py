"""report.html's data: what the page shows, gathered from a run's files.

For each result of summary.json (and each multi-host aggregate): its ``result.json``,
``latencies.npz`` and the monitors' JSON lines beside it, turned into one section
(tables as rows of cells, plots as ``charts`` specs, what is missing as one line each).
The cells are formatted by summary.md's helpers, so both show the same figures.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Sequence

from common.cells import figure_cell
from common.energy import energy_cell
from common.record import CaseResult, Key, RecordError, read_latencies, read_result
from common.sampler import read_samples
from common.scenario import scenario
from common.summary_record import Row, SummaryRecord, SummaryRow
from utils.results.report.charts import (
    TOP_OPS,
    frontier_plot,
    latency_plot,
    phase_spans,
    repetitions_plot,
    row_label,
    throughput_plot,
    timeline_plot,
    top_ops_plot,
)
from utils.results.report.section import new_section
from utils.results.summary import accuracy_cell, fmt, percentile_cell, record_mfu_cell


def git_commit(path: Path) -> str | None:
    """The checkout's commit (``+dirty`` when it has changes), or None outside git."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        if commit.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return commit.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def monitor_files(log_dir: Path) -> tuple[list[dict], list[dict]]:
    """The samples of the system monitor (sys_monitor.jsonl) and of the vendor's monitors (*_monitor.jsonl) in
    ``log_dir``."""
    sys_samples: list[dict] = []
    vendor_samples: list[dict] = []
    for path in sorted(log_dir.glob("*_monitor.jsonl")):
        samples = read_samples(path) or []
        (sys_samples if path.name == "sys_monitor.jsonl" else vendor_samples).extend(map(_device_totals, samples))
    return sys_samples, vendor_samples


def _device_totals(sample: dict) -> dict:
    """A GPU monitor's sample (per-device readings under ``devices``, docker_images/nvidia/nvidia_monitor.py)
    with the timeline's keys added: power and memory summed over the devices, utilisation their mean;
    a key no device measured stays absent."""
    devices = [d for d in sample.get("devices") or [] if isinstance(d, dict)]
    if not devices:
        return sample
    added: dict[str, float] = {}
    for key, name, scale, mean in (
        ("power_w", "power_w", 1.0, False),
        ("mem_used_gib", "memory_used_bytes", 1 / 2**30, False),
        ("utilization", "utilization_gpu_pct", 1.0, True),
    ):
        values = [d[name] * scale for d in devices if isinstance(d.get(name), (int, float))]
        if values and key not in sample:
            added[key] = sum(values) / len(values) if mean else sum(values)
    return {**sample, **added}


def _flatten(prefix: str, value: Any, out: list[tuple[str, str]]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), item, out)
    elif isinstance(value, list) and not all(isinstance(v, (str, int, float)) for v in value):
        out.append((prefix, json.dumps(value)[:200]))
    else:
        out.append((prefix, ", ".join(map(str, value)) if isinstance(value, list) else fmt(value, 4)))


def compile_rows(engine: dict | None) -> list[tuple[str, str]]:
    report = (engine or {}).get("compile_report") or {}
    if not report:
        return []
    segments = report.get("segments") or []
    rows = [
        ("engine", str((engine or {}).get("version") or (engine or {}).get("class") or "-")),
        ("status", fmt(report.get("compile_status"))),
        ("precision", fmt(report.get("compile_precision"))),
        ("compile duration (s)", fmt(report.get("compile_duration"), 3)),
        ("sub-graph coverage sg_percent (%)", fmt(report.get("sg_percent"), 1)),
        ("nodes", fmt(report.get("node_count"))),
        ("segments (fallback)", f"{len(segments)} ({sum(bool(s.get('is_fallback')) for s in segments)})"),
        ("fallback ops", ", ".join(map(str, report.get("fallback_ops") or [])) or "none"),
    ]
    best_sizes = (engine or {}).get("best_batch_sizes")
    if best_sizes:
        rows.append(("engine's best batch sizes", ", ".join(map(str, best_sizes))))
    return rows


def check_rows(result: CaseResult) -> list[tuple[str, str, str]]:
    """(check, passed, detail) for the numeric check and every audit."""
    rows = []
    numeric = result.numeric
    if numeric:
        worst = max((o.get("max_rel") or 0.0 for o in numeric.get("outputs") or []), default=None)
        detail = f"{numeric.get('samples')} samples, largest max_rel {worst:.2e}" if worst is not None else ""
        rows.append(
            (
                "numeric (engine vs framework)",
                _passed(numeric.get("passed")),
                "; ".join(numeric.get("reasons") or []) or detail,
            )
        )
    for audit in result.audits:
        rows.append((audit.get("name", "audit"), _passed(audit.get("passed")), audit.get("detail") or ""))
    for row in result.performance:
        test01 = row.accuracy_in_performance_mode
        if test01:
            rows.append(
                (f"{test01.get('name')} ({row.label})", _passed(test01.get("passed")), test01.get("detail") or "")
            )
    return rows


def _passed(value: Any) -> str:
    return {True: "passed", False: "FAILED", None: "not run"}.get(value, str(value))


def summary_rows(records: list[SummaryRecord]) -> list[dict]:
    """The summary table's cells, the same figures and n/a reasons as summary.md."""
    rows = []
    for r in records:
        latency = r.latency_ms.to_json() if r.latency_ms else {}
        intervals, ci95 = r.latency_ci95, r.ci95
        count = r.latency_batches
        ok = r.succeeded
        verdict = r.verdict
        rows.append(
            {
                "case": r.name,
                "host": r.host,
                "aggregate": r.aggregate,
                "status": r.status if ok else f"{r.status} at {r.failed_step}",
                "ok": ok,
                "verdict": "-" if verdict is None else ("valid" if verdict.valid else "INVALID"),
                "valid": bool(verdict and verdict.valid),
                "reasons": list(verdict.reasons if verdict else ()) or ([r.error] if not ok and r.error else []),
                "precision": fmt(r.precision),
                "bs": fmt(r.batchsize),
                "core_qps": figure_cell(r.infer_core_qps, ci95, Key.INFER_CORE_QPS),
                "whole_qps": figure_cell(r.infer_whole_qps, ci95, Key.INFER_WHOLE_QPS),
                "val_qps": figure_cell(r.val_core_qps, ci95, Key.VAL_CORE_QPS),
                "p50": percentile_cell(latency, "p50", count, intervals),
                "p90": percentile_cell(latency, "p90", count, intervals),
                "p99": percentile_cell(latency, "p99", count, intervals),
                "val_acc": accuracy_cell(r.val_average_acc, r.accuracy_note),
                "infer_acc": accuracy_cell(r.infer_average_acc, r.accuracy_note),
                "memory": f"{fmt(r.vendor_usage_gib)}/{fmt(r.vendor_max_mem_gib)}"
                if r.vendor_usage_gib is not None
                else "-",
                "mfu": record_mfu_cell(r),
            }
        )
    return rows


def performance_table(rows: Sequence[Row], energy: dict | None = None) -> list[dict]:
    """The rows' cells; ``energy``: the record's energy block (summary.json), whose windows are named by row label."""
    windows = {w.get("label"): w for w in (energy or {}).get("windows") or []}
    out = []
    for row in rows:
        latency = row.latency_ms.to_json() if row.latency_ms else {}
        out.append(
            {
                "label": row_label(row),
                "qps": figure_cell(row.qps, {"qps": row.qps_ci95}, "qps") if row.qps is not None else fmt(row.qps),
                "p50": percentile_cell(latency, "p50", row.queries, row.latency_ci95),
                "p90": percentile_cell(latency, "p90", row.queries, row.latency_ci95),
                "p99": percentile_cell(latency, "p99", row.queries, row.latency_ci95),
                "mean": fmt(latency.get("mean"), 3),
                "queries": row.queries,
                "duration": fmt(row.duration_s, 2),
                "energy": energy_cell(windows.get(row.label) if isinstance(row, SummaryRow) else None),
                "valid": row.verdict.valid,
                "reasons": list(row.verdict.reasons),
            }
        )
    return out


def own_benchmark_rows(engine: dict, rows: Sequence[Row]) -> dict | None:
    """A backend's own benchmark() (engine.own_benchmark) beside InferPerf's row of the same batch size whose
    result is its throughput (offline), with one client."""
    own = engine.get("own_benchmark")
    if not own:
        return None
    ours = {r.batch_size: r for r in rows if scenario(r.scenario).result_is_throughput and r.clients == 1}
    table = []
    for item in own.get("rows") or []:
        row = ours.get(item.get("BS"))
        latency = row.latency_ms if row is not None else None
        cells = (
            row.qps if row is not None else None,
            item.get("QPS"),
            latency.mean if latency else None,
            item.get("AVG Latency"),
            latency.p99 if latency else None,
            item.get("P99 Latency"),
        )
        shown = [fmt(v, 3) if isinstance(v, float) else v if v is not None else "-" for v in cells]
        table.append({"bs": item.get("BS"), "cells": shown, "error": item.get("error")})
    return {"source": own.get("source") or "the engine", "rows": table, "error": own.get("error")}


def case_section(record: SummaryRecord) -> dict:
    """Everything the page shows for one case on one host, or for a multi-host aggregate."""
    section = new_section(
        f"{record.name} on {record.host}",
        f"{record.case}-{record.framework}-{record.host}".replace(":", "-").replace(".", "-").replace(" ", "-"),
        record.status,
        error=record.error,
        failed_step=record.failed_step,
        aggregate=record.aggregate,
    )
    rows = record.performance
    section["perf_rows"] = performance_table(rows, record.energy)
    if record.aggregate:
        section["notes"].append(_aggregate_note(record))
        _add(section, "throughput vs batch size", throughput_plot(rows))
        return section
    log_dir = Path(record.log_dir) if record.log_dir else None
    result = None
    try:
        result = read_result(log_dir) if log_dir else None
    except RecordError as exc:
        section["missing"].append(str(exc))
    if not record.succeeded or result is None or log_dir is None:
        if not section["missing"]:  # a misshapen result.json has said why above
            section["missing"].append("no result.json: the case did not complete, nothing to plot")
        if log_dir:
            sys_samples, vendor_samples = monitor_files(log_dir)
            _add(section, "monitor timeline", timeline_plot(sys_samples, vendor_samples, []))
        return section
    _add_plots(section, rows, result, log_dir, record)
    _add_engine_and_checks(section, rows, result)
    return section


def _aggregate_note(record: SummaryRecord) -> str:
    overlap = {
        True: " (the hosts' inference phases overlapped).",
        False: "; the hosts' inference phases did NOT overlap, so the sum is a capacity, not a measured load.",
        None: ".",
    }[record.concurrent]
    hosts = ", ".join(record.hosts or [])
    return (
        f"Aggregate of {hosts}: throughput is the sum of the hosts, percentiles come from the hosts' raw latencies "
        "pooled" + overlap
    )


def _add_plots(section: dict, rows: Sequence[Row], result: CaseResult, log_dir: Path, record: SummaryRecord) -> None:
    """Throughput, the latency CDF, the frontier (two rows or more) and the monitors' timeline."""
    raw = read_latencies(log_dir)
    if not raw:
        section["notes"].append(
            "no latencies.npz beside result.json (a result from before raw latencies were kept): latency plots are "
            "missing"
        )
    section["best"] = result.best
    # A part the case cannot have is left out, not "no data": rows for a base-tier case, repetitions
    # for a run without --repeat.
    if rows:
        _add(section, "throughput vs batch size", throughput_plot(rows))
    if record.repetitions is not None:
        _add(section, "repetitions", repetitions_plot(record.repetitions))
    if raw and (rows or result.inference is not None):  # no latencies.npz: the note above says so
        _add(section, "latency distribution", latency_plot(rows, raw, raw.get("inference")))
    frontier = frontier_plot(rows)
    if frontier:
        _add(section, "throughput-latency frontier", frontier)
    from utils.results.llm_plots import llm_figures  # here: it draws with this module's helpers

    for name, figure in llm_figures(result.llm):  # an LLM case's plots
        _add(section, name, figure)
    if result.llm is not None and result.llm.serving:  # a serving vendor's load steps, as an endpoint run's
        from utils.results.report.serving import add_steps, ordered

        add_steps(section, ordered(result.llm.serving))
    sys_samples, vendor_samples = monitor_files(log_dir)
    spans = phase_spans(result)
    if not spans:
        section["notes"].append("result.json has no phase time spans (started_at_unix): phases are not shaded")
    _add(section, "monitor timeline", timeline_plot(sys_samples, vendor_samples, spans))


def _add_engine_and_checks(section: dict, rows: Sequence[Row], result: CaseResult) -> None:
    """The compile report, a backend's own benchmark, the top ops, the checks, the notes and the environment."""
    engine = result.engine or {}
    section["compile"] = compile_rows(engine)
    section["own_benchmark"] = own_benchmark_rows(engine, rows)
    section["ops"] = (engine.get("performance_data") or [])[:TOP_OPS]
    ops_plot = top_ops_plot(section["ops"])
    if ops_plot:
        _add(section, "top ops", ops_plot)
    section["checks"] = check_rows(result)
    section["notes"].extend(result.performance_notes)
    env: list[tuple[str, str]] = []
    _flatten("", result.env, env)
    section["env"] = env


def _add(section: dict, name: str, figure: dict | None) -> None:
    if figure:
        section["plots"].append({"name": name, "figure": figure})
    else:
        section["missing"].append(f"{name}: no data")
