"""An LLM case's block in summary.json and its table in summary.md (host side).

``result.json``'s ``llm`` block (``common.record.LLMBlock``, docs/result_schema.md) is written
with the MFU of each cell and server row added: prefill and decode FLOP/s (the container's
``prefill_flops_per_s``, ``decode_flops_per_s``) over the device's peak, by ``common.mfu``'s
rules (an impossible MFU above 100 % becomes a note): ``common.summary_record.SummaryLLM``.
"""

from __future__ import annotations

from typing import Any, Sequence

from common.cells import interval_text
from common.mfu import plausible_mfu
from common.record import CaseResult, LLMRow, ServingStep
from common.scenario import scenario as named
from common.serving_record import error_kinds, is_endpoint, server_rows, shown, verdict_text
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


def _plus_minus(throughput: dict, key: str) -> str:
    """A throughput with its ± (``common.cells``, from its ci95); "—" where the step has none."""
    block = throughput.get(key)
    if not isinstance(block, dict):
        return "—"
    value = block.get("value")
    return shown(value) + interval_text(value, block, "ci95")


def _percentile(block: dict, name: str, digits: int = 1) -> str:
    """A step's latency percentile with its ± where the step measured its interval (``common.cells``)."""
    value = block.get(name)
    return shown(value, digits) + (interval_text(value, block.get("ci95"), name) if value is not None else "")


def step_rows(steps: Sequence[ServingStep]) -> list[dict]:
    """The one table of a served LLM's load steps (a serving run's and a serving vendor's): a row of
    text per step (a vendor's with the lengths it asked for, a capacity probe named so)."""
    rows = []
    for s in steps:
        t, slo = s.throughput, s.slo or {}
        asked = f" (in {s.input_length}, out {s.output_length})" if s.input_length is not None else ""
        probe = " (capacity probe)" if s.phase == "capacity" else ""
        rows.append(
            {
                "step": s.label + asked + probe,
                "requests": f"{s.completed}/{s.requests}",
                "failed": s.failed,
                "errors": error_kinds(s.errors) or "—",
                "requests_per_s": _plus_minus(t, "requests_per_s"),
                "output_tokens_per_s": _plus_minus(t, "output_tokens_per_s"),
                "ttft_p50_ms": _percentile(s.ttft_ms, "p50"),
                "ttft_p90_ms": _percentile(s.ttft_ms, "p90"),
                "ttfa_p50_ms": shown(s.ttfa_ms.get("p50")),
                "tpot_p50_ms": _percentile(s.tpot_ms, "p50", 2),
                "itl_p50_ms": shown(s.itl_ms.get("p50"), 2),
                "itl_p99_ms": shown(s.itl_ms.get("p99"), 2),
                "e2e_p50_ms": shown(s.e2e_ms.get("p50")),
                "tokens_per_s_per_user": shown(s.tokens_per_s_per_user),
                "goodput_requests_per_s": _plus_minus(t, "goodput_requests_per_s"),
                "slo_attainment": f"{slo['attainment']:.0%} ({slo['verdict']})" if slo else "—",
                "verdict": verdict_text(s.verdict),
            }
        )
    return rows


def table(rows: list[dict]) -> list[str]:
    """Rows of text (the same keys each) as a markdown table's lines."""
    if not rows:
        return ["(no steps)"]
    keys = list(rows[0])
    return ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)] + [
        "| " + " | ".join(str(r[k]) for k in keys) + " |" for r in rows
    ]


def serving_lines(records: list[SummaryRecord]) -> list[str]:
    """A served LLM's steps (``llm.serving``) for summary.md, a table per record (a serving run's own
    under its title, ``serving_markdown``); [] when no record has any."""
    lines: list[str] = []
    for r in records:
        if not (r.llm and r.llm.serving):
            continue
        if not is_endpoint(r):
            served = (r.llm.served_by or {}).get("server", "server")
            lines += ["", f"LLM serving over HTTP, {r.name} on {r.host} ({served}; TTFT from each request's sending):"]
        elif r.repetitions is not None:
            lines += ["", f"Each figure with ±: the geometric mean of the {r.repetitions.count} repetitions (run.py "
                      "--repeat) with their 95 % t-interval; the other columns are repetition 1's:"]  # fmt: skip
        lines += ["", *table(step_rows(r.llm.serving))]
    return lines


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


# ---- a serving run's own lines (run.py --endpoint: utils/results/summary.py::serving_markdown) -------------
def serving_notes(blocks: list[dict]) -> list[str]:
    """summary.md's notes on what the steps' audits found (``blocks``: serving/result.json's steps, of
    every repetition): tokens counted otherwise, usage figures refused, total tokens/s n/a, reasoning."""
    notes = sorted({b["token_count_note"] for b in blocks if b.get("token_count_note")})
    refused = sum(b["audits"]["usage_refused"]["requests"] for b in blocks if "audits" in b)
    if refused:
        example = next(e for b in blocks if "audits" in b for e in b["audits"]["usage_refused"]["examples"])
        notes.append(f"{refused} request(s)' usage refused as impossible and counted otherwise (e.g. {example})")
    if any(((b.get("throughput") or {}).get("total_tokens_per_s") or {}).get("not_judged") for b in blocks):
        notes.append("total tokens/s is n/a where some completed requests' prompt tokens are unknown")
    for b in blocks:
        r = b.get("reasoning") or {}
        if r.get("requests"):
            notes.append(
                f"{b['label']}: {r['requests']} replies reasoned: {r['reasoning_tokens']} reasoning tokens and "
                f"{r['answer_tokens']} answer tokens (reasoning counted by {', '.join(r['counted_by'])}); "
                f"time to the first answer token p50 {shown((b.get('ttfa_ms') or {}).get('p50'))} ms against "
                f"TTFT p50 {shown((b.get('ttft_ms') or {}).get('p50'))} ms"
                + (f"; {r['without_answer']} without an answer token" if r.get("without_answer") else "")
            )
    return list(dict.fromkeys(notes))


def server_lines(steps: Sequence[ServingStep], url: str | None) -> list[str]:
    """summary.md's section of the server's own figures (its /metrics), a row per step beside the client's
    TTFT, and the TTFT cross-check; one line when the server exposes none."""
    if not steps:
        return []
    if url is None:
        return ["", "server metrics: not scraped (--metrics-url off)"]
    rows = server_rows(steps)
    if not rows:
        blocks = [s.server_metrics or {} for s in steps]
        note = next((b["note"] for b in blocks if b.get("note")), "not exposed")
        return ["", f"server metrics: {note.removesuffix(' (at an earlier step; not asked again)')}"]
    lines = ["", f"## The server's own figures (GET {url}; mean / peak over the step's samples)", "", *table(rows)]
    why = None
    for step in steps:
        check = (step.server_metrics or {}).get("ttft_crosscheck")
        if not (isinstance(check, dict) and check.get("judged")):
            continue
        lines.append(
            f"\nTTFT cross-check, {step.label}: client mean {check['client_mean_ms']:.2f} ms, server "
            f"{check['server_mean_ms']:.2f} ms (client - server {check['difference_mean_ms']:+.2f} ms); p50 client "
            f"{check['client_p50_ms']:.2f} ms, server {shown(check['server_p50_ms'], 2)} ms "
            f"(its bucket {check['server_p50_bucket_ms']})" + (f"; {check['note']}" if check.get("note") else "")
        )
        why = check.get("why") or why
    if why:
        lines += ["", f"{why}."]
    return lines
