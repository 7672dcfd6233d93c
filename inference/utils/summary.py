"""Merge every case x host outcome with its monitor analysis into summary.json and summary.md."""
from __future__ import annotations

import importlib
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from loguru import logger

from tools.cache import atomic_path, write_json_atomic
from utils import sys_monitor
from utils.session import CaseOutcome

SUMMARY_SCHEMA_VERSION = 1


def vendor_analysis(perf_dir: Path, vendor: str, log_path: str) -> tuple[float | None, float | None, Any]:
    """Call docker_images/<vendor>/<vendor>_analysis.analysis_log and check its contract."""
    source = f"docker_images/{vendor}/{vendor}_analysis.py"
    if not (perf_dir / source).is_file():
        return None, None, None
    module = importlib.import_module(f"docker_images.{vendor}.{vendor}_analysis")
    analysis = getattr(module, "analysis_log", None)
    if not callable(analysis):
        logger.error(f"{source}: must define analysis_log(path)")
        return None, None, None
    try:
        value = analysis(log_path)
    except Exception as exc:
        logger.error(f"{source}: analysis_log({log_path}) failed: {type(exc).__name__}: {exc}")
        return None, None, None
    if not (isinstance(value, tuple) and len(value) == 3):
        logger.error(f"{source}: analysis_log must return (max_mem_used_GiB, total_mem_GiB, peak_flops), got {value!r:.80}")
        return None, None, None
    return value


def _peak_for(peak: Any, precision: str | None) -> float | None:
    if isinstance(peak, (int, float)) and not isinstance(peak, bool):
        return float(peak)
    if isinstance(peak, dict) and precision:
        value = peak.get(precision.lower())
        return float(value) if isinstance(value, (int, float)) else None
    return None


def merge_outcome(outcome: CaseOutcome, perf_dir: Path, vendor: str) -> dict:
    result = outcome.result or {}
    inference = result.get("inference") or {}
    latency = inference.get("latency_ms") or {}
    record: dict[str, Any] = {
        "case": outcome.case.case,
        "framework": outcome.case.framework,
        "host": outcome.host,
        "noderank": outcome.noderank,
        "status": outcome.status,
        "failed_step": outcome.step,
        "error": outcome.error,
        "exit_code": outcome.exit_code,
        "wall_time_s": outcome.wall_time_s,
        "log_dir": str(outcome.local_dir),
    }
    for key in (
        "vendor", "compiler", "precision", "batchsize", "flops", "e2e_time(second)",
        "p_validation_whole(qps)", "p_validation_core(qps)", "p_inference_whole(qps)", "*p_inference_core(qps)",
        "val_average_acc", "infer_average_acc",
    ):
        record[key] = result.get(key)
    record["latency_ms"] = {q: latency.get(q) for q in ("p50", "p90", "p99", "mean")} if latency else None
    record["latency_batches"] = latency.get("count") if latency else None
    record["latency_warnings"] = latency.get("warnings", []) if latency else []

    sys_path = outcome.monitors.get("sys")
    record["sys_monitor"] = sys_monitor.analyse(sys_path) if sys_path else None
    used = total = peak = None
    vendor_path = outcome.monitors.get(vendor)
    if vendor_path:
        used, total, peak = vendor_analysis(perf_dir, vendor, vendor_path)
    record["vendor_usage(GiB)"] = used
    record["vendor_max_mem(GiB)"] = total
    peak_flops = _peak_for(peak, result.get("precision"))
    record["peak_flops"] = peak_flops
    core_qps = result.get("*p_inference_core(qps)")
    flops = result.get("flops")
    if flops and core_qps and peak_flops:
        record["MFU"] = flops * core_qps / peak_flops
    else:
        record["MFU"] = None
        if outcome.status == "success" and flops and core_qps and vendor_path:
            logger.warning(f"{outcome.case.key} on {outcome.host}: peak FLOPS unknown for precision {result.get('precision')}; MFU is null")
    return record


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def markdown_table(records: list[dict]) -> str:
    header = (
        "| case | host | status | precision | bs | infer core qps | infer whole qps | val core qps | "
        "p50 ms | p90 ms | p99 ms | val acc | infer acc | mem used/total GiB | MFU |"
    )
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for r in records:
        latency = r.get("latency_ms") or {}
        status = r["status"] if r["status"] == "success" else f"{r['status']} at {r['failed_step']}"
        memory = f"{_fmt(r['vendor_usage(GiB)'])}/{_fmt(r['vendor_max_mem(GiB)'])}" if r["vendor_usage(GiB)"] is not None else "-"
        mfu = f"{r['MFU'] * 100:.2f}%" if r.get("MFU") is not None else "-"
        lines.append(
            f"| {r['case']}:{r['framework']} | {r['host']} | {status} | {_fmt(r['precision'])} | {_fmt(r['batchsize'])} | "
            f"{_fmt(r['*p_inference_core(qps)'])} | {_fmt(r['p_inference_whole(qps)'])} | {_fmt(r['p_validation_core(qps)'])} | "
            f"{_fmt(latency.get('p50'))} | {_fmt(latency.get('p90'))} | {_fmt(latency.get('p99'))} | "
            f"{_fmt(r['val_average_acc'], 4)} | {_fmt(r['infer_average_acc'], 4)} | {memory} | {mfu} |"
        )
    failures = [r for r in records if r["status"] != "success"]
    if failures:
        lines.append("")
        for r in failures:
            lines.append(f"- **{r['case']}:{r['framework']} on {r['host']}** {r['status']} at step `{r['failed_step']}`: {r['error']}")
    return "\n".join(lines) + "\n"


def write_summary(run_dir: Path, run_id: str, host_config: Any, records: list[dict], started_at: datetime) -> tuple[Path, Path]:
    summary = {
        "schema_version": SUMMARY_SCHEMA_VERSION,
        "run_id": run_id,
        "mode": host_config.mode,
        "vendor": host_config.vendor,
        "hosts": [h.label for h in host_config.hosts],
        "started_at": started_at.isoformat(timespec="seconds"),
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "succeeded": sum(r["status"] == "success" for r in records),
        "failed": sum(r["status"] != "success" for r in records),
        "results": records,
    }
    json_path = run_dir / "summary.json"
    md_path = run_dir / "summary.md"
    write_json_atomic(json_path, summary)
    with atomic_path(md_path) as tmp:
        tmp.write_text(f"# InferPerf run {run_id} ({host_config.vendor}, {host_config.mode})\n\n" + markdown_table(records), encoding="utf-8")
    return json_path, md_path
