"""bytemlperf.json: a case's result in ByteMLPerf's report shape, beside result.json.

Written by every case (docs/bytemlperf_migration.md has the mapping), from the
result record alone:

  Model            "<case>-<torch|framework>-<precision>", upper case (ByteMLPerf's naming)
  Backend          a ByteMLPerf backend's folder name; otherwise "<vendor>/<compiler>"
  Host Info        the CPU model
  Dataset          the case
  Instance Count, Device Count   when the compile report gives them
  Graph Compile    Compile Duration (s), Compile Precision, Subgraph Coverage (sg_percent), Optimizations
  Accuracy         Data Percent, Top-1 (the engine's accuracy; null with the reason when it
                   means nothing), and the numeric check's Mean/Max Diff and Rel-Diff of its
                   worst output (relative to the output's RMS, not elementwise)
  Performance      InferPerf's rows: BS, QPS, AVG Latency and P99 Latency (ms, per query;
                   P99 null when too few queries were measured), plus Scenario and
                   Clients when the run swept them
  Backend Performance   a backend's own benchmark() rows, as it reported them
  Verdict          "VALID" or "INVALID": InferPerf's verdict of the whole result
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common.files import write_json_atomic
from tools.compat.bytemlperf.configs import model_name

BYTEMLPERF_FILE = "bytemlperf.json"


def _round(value: Any, digits: int = 5) -> Any:
    return round(value, digits) if isinstance(value, float) else value


def bytemlperf_report(record: dict) -> dict:
    config = record.get("config") or {}
    engine = record.get("engine") or {}
    compiled = engine.get("compile_report") or {}
    framework = str(record.get("framework") or config.get("framework") or "")
    report: dict[str, Any] = {
        "Model": model_name(str(record.get("case")), framework, str(record.get("precision"))).upper(),
        "Backend": compiled.get("backend")
        if compiled.get("backend_kind") == "bytemlperf"
        else f"{record.get('vendor')}/{record.get('compiler')}",
        "Host Info": (record.get("env") or {}).get("cpu_model"),
        "Dataset": str(record.get("case", "")).upper(),
    }
    for key, name in (("instance_count", "Instance Count"), ("device_count", "Device Count")):
        if key in compiled:
            report[name] = compiled[key]
    if compiled:
        report["Graph Compile"] = {
            "Compile Duration": _round(compiled.get("compile_duration")),
            "Compile Precision": compiled.get("compile_precision"),
            "Subgraph Coverage": compiled.get("sg_percent"),
            "Optimizations": compiled.get("optimizations") or {},
        }
    accuracy = _accuracy(record, config)
    if accuracy:
        report["Accuracy"] = accuracy
    rows = record.get("performance") or []
    if rows:
        report["Performance"] = [_row(row, rows) for row in rows]
    own = engine.get("own_benchmark")
    if own:
        report["Backend Performance"] = own.get("rows", [])
    verdict = record.get("verdict") or {}
    report["Verdict"] = "VALID" if verdict.get("valid") else "INVALID"
    return report


def _accuracy(record: dict, config: dict) -> dict:
    inference = record.get("inference") or {}
    if not inference and not record.get("numeric"):
        return {}
    accuracy: dict[str, Any] = {"Data Percent": config.get("data_percent") or 100}
    accuracy["Top-1"] = _round(inference.get("accuracy"))
    if inference.get("accuracy_note"):
        accuracy["Top-1 Note"] = inference["accuracy_note"]
    numeric = record.get("numeric") or {}
    outputs = numeric.get("outputs") or []
    if outputs:
        worst = max(outputs, key=lambda o: o.get("max_rel") or 0.0)
        accuracy.update(
            {
                "Mean Diff": _round(worst.get("mean_abs")),
                "Max Diff": _round(worst.get("max_abs")),
                "Max Rel-Diff": _round(worst.get("max_rel")),
                "Mean Rel-Diff": _round(worst.get("mean_rel")),
                "Numeric Check": "passed" if numeric.get("passed") else "FAILED",
            }
        )
    return accuracy


def _row(row: dict, rows: list[dict]) -> dict:
    latency = row.get("latency_ms") or {}
    entry = {
        "BS": row.get("batch_size"),
        "QPS": _round(row.get("qps"), 2),
        "AVG Latency": _round(latency.get("mean"), 3),
        "P99 Latency": _round(latency.get("p99"), 3),
    }
    if len({(r.get("scenario"), r.get("clients")) for r in rows}) > 1:
        entry["Scenario"], entry["Clients"] = row.get("scenario"), row.get("clients")
    return entry


def write_report(log_dir: Path, record: dict) -> Path:
    path = Path(log_dir) / BYTEMLPERF_FILE
    write_json_atomic(path, bytemlperf_report(record))
    return path
