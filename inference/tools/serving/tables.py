"""``run.py --endpoint``'s text: summary.md's table (a row per step), the console's line per step, the
server's own figures beside the client's, the audits' notes, and the steps' Pareto points."""

from __future__ import annotations

from common import serving_record
from common.record import Verdict
from common.serving_record import ServingStep
from tools.serving import metrics as server_metrics


def pareto(steps: list[dict]) -> list[dict]:
    """result.json's ``pareto``: the steps not beaten on both tokens/s per user and output tokens/s
    (``common.serving_record.pareto``), each as its label and those two figures."""
    return [
        {
            "label": s.label,
            "tokens_per_s_per_user": s.tokens_per_s_per_user,
            "output_tokens_per_s": s.rate("output_tokens_per_s"),
        }
        for s in serving_record.pareto([ServingStep.of(block) for block in steps])
    ]


def _fmt(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _pm(block: dict) -> str:
    pm = block.get("plus_minus")
    return f"{_fmt(block.get('value'))} ±{pm:.1%}" if pm is not None else f"{_fmt(block.get('value'))} ±?"


def summary_rows(steps: list[ServingStep]) -> list[dict]:
    """summary.md's table: a row of text per step."""
    rows = []
    for s in steps:
        t, slo = s.throughput, s.slo or {}
        rows.append(
            {
                "step": s.label,
                "requests": f"{s.completed}/{s.requests}",
                "failed": s.failed,
                "errors": error_kinds(s.errors) or "—",
                "requests_per_s": _pm(t["requests_per_s"]),
                "output_tokens_per_s": _pm(t["output_tokens_per_s"]),
                "ttft_p50_ms": _fmt(s.ttft_ms["p50"]),
                "ttft_p90_ms": _fmt(s.ttft_ms["p90"]),
                "ttfa_p50_ms": _fmt(s.ttfa_ms.get("p50")),
                "tpot_p50_ms": _fmt(s.tpot_ms["p50"], 2),
                "itl_p50_ms": _fmt(s.itl_ms["p50"], 2),
                "e2e_p50_ms": _fmt(s.e2e_ms["p50"]),
                "tokens_per_s_per_user": _fmt(s.tokens_per_s_per_user),
                "goodput_requests_per_s": _pm(t["goodput_requests_per_s"]) if "goodput_requests_per_s" in t else "—",
                "slo_attainment": f"{slo['attainment']:.0%} ({slo['verdict']})" if slo else "—",
                "verdict": verdict_text(s.verdict),
            }
        )
    return rows


def error_kinds(errors: dict[str, int]) -> str:
    """Failed requests by kind, most first: ``stall 2, http_500 1``."""
    return ", ".join(f"{kind} {n}" for kind, n in sorted(errors.items(), key=lambda item: (-item[1], item[0])))


def verdict_text(verdict: Verdict) -> str:
    text = "VALID" if verdict.valid else "INVALID: " + "; ".join(verdict.reasons)
    unjudged = verdict.not_judged
    return text + ("" if not unjudged else " (not judged: " + "; ".join(unjudged) + ")")


def step_line(step: ServingStep) -> str:
    """The console's line for a step: completions, throughput, failures by kind, verdict."""
    out = _pm(step.throughput["output_tokens_per_s"])
    kinds = error_kinds(step.errors)
    failed = f", {step.failed} failed ({kinds})" if kinds else ""
    return (
        f"{step.label}: {step.completed}/{step.requests} completed{failed}, output {out} tokens/s, "
        f"{verdict_text(step.verdict)}"
    )


def markdown(rows: list[dict], header: str) -> str:
    if not rows:
        return header + "\n\n(no steps)\n"
    keys = list(rows[0])
    lines = [header, "", "| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def server_section(steps: list[dict], url: str | None) -> str:
    """summary.md's section of the server's own figures (its /metrics), a row per step beside the client's
    TTFT, and the TTFT cross-check; one line when the server exposes none."""
    blocks = [s.get("server_metrics") or {} for s in steps]
    if not steps:
        return ""
    if url is None:
        return "\nserver metrics: not scraped (--metrics-url off)\n"
    if not any(b.get("exposed") for b in blocks):
        note = next((b["note"] for b in blocks if b.get("note")), "not exposed")
        return f"\nserver metrics: {note.removesuffix(' (at an earlier step; not asked again)')}\n"
    rows = serving_record.server_rows([ServingStep.of(s) for s in steps])
    text = "\n" + markdown(rows, f"## The server's own figures (GET {url}; mean / peak over the step's samples)")
    checks = [
        (s["label"], b["ttft_crosscheck"])
        for s, b in zip(steps, blocks)
        if b.get("exposed") and isinstance(b.get("ttft_crosscheck"), dict) and b["ttft_crosscheck"].get("judged")
    ]
    for label, check in checks:
        text += (
            f"\nTTFT cross-check, {label}: client mean {check['client_mean_ms']:.2f} ms, server "
            f"{check['server_mean_ms']:.2f} ms (client - server {check['difference_mean_ms']:+.2f} ms); p50 client "
            f"{check['client_p50_ms']:.2f} ms, server {serving_record.shown(check['server_p50_ms'], 2)} ms "
            f"(its bucket {check['server_p50_bucket_ms']})" + (f"; {check['note']}" if check.get("note") else "")
        )
    if checks:
        text += f"\n\n{server_metrics.CROSSCHECK_WHY}.\n"
    return text


def run_notes(steps: list[dict]) -> list[str]:
    """summary.md's notes on what the audits found: usage figures refused, total tokens/s n/a."""
    notes = []
    refused = sum(s["audits"]["usage_refused"]["requests"] for s in steps if "audits" in s)
    if refused:
        example = next(e for s in steps for e in s["audits"]["usage_refused"]["examples"])
        notes.append(f"{refused} request(s)' usage refused as impossible and counted otherwise (e.g. {example})")
    if any((s["throughput"].get("total_tokens_per_s") or {}).get("not_judged") for s in steps):
        notes.append("total tokens/s is n/a where some completed requests' prompt tokens are unknown")
    for s in steps:
        r = s.get("reasoning") or {}
        if r.get("requests"):
            notes.append(
                f"{s['label']}: {r['requests']} replies reasoned: {r['reasoning_tokens']} reasoning tokens and "
                f"{r['answer_tokens']} answer tokens (reasoning counted by {', '.join(r['counted_by'])}); "
                f"time to the first answer token p50 {_fmt((s.get('ttfa_ms') or {}).get('p50'))} ms against "
                f"TTFT p50 {_fmt(s['ttft_ms']['p50'])} ms"
                + (f"; {r['without_answer']} without an answer token" if r.get("without_answer") else "")
            )
    return notes
