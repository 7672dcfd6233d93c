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

from typing import Any

from common.mfu import plausible_mfu, pooled_mfu
from common.record import QPS_KEYS, CaseResult, Key, read_latencies, read_result, row_key
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


def _concurrent(results: list[CaseResult | None]) -> bool | None:
    spans = [
        (r.inference.started_at_unix, r.inference.finished_at_unix) if r is not None and r.inference else (None, None)
        for r in results
    ]
    starts, ends = [a for a, _ in spans], [b for _, b in spans]
    if any(a is None for a in starts) or any(b is None for b in ends):
        return None
    return max(a for a in starts if a is not None) < min(b for b in ends if b is not None)


def _phase_samples(result: CaseResult | None, phase: str) -> int:
    block = (result.validation if phase == "validation" else result.inference) if result is not None else None
    return (block.samples if block is not None else 0) or 0


def _weighted_accuracy(records: list[dict], results: list[CaseResult | None], key: str, phase: str) -> float | None:
    values = [r.get(key) for r in records]
    weights = [_phase_samples(res, phase) for res in results]
    known = [v for v in values if v is not None]
    if len(known) < len(values) or not sum(weights):
        return None
    return sum(v * w for v, w in zip(known, weights)) / sum(weights)


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
    agg["latency_ms"], agg["latency_batches"], agg["latency_notes"] = (
        _latency_block(pooled) if pooled else (None, None, [])
    )
    if not pooled:
        agg["latency_notes"] = ["no raw latencies from every host (latencies.npz)"]
    peaks = [r.get("peak_flops") for r in records]
    estimate = any(r.get("mfu_is_estimate") for r in records)
    agg["MFU"], agg["MFU_note"] = plausible_mfu(
        pooled_mfu(first.get("flops"), agg[Key.INFER_CORE_QPS], peaks), estimate
    )
    agg["mfu_is_estimate"] = estimate if agg["MFU"] is not None else None
    agg["peak_flops_source"] = first.get("peak_flops_source")
    agg["vendor_usage(GiB)"] = agg["vendor_max_mem(GiB)"] = None

    invalid = [r["host"] for r in records if not (r.get("verdict") or {}).get("valid")]
    reasons = [f"invalid on host(s) {', '.join(invalid)}"] if invalid else []
    agg["verdict"] = {"valid": not reasons, "reasons": reasons}

    per_host = [{row_key(row): (i, row) for i, row in enumerate(r.get("performance") or [])} for r in records]
    for identity in per_host[0]:
        if not all(identity in rows for rows in per_host):
            continue
        matched = [rows[identity] for rows in per_host]
        latencies = _pooled(
            [
                {"row": raw[f"performance_{i}"]} if f"performance_{i}" in raw else {}
                for raw, (i, _) in zip(raws, matched)
            ],
            "row",
        )
        block, count, notes = (
            _latency_block(latencies) if latencies else (None, None, ["no raw latencies from every host"])
        )
        rows = [row for _, row in matched]
        qps = _sum([row.get("qps") for row in rows])
        bad = [h for h, row in zip(hosts, rows) if not row["verdict"]["valid"]]
        agg["performance"].append(
            {
                "batch_size": identity[0],
                "scenario": identity[1],
                "clients": identity[2],
                "qps": qps,
                "queries": sum(row["queries"] for row in rows),
                "samples": sum(row.get("samples") or 0 for row in rows),
                "latency_ms": block or {},
                "latency_notes": notes,
                "pooled_queries": count,
                "target_qps": _sum([row.get("target_qps") for row in rows])
                if rows[0].get("target_qps") is not None
                else None,
                "latency_bound_met": None,
                **dict(zip(("MFU", "MFU_note"), plausible_mfu(pooled_mfu(first.get("flops"), qps, peaks), estimate))),
                "verdict": {"valid": not bad, "reasons": [f"invalid on host(s) {', '.join(bad)}"] if bad else []},
            }
        )
    return agg


def _load(log_dir: str | None) -> tuple[CaseResult | None, dict]:
    if not log_dir:
        return None, {}
    return read_result(log_dir), read_latencies(log_dir)


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
