"""An LLM case's block in summary.json and its table in summary.md (host side).

``result.json``'s ``llm`` block (``common.record.LLMBlock``, docs/result_schema.md) is written
with the MFU of each cell and server row added: prefill and decode FLOP/s (the container's
``prefill_flops_per_s``, ``decode_flops_per_s``) over the device's peak, by ``common.mfu``'s
rules (an impossible MFU above 100 % becomes a note): ``common.summary_record.SummaryLLM``.
"""

from __future__ import annotations

from typing import Any

from common.cells import interval_text
from common.mfu import plausible_mfu
from common.record import CaseResult, LLMRow, ServingStep
from common.scenario import scenario as named
from common.summary_record import SummaryLLM, SummaryLLMRow, SummaryRecord

HEADER = (
    "| case | host | scenario | bs | in | out | TTFT p50 ms | TPOT p50 ms | ITL p99 ms | output tokens/s | requests/s "
    "| "
    "prefill tokens/s | prefill MFU | KV cache MiB | verdict |"
)


def _mfu(flops_per_s: Any, peak: float | None, estimate: bool | None) -> tuple[float | None, str | None]:
    value = flops_per_s / peak if isinstance(flops_per_s, (int, float)) and peak else None
    return plausible_mfu(value, estimate)


def llm_record(result: CaseResult | None, peak_flops: float | None, estimate: bool | None) -> SummaryLLM | None:
    """``result.llm`` as summary.json's block, with ``prefill_mfu``/``decode_mfu`` (and their notes)
    on every cell and row; None without one."""
    llm = result.llm if result is not None else None
    if llm is None:
        return None

    def with_mfu(row: LLMRow) -> SummaryLLMRow:
        prefill, prefill_note = _mfu(row.prefill_flops_per_s, peak_flops, estimate)
        decode, decode_note = _mfu(row.decode_flops_per_s, peak_flops, estimate)
        return SummaryLLMRow.of(
            row, prefill_mfu=prefill, prefill_mfu_note=prefill_note, decode_mfu=decode, decode_mfu_note=decode_note
        )

    return SummaryLLM(
        model=llm.model,
        workload=llm.workload,
        table=tuple(with_mfu(c) for c in llm.table),
        server=tuple(with_mfu(r) for r in llm.server),
        greedy=llm.greedy,
        serving=llm.serving,
        served_by=llm.served_by,
    )


def _ms(block: dict | None, name: str) -> str:
    value = (block or {}).get(name)
    if value is None:
        return "n/a"
    return f"{value:.2f}" + interval_text(value, (block or {}).get("ci95"), name, share_digits=0)


def _rate(value: float | None, intervals: dict[str, Any] | None = None, key: str = "ci95") -> str:
    """A rate with its ± (``common.cells``): ``intervals[key]`` where the row measures one."""
    if value is None:
        return "n/a"
    return f"{value:.1f}" + interval_text(value, intervals, key, share_digits=0)


def _range(lengths: list[int] | None) -> str:
    low, high = lengths if lengths else (None, None)
    return f"{low}-{high}"


def _row_line(record: SummaryRecord, row: SummaryLLMRow, estimate: bool | None) -> str:
    chosen = named(row.scenario)
    if chosen.scheduled:
        scenario = f"{chosen.name} @{row.target_qps:g} req/s"
        if row.ttft_bound_met is not None:
            met = row.ttft_bound_met and row.tpot_bound_met
            scenario += f", {row.bound_percentile} bounds {'met' if met else 'MISSED'}"
        shape = ("1", _range(row.input_length_range), _range(row.output_length_range))
    else:
        scenario, shape = chosen.name, (str(row.batch_size), str(row.input_length), str(row.output_length))
    mfu = row.prefill_mfu
    mfu_cell = "n/a" if mfu is None else f"{mfu * 100:.2f}%" + (" est." if estimate else "")
    verdict = "valid" if row.verdict.valid else f"INVALID ({len(row.verdict.reasons)})"
    prefill = row.prefill_tokens_per_s
    return (
        f"| {record.name} | {record.host} | {scenario} | {' | '.join(shape)} | "
        f"{_ms(row.ttft_ms, 'p50')} | {_ms(row.tpot_ms, 'p50')} | {_ms(row.itl_ms, 'p99')} | "
        f"{_rate(row.output_tokens_per_s, {'ci95': row.output_tokens_per_s_ci95})} | {_rate(row.requests_per_s)} | "
        f"{'n/a' if prefill is None else f'{prefill:.1f}'} | "
        f"{mfu_cell} | {row.kv_cache_mib or 0:.2f} | {verdict} |"
    )


SERVING_HEADER = (
    "| case | host | server | streams | in | out | requests | failed | TTFT p50 ms | TPOT p50 ms | ITL p99 ms "
    "| output tokens/s | requests/s | tokens/s per user | verdict |"
)


def _serving_line(record: SummaryRecord, row: ServingStep) -> str:
    verdict = "valid" if row.verdict.valid else f"INVALID ({len(row.verdict.reasons)})"
    per_user = "n/a" if row.tokens_per_s_per_user is None else f"{row.tokens_per_s_per_user:.1f}"
    served = ((record.llm.served_by if record.llm else None) or {}).get("server", "server")
    tokens, requests = (row.throughput.get(name) or {} for name in ("output_tokens_per_s", "requests_per_s"))
    return (
        f"| {record.name} | {record.host} | {served} | {row.concurrency} | "
        f"{row.input_length} | {row.output_length} | {row.completed}/{row.requests} | {row.failed} | "
        f"{_ms(row.ttft_ms, 'p50')} | {_ms(row.tpot_ms, 'p50')} | {_ms(row.itl_ms, 'p99')} | "
        f"{_rate(tokens.get('value'), tokens)} | {_rate(requests.get('value'), requests)} | {per_user} | {verdict} |"
    )


def serving_lines(records: list[SummaryRecord]) -> list[str]:
    """A served LLM's steps (``llm.serving``) for summary.md; [] when no record has any."""
    rows = [(r, row) for r in records if r.llm for row in r.llm.serving]
    if not rows:
        return []
    lines = ["", "LLM serving over HTTP (closed-loop streams; TTFT from each request's sending):", ""]
    lines += [SERVING_HEADER, "|" + "---|" * (SERVING_HEADER.count("|") - 1)]
    return lines + [_serving_line(r, row) for r, row in rows]


def markdown_lines(records: list[SummaryRecord]) -> list[str]:
    """The LLM table for summary.md ([] when no record has an ``llm`` block), then a served LLM's steps."""
    rows = [(r, row) for r in records if r.llm for row in r.llm.rows]
    if not rows and not any(r.llm for r in records):
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
        lines += [_row_line(r, row, r.mfu_is_estimate) for r, row in rows]
    for r in records:
        greedy = r.llm.greedy if r.llm else None
        if greedy and greedy.get("share") is not None:
            state = "passed" if greedy["passed"] else "FAILED"
            lines.append(
                f"- {r.name} on {r.host}: greedy tokens agree with the framework model at "
                f"{greedy['share']:.2%} of {greedy['positions']} positions (target {greedy['target']:.0%}): {state}"
            )
    return lines
