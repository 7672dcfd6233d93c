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

from typing import Any, Callable

from common.mfu import plausible_mfu, pooled_mfu
from common.record import CaseResult, LatencyBlock, Verdict, read_latencies, read_result
from common.stats import LatencyStats
from common.summary_record import AggregateRow, SummaryRecord

Loader = Callable[[str | None], tuple[CaseResult | None, dict]]


def _sum(values: list[Any]) -> float | None:
    return None if any(v is None for v in values) else float(sum(values))


def _latency_block(samples_ns: list[int]) -> tuple[LatencyBlock | None, int | None, list[str]]:
    stats = LatencyStats.from_ns(samples_ns)
    if stats is None:
        return None, None, []
    block = LatencyBlock(p50=stats.p50, p90=stats.p90, p99=stats.p99, p99_9=stats.p99_9, mean=stats.mean)
    return block, stats.count, stats.notes


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


def _weighted_accuracy(values: list[float | None], results: list[CaseResult | None], phase: str) -> float | None:
    weights = [_phase_samples(res, phase) for res in results]
    known = [v for v in values if v is not None]
    if len(known) < len(values) or not sum(weights):
        return None
    return sum(v * w for v, w in zip(known, weights)) / sum(weights)


def _invalid_on(hosts: list[str]) -> Verdict:
    return Verdict(reasons=(f"invalid on host(s) {', '.join(hosts)}",) if hosts else ())


def aggregate_case(records: list[SummaryRecord], load: Loader | None = None) -> SummaryRecord:
    """The aggregate row of one case's successful per-host records (two or more)."""
    loader = load or _load
    loaded = [loader(r.log_dir) for r in records]
    results, raws = [res for res, _ in loaded], [raw for _, raw in loaded]
    first = records[0]
    hosts = [r.host for r in records]
    precisions, batchsizes = {r.precision for r in records}, {r.batchsize for r in records}
    infer_core_qps = _sum([r.infer_core_qps for r in records])
    pooled = _pooled(raws, "inference")
    latency, batches, notes = _latency_block(pooled) if pooled else (None, None, [])
    peaks = [r.peak_flops for r in records]
    estimate = any(r.mfu_is_estimate for r in records)
    mfu, mfu_note = plausible_mfu(pooled_mfu(first.flops, infer_core_qps, peaks), estimate)
    return SummaryRecord(
        case=first.case,
        framework=first.framework,
        host=f"all {len(records)} hosts",
        noderank=None,
        status="success",
        wall_time_s=max((r.wall_time_s or 0.0) for r in records),
        vendor=first.vendor,
        compiler=first.compiler,
        precision=precisions.pop() if len(precisions) == 1 else "mixed",
        batchsize=batchsizes.pop() if len(batchsizes) == 1 else "mixed",
        flops=first.flops,
        val_whole_qps=_sum([r.val_whole_qps for r in records]),
        val_core_qps=_sum([r.val_core_qps for r in records]),
        infer_whole_qps=_sum([r.infer_whole_qps for r in records]),
        infer_core_qps=infer_core_qps,
        val_average_acc=_weighted_accuracy([r.val_average_acc for r in records], results, "validation"),
        infer_average_acc=_weighted_accuracy([r.infer_average_acc for r in records], results, "inference"),
        verdict=_invalid_on([r.host for r in records if not (r.verdict is not None and r.verdict.valid)]),
        accuracy_note=first.accuracy_note,
        latency_ms=latency,
        latency_batches=batches,
        latency_notes=notes if pooled else ["no raw latencies from every host (latencies.npz)"],
        mfu_is_estimate=estimate if mfu is not None else None,
        peak_flops_source=first.peak_flops_source,
        mfu=mfu,
        mfu_note=mfu_note,
        performance=tuple(_aggregate_rows(records, raws, peaks, estimate)),
        repetitions_key=first.repetitions is not None or first.repetitions_key,
        aggregate=True,
        hosts=hosts,
        concurrent=_concurrent(results),
    )


def _aggregate_rows(
    records: list[SummaryRecord], raws: list[dict], peaks: list[float | None], estimate: bool
) -> list[AggregateRow]:
    """A row for every (batch size, scenario, clients) that every host measured."""
    out: list[AggregateRow] = []
    hosts = [r.host for r in records]
    per_host = [{row.key: (i, row) for i, row in enumerate(r.performance)} for r in records]
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
        qps = _sum([row.qps for row in rows])
        mfu, mfu_note = plausible_mfu(pooled_mfu(records[0].flops, qps, peaks), estimate)
        out.append(
            AggregateRow(
                batch_size=identity[0],
                scenario=identity[1],
                clients=identity[2],
                qps=qps,
                queries=sum(row.queries for row in rows),
                samples=sum(row.samples or 0 for row in rows),
                latency_ms=block,
                latency_notes=notes,
                pooled_queries=count,
                target_qps=_sum([row.target_qps for row in rows]) if rows[0].target_qps is not None else None,
                latency_bound_met=None,
                mfu=mfu,
                mfu_note=mfu_note,
                verdict=_invalid_on([h for h, row in zip(hosts, rows) if not row.verdict.valid]),
            )
        )
    return out


def _load(log_dir: str | None) -> tuple[CaseResult | None, dict]:
    if not log_dir:
        return None, {}
    return read_result(log_dir), read_latencies(log_dir)


def aggregate_records(records: list[SummaryRecord], load: Loader | None = None) -> list[SummaryRecord]:
    """One aggregate per case:framework that succeeded on two or more hosts."""
    groups: dict[tuple[str, str], list[SummaryRecord]] = {}
    for record in records:
        if record.succeeded and not record.aggregate:
            groups.setdefault((record.case, record.framework), []).append(record)
    return [aggregate_case(group, load) for group in groups.values() if len(group) > 1]


def with_aggregates(records: list[SummaryRecord], aggregates: list[SummaryRecord]) -> list[SummaryRecord]:
    """``records`` with each aggregate placed after its case's last host row."""
    out: list[SummaryRecord] = []
    for index, record in enumerate(records):
        out.append(record)
        following = records[index + 1] if index + 1 < len(records) else None
        if following is None or (following.case, following.framework) != (record.case, record.framework):
            out.extend(a for a in aggregates if (a.case, a.framework) == (record.case, record.framework))
    return out
