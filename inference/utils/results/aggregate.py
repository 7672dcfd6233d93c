"""Multi-host aggregation: one row per case that succeeded on several hosts.

Terms (defined here once):
  aggregate throughput = the sum of the hosts' throughputs (each host runs the
      case on its own devices at the same time, so the cluster serves the sum);
  pooled percentile    = a percentile of every host's raw per-query latencies
      put together (``latencies.npz``, see ``tools.results.result``), never an average
      of the hosts' percentiles, which has no meaning for a tail;
  concurrent           = the hosts' measured inference phases overlap in wall
      time; when they do not, the sum is a capacity, not a measured load.
A performance row is aggregated when every host has a row with the same batch
size, scenario and clients. The aggregate is valid only when every host's
result is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from common.mfu import plausible_mfu, pooled_mfu
from common.record import QPS_KEYS, RESULT_FILE, Key, read_latencies
from common.stats import LatencyStats


def _sum(values: list[Any]) -> float | None:
    return None if any(v is None for v in values) else float(sum(values))


def _latency_block(samples_ns: list[int]) -> tuple[dict | None, int | None, list[str]]:
    stats = LatencyStats.from_ns(samples_ns)
    if stats is None:
        return None, None, []
    return {q: getattr(stats, q) for q in ("p50", "p90", "p99", "p99_9", "mean")}, stats.count, stats.notes


def _pooled(raws: list[dict], key: str) -> list[int] | None:
    """Every host's raw latencies of one series, or None when a host lacks it."""
    pooled: list[int] = []
    for raw in raws:
        if key not in raw:
            return None
        pooled.extend(int(v) for v in raw[key])
    return pooled


def _concurrent(results: list[dict]) -> bool | None:
    spans = [((r.get("inference") or {}).get("started_at_unix"), (r.get("inference") or {}).get("finished_at_unix")) for r in results]
    if any(a is None or b is None for a, b in spans):
        return None
    return max(a for a, _ in spans) < min(b for _, b in spans)


def _weighted_accuracy(records: list[dict], results: list[dict], key: str, phase: str) -> float | None:
    values = [r.get(key) for r in records]
    weights = [(res.get(phase) or {}).get("samples") or 0 for res in results]
    if any(v is None for v in values) or not sum(weights):
        return None
    return sum(v * w for v, w in zip(values, weights)) / sum(weights)


def aggregate_case(records: list[dict], load=None) -> dict:
    """The aggregate row of one case's successful per-host records (two or more)."""
    load = load or _load
    results, raws = zip(*(load(r["log_dir"]) for r in records))
    first = records[0]
    hosts = [r["host"] for r in records]
    agg: dict[str, Any] = {
        **{k: None for k in first},
        "case": first["case"],
        "framework": first["framework"],
        "host": f"all {len(records)} hosts",
        "noderank": None,
        "status": "success",
        "aggregate": True,
        "hosts": hosts,
        "concurrent": _concurrent(list(results)),
        "log_dir": None,
        "wall_time_s": max((r.get("wall_time_s") or 0.0) for r in records),
        "vendor": first.get("vendor"),
        "compiler": first.get("compiler"),
        "flops": first.get("flops"),
        "accuracy_note": first.get("accuracy_note"),
        "audits": [],
        "performance": [],
    }
    for key in ("precision", "batchsize"):
        values = {r.get(key) for r in records}
        agg[key] = values.pop() if len(values) == 1 else "mixed"
    for key in QPS_KEYS:
        agg[key] = _sum([r.get(key) for r in records])
    agg[Key.VAL_ACC] = _weighted_accuracy(records, list(results), Key.VAL_ACC, "validation")
    agg[Key.INFER_ACC] = _weighted_accuracy(records, list(results), Key.INFER_ACC, "inference")
    pooled = _pooled(list(raws), "inference")
    agg["latency_ms"], agg["latency_batches"], agg["latency_notes"] = _latency_block(pooled) if pooled else (None, None, [])
    if not pooled:
        agg["latency_notes"] = ["no raw latencies from every host (latencies.npz)"]
    peaks = [r.get("peak_flops") for r in records]
    estimate = any(r.get("mfu_is_estimate") for r in records)
    agg["MFU"], agg["MFU_note"] = plausible_mfu(pooled_mfu(first.get("flops"), agg[Key.INFER_CORE_QPS], peaks), estimate)
    agg["mfu_is_estimate"] = estimate if agg["MFU"] is not None else None
    agg["peak_flops_source"] = first.get("peak_flops_source")
    agg["vendor_usage(GiB)"] = agg["vendor_max_mem(GiB)"] = None

    invalid = [r["host"] for r in records if not (r.get("verdict") or {}).get("valid")]
    reasons = [f"invalid on host(s) {', '.join(invalid)}"] if invalid else []
    agg["verdict"] = {"valid": not reasons, "reasons": reasons}

    def row_key(row: dict) -> tuple:
        return row["batch_size"], row["scenario"], row["clients"]

    per_host = [{row_key(row): (i, row) for i, row in enumerate(r.get("performance") or [])} for r in records]
    for key in per_host[0]:
        if not all(key in rows for rows in per_host):
            continue
        matched = [rows[key] for rows in per_host]
        latencies = _pooled([{"row": raw[f"performance_{i}"]} if f"performance_{i}" in raw else {} for raw, (i, _) in zip(raws, matched)], "row")
        block, count, notes = _latency_block(latencies) if latencies else (None, None, ["no raw latencies from every host"])
        rows = [row for _, row in matched]
        qps = _sum([row.get("qps") for row in rows])
        bad = [h for h, row in zip(hosts, rows) if not row["verdict"]["valid"]]
        agg["performance"].append(
            {
                "batch_size": key[0],
                "scenario": key[1],
                "clients": key[2],
                "qps": qps,
                "queries": sum(row["queries"] for row in rows),
                "samples": sum(row.get("samples") or 0 for row in rows),
                "latency_ms": block or {},
                "latency_notes": notes,
                "pooled_queries": count,
                "target_qps": _sum([row.get("target_qps") for row in rows]) if rows[0].get("target_qps") is not None else None,
                "latency_bound_met": None,
                **dict(zip(("MFU", "MFU_note"), plausible_mfu(pooled_mfu(first.get("flops"), qps, peaks), estimate))),
                "verdict": {"valid": not bad, "reasons": [f"invalid on host(s) {', '.join(bad)}"] if bad else []},
            }
        )
    return agg


def _load(log_dir: str | None) -> tuple[dict, dict]:
    if not log_dir:
        return {}, {}
    path = Path(log_dir) / RESULT_FILE
    result = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    return result, read_latencies(log_dir)


def aggregate_records(records: list[dict], load=None) -> list[dict]:
    """One aggregate per case:framework that succeeded on two or more hosts."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for record in records:
        if record.get("status") == "success" and not record.get("aggregate"):
            groups.setdefault((record["case"], record["framework"]), []).append(record)
    return [aggregate_case(group, load) for group in groups.values() if len(group) > 1]


def with_aggregates(records: list[dict], aggregates: list[dict]) -> list[dict]:
    """``records`` with each aggregate placed after its case's last host row."""
    out: list[dict] = []
    for index, record in enumerate(records):
        out.append(record)
        following = records[index + 1] if index + 1 < len(records) else None
        if following is None or (following["case"], following["framework"]) != (record["case"], record["framework"]):
            out.extend(a for a in aggregates if (a["case"], a["framework"]) == (record["case"], record["framework"]))
    return out
