"""An LLM case's block in summary.json and its table in summary.md (host side).

``result.json``'s ``llm`` block (``common.record.LLMBlock``, docs/result_schema.md) is written
with the MFU of each cell and server row added: prefill and decode FLOP/s (the container's
``prefill_flops_per_s``, ``decode_flops_per_s``) over the device's peak, by ``common.mfu``'s
rules (an impossible MFU above 100 % becomes a note). summary.json's block stays a JSON object.
"""

from __future__ import annotations

from typing import Any

from common.mfu import plausible_mfu
from common.record import CaseResult, LLMRow, ServingRow
from common.scenario import scenario as named
from common.stats import relative_half_width

HEADER = (
    "| case | host | scenario | bs | in | out | TTFT p50 ms | TPOT p50 ms | ITL p99 ms | output tokens/s | requests/s "
    "| "
    "prefill tokens/s | prefill MFU | KV cache MiB | verdict |"
)


def _mfu(flops_per_s: Any, peak: float | None, estimate: bool | None) -> dict:
    value = flops_per_s / peak if isinstance(flops_per_s, (int, float)) and peak else None
    shown, note = plausible_mfu(value, estimate)
    return {"mfu": shown, "mfu_note": note}


def llm_record(result: CaseResult | None, peak_flops: float | None, estimate: bool | None) -> dict | None:
    """``result.llm`` as summary.json's JSON object, with ``prefill_mfu``/``decode_mfu`` (and their notes)
    on every cell and row; None without one."""
    llm = result.llm if result is not None else None
    if llm is None:
        return None

    def with_mfu(row: LLMRow) -> dict:
        added = {}
        for phase, flops_per_s in (("prefill", row.prefill_flops_per_s), ("decode", row.decode_flops_per_s)):
            figure = _mfu(flops_per_s, peak_flops, estimate)
            added[f"{phase}_mfu"], added[f"{phase}_mfu_note"] = figure["mfu"], figure["mfu_note"]
        return {**row.to_json(), **added}

    return {
        **llm.to_json(),
        "table": [with_mfu(c) for c in llm.table],
        "server": [with_mfu(r) for r in llm.server],
    }


def _ms(block: dict | None, name: str) -> str:
    value = (block or {}).get(name)
    if value is None:
        return "n/a"
    width = relative_half_width(value, ((block or {}).get("ci95") or {}).get(name))
    return f"{value:.2f}" + (f" ±{width:.0%}" if width is not None else "")


def _rate(row: dict, key: str) -> str:
    value = row.get(key)
    if value is None:
        return "n/a"
    width = relative_half_width(value, row.get(f"{key}_ci95"))
    return f"{value:.1f}" + (f" ±{width:.0%}" if width is not None else "")


def _row_line(record: dict, row: dict, estimate: bool | None) -> str:
    chosen = named(row["scenario"])
    if chosen.scheduled:
        scenario = f"{chosen.name} @{row['target_qps']:g} req/s"
        if row.get("ttft_bound_met") is not None:
            met = row["ttft_bound_met"] and row.get("tpot_bound_met")
            scenario += f", {row['bound_percentile']} bounds {'met' if met else 'MISSED'}"
        shape = (
            "1",
            f"{row['input_length_range'][0]}-{row['input_length_range'][1]}",
            f"{row['output_length_range'][0]}-{row['output_length_range'][1]}",
        )
    else:
        scenario, shape = chosen.name, (str(row["batch_size"]), str(row["input_length"]), str(row["output_length"]))
    mfu = row.get("prefill_mfu")
    mfu_cell = "n/a" if mfu is None else f"{mfu * 100:.2f}%" + (" est." if estimate else "")
    verdict = "valid" if row["verdict"]["valid"] else f"INVALID ({len(row['verdict']['reasons'])})"
    prefill = row.get("prefill_tokens_per_s")
    return (
        f"| {record['case']}:{record['framework']} | {record['host']} | {scenario} | {' | '.join(shape)} | "
        f"{_ms(row.get('ttft_ms'), 'p50')} | {_ms(row.get('tpot_ms'), 'p50')} | {_ms(row.get('itl_ms'), 'p99')} | "
        f"{_rate(row, 'output_tokens_per_s')} | {_rate(row, 'requests_per_s')} | "
        f"{'n/a' if prefill is None else f'{prefill:.1f}'} | "
        f"{mfu_cell} | {row.get('kv_cache_mib', 0) or 0:.2f} | {verdict} |"
    )


SERVING_HEADER = (
    "| case | host | server | streams | in | out | requests | failed | TTFT p50 ms | TPOT p50 ms | ITL p99 ms "
    "| output tokens/s | requests/s | tokens/s per user | verdict |"
)


def _serving_line(record: dict, row: ServingRow) -> str:
    verdict = "valid" if row.verdict.valid else f"INVALID ({len(row.verdict.reasons)})"
    per_user = "n/a" if row.tokens_per_s_per_user is None else f"{row.tokens_per_s_per_user:.1f}"
    served = ((record.get("llm") or {}).get("served_by") or {}).get("server", "server")
    return (
        f"| {record['case']}:{record['framework']} | {record['host']} | {served} | {row.concurrency} | "
        f"{row.input_length} | {row.output_length} | {row.completed}/{row.requests} | {row.failed} | "
        f"{_ms(row.ttft_ms, 'p50')} | {_ms(row.tpot_ms, 'p50')} | {_ms(row.itl_ms, 'p99')} | "
        f"{_rate(row.to_json(), 'output_tokens_per_s')} | {_rate(row.to_json(), 'requests_per_s')} | {per_user} | "
        f"{verdict} |"
    )


def serving_lines(records: list[dict]) -> list[str]:
    """A served LLM's steps (``llm.serving``) for summary.md; [] when no record has any."""
    rows = [
        (r, ServingRow.from_json(row, f"{r['case']}:{r['framework']} llm.serving[{i}]"))
        for r in records
        for i, row in enumerate((r.get("llm") or {}).get("serving") or [])
    ]
    if not rows:
        return []
    lines = ["", "LLM serving over HTTP (closed-loop streams; TTFT from each request's sending):", ""]
    lines += [SERVING_HEADER, "|" + "---|" * (SERVING_HEADER.count("|") - 1)]
    return lines + [_serving_line(r, row) for r, row in rows]


def markdown_lines(records: list[dict]) -> list[str]:
    """The LLM table for summary.md ([] when no record has an ``llm`` block), then a served LLM's steps."""
    rows = [
        (r, row)
        for r in records
        if r.get("llm")
        for row in (r["llm"].get("table") or []) + (r["llm"].get("server") or [])
    ]
    if not rows and not any(r.get("llm") for r in records):
        return []
    lines = serving_lines(records)
    if rows or not lines:
        lines += [
            "",
            "LLM generation (offline: batches back to back, TTFT from the batch's issue; server: Poisson arrivals, "
            "TTFT from arrival):",
            "",
        ]
        lines += [HEADER, "|" + "---|" * (HEADER.count("|") - 1)]
        lines += [_row_line(r, row, r.get("mfu_is_estimate")) for r, row in rows]
    for r in records:
        greedy = (r.get("llm") or {}).get("greedy")
        if greedy and greedy.get("share") is not None:
            state = "passed" if greedy["passed"] else "FAILED"
            lines.append(
                f"- {r['case']}:{r['framework']} on {r['host']}: greedy tokens agree with the framework model at "
                f"{greedy['share']:.2%} of {greedy['positions']} positions (target {greedy['target']:.0%}): {state}"
            )
    return lines
