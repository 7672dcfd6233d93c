"""What one load step gives: latency distributions, throughputs with their ±, goodput and SLO
attainment, the verdict, and the stop rule that measures a step until it is precise.

  window          first request sent to last stream ended.
  requests/s      completed requests / window; output tokens/s and total tokens/s (input +
                  output) the same for tokens. Each carries its 95 % interval by batch means
                  over the window (``tools.measure.precision``: requests as concurrent queries,
                  each from its sending to its end), and the drift test of its thirds.
  SLO             ``{ttft_ms, tpot_ms, e2e_ms, percentile}``: a request meets it when it
                  completed and every bound given holds; it misses it when it failed or a bound
                  fails; a reply with no TPOT (one token, or one token event) under a TPOT bound
                  that meets every other bound is *not judged*, neither met nor missed.
  attainment      requests meeting the SLO / requests judged (failures count as missing it),
                  with its Wilson 95 % interval. ``percentile`` (default 90) is the attainment
                  the SLO asks for: the step meets the SLO when the interval's low end reaches
                  it, misses it when the high end stays below, and is undecided between
                  (``percentile`` 100: meets only when every request met it).
  goodput         requests (and output tokens) meeting the SLO / window, with interval.
  tokens/s per user  1000 / TPOT (ms), the median over requests: the decode speed one user sees.
  total tokens/s  n/a (None) when a completed request's prompt tokens are unknown.
  TTFA            time to the first answer token (a reasoning model's reasoning streams first); the
                  ``reasoning`` block splits the output tokens into the reasoning's and the answer's.
  timeslices      the window cut into ``slices`` equal parts (``timeslices``): each part's output tokens/s
                  (each token event of a completed request carrying its share of the request's output
                  tokens, counted where it arrived) and the TTFT of the requests sent in it.

Judged in the verdict besides drift and precision (each an INVALID reason naming its figures):
  error rate      failed / issued above ``max_error_rate`` (default 1 %);
  output length   MLPerf TEST09: the mean generated length of the completed replies that did not
                  end on EOS (``finish_reason`` other than ``stop``) against the mean ``max_tokens``
                  asked, within ±10 %; generated = the server's usage, else the tokenizer, else events;
  token counts    MLPerf TEST06's spirit: where both the server's usage and the tokenizer counted a
                  reply, their sums must agree within a factor of ``TOKEN_AUDIT_FACTOR`` (2); beyond
                  ±10 % a note says so (re-encoding text need not give back the generated ids: a
                  random 19 M Llama's 2048 generated tokens re-encoded to 2800, 1.37x);
  schedule lag    a rate or trace step whose client sent its requests late (coordinated omission):
                  the p99 of (sent - due), due = the arrival's time or, under ``max_concurrency``,
                  when its slot freed, above ``lag_bound_ms`` = max(``LAG_FLOOR_MS``, one mean
                  inter-arrival gap). An arrival late by a whole mean gap has run into the next one's
                  place: the offered process is no longer the one asked for. The floor is the
                  scheduling noise a busy shared host adds to any process (``LAG_FLOOR_MS``).
                  A schedule of one instant (rate inf) has nothing to keep: not judged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from common.errors import ConfigError, shown
from common.record import NOT_PRECISE
from common.stats import percentile
from contract.phase import Verdict
from contract.settings import MAX_DURATION_REACHED, MINIMUMS_MET, PRECISION_REACHED
from tools.measure.llm import stats_block
from tools.measure.precision import (
    StopRule,
    Target,
    Timeline,
    drift,
    drift_reason,
    measure_figures,
    throughput_interval,
)
from tools.serving.client import RequestRecord

SLO_BOUNDS = ("ttft_ms", "tpot_ms", "e2e_ms")
THROUGHPUTS = (
    "requests_per_s",
    "output_tokens_per_s",
    "total_tokens_per_s",
    "goodput_requests_per_s",
    "goodput_tokens_per_s",
)
JUDGED = ("requests_per_s", "output_tokens_per_s")
DEFAULT_MAX_ERROR_RATE = 0.01
LENGTH_TOLERANCE = 0.10  # MLPerf TEST09: the mean output length within ±10 % of the length asked
TOKEN_AUDIT_FACTOR = 2.0  # usage and tokenizer counts further apart than this: not re-encoding, a wrong count
LAG_FLOOR_MS = 20.0
DEFAULT_TIMESLICES = 5


@dataclass(frozen=True)
class SLO:
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    percentile: float = 90.0

    @classmethod
    def parse(cls, data: Any, key: str = "slo") -> "SLO | None":
        if data is None:
            return None
        if not isinstance(data, dict):
            raise ConfigError(f"{key}: {shown(data)} must be a mapping of {', '.join(SLO_BOUNDS)} (and percentile)")
        unknown = sorted(set(data) - set(SLO_BOUNDS) - {"percentile"})
        if unknown:
            raise ConfigError(f"{key}.{unknown[0]}: unknown SLO key (known: {', '.join(SLO_BOUNDS)}, percentile)")
        values: dict[str, float] = {}
        for name, value in data.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(f"{key}.{name}: {shown(value)} must be a number")
            if value < 0:
                raise ConfigError(f"{key}.{name}: {shown(value)} is negative; a bound must be >= 0")
            values[name] = float(value)
        if not any(name in values for name in SLO_BOUNDS):
            raise ConfigError(f"{key}: give at least one of {', '.join(SLO_BOUNDS)}")
        if not 0 < values.get("percentile", 90.0) <= 100:
            raise ConfigError(f"{key}.percentile: {shown(data['percentile'])} must be in (0, 100]")
        return cls(**values)

    def judge(self, record: RequestRecord) -> str:
        """``met``, ``missed``, or ``not judged`` (a bound given whose figure the reply has none of:
        the TPOT of a one-token or one-event reply, when every other bound holds)."""
        if not record.ok:
            return "missed"
        checks = ((self.ttft_ms, record.ttft_ns), (self.tpot_ms, record.tpot_ns), (self.e2e_ms, record.e2e_ns))
        if any(bound is not None and value is not None and value / 1e6 > bound for bound, value in checks):
            return "missed"
        if any(bound is not None and value is None for bound, value in checks):
            return "not judged"
        return "met"

    def met(self, record: RequestRecord) -> bool:
        return self.judge(record) == "met"

    def to_dict(self) -> dict:
        return {"ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms, "e2e_ms": self.e2e_ms, "percentile": self.percentile}


def wilson(successes: int, total: int, z: float = 1.959964) -> list[float] | None:
    """Wilson score 95 % interval of a proportion (None for no trials)."""
    if total <= 0:
        return None
    p = successes / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return [max(0.0, centre - half), min(1.0, centre + half)]


def slo_verdict(attained: float, interval: list[float] | None, target_share: float) -> str:
    if interval is None:
        return "undecided"
    if target_share >= 1.0:  # every request must meet it: no interval can show that, the count does
        return "meets" if attained >= 1.0 else "misses"
    if interval[0] >= target_share:
        return "meets"
    if interval[1] < target_share:
        return "misses"
    return "undecided"


def timelines(records: list[RequestRecord], slo: SLO | None) -> tuple[dict[str, Timeline], float]:
    """Each throughput's timeline over the window (ns from the first sending), and the window in s."""
    if not records:
        return {}, 0.0
    t0 = min(r.sent_ns for r in records)
    t1 = max(r.end_ns or r.sent_ns for r in records)
    ends = [(r.end_ns or r.sent_ns) - t0 for r in records]
    spans = [(r.end_ns or r.sent_ns) - r.sent_ns for r in records]
    ok = [1.0 if r.ok else 0.0 for r in records]
    out_tokens = [float(r.output_tokens or 0) if r.ok else 0.0 for r in records]
    samples = {"requests_per_s": ok, "output_tokens_per_s": out_tokens}
    if all(r.input_tokens is not None for r in records if r.ok):  # else total tokens/s is n/a, not a guess
        samples["total_tokens_per_s"] = [
            out + float(r.input_tokens or 0) * good for out, good, r in zip(out_tokens, ok, records)
        ]
    if slo is not None:
        met = [1.0 if slo.met(r) else 0.0 for r in records]
        samples["goodput_requests_per_s"] = met
        samples["goodput_tokens_per_s"] = [m * t for m, t in zip(met, out_tokens)]
    span = float(t1 - t0)
    return {name: Timeline.spans(ends, spans, values, span_ns=span) for name, values in samples.items()}, span / 1e9


def step_figures(
    records: list[RequestRecord],
    slo: SLO | None,
    precision: float | None,
    stopped: str | None = None,
    max_error_rate: float = DEFAULT_MAX_ERROR_RATE,
    slices: int = DEFAULT_TIMESLICES,
) -> dict:
    """The step's block of result.json (see the module docstring)."""
    ok = [r for r in records if r.ok]
    lines, window_s = timelines(records, slo)
    verdict = Verdict()
    throughput, drifts = throughput_figures(records, lines, window_s, precision, verdict)
    if not ok:
        verdict.add("no request completed")
    errors = error_counts(records)
    audits = step_audits(records, max_error_rate, verdict)
    tpots = sorted(r.tpot_ns for r in ok if r.tpot_ns)
    per_user = sorted(1e9 / t for t in tpots)
    lags = sorted((r.sent_ns - r.scheduled_ns) / 1e6 for r in records if r.scheduled_ns is not None)
    block: dict[str, Any] = {
        "requests": len(records),
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "errors": errors,
        "error_examples": [dict(r.error, index=r.index) for r in records if r.error is not None][:5],
        "duration_s": window_s,
        "stopped": stopped,
        "token_source": sorted({r.token_source for r in records if r.token_source}),
        "token_count_note": token_count_note(ok),
        # None when no request's prompt tokens are known (token_source "events": no usage, no tokenizer)
        "input_tokens": sum(r.input_tokens or 0 for r in ok) if any(r.input_tokens is not None for r in ok) else None,
        "output_tokens": sum(r.output_tokens or 0 for r in ok),
        "ttft_ms": stats_block([t for r in ok if (t := r.ttft_ns) is not None]),
        "ttfa_ms": stats_block([t for r in ok if (t := r.ttfa_ns) is not None]),
        "reasoning": reasoning_figures(ok),
        "tpot_ms": stats_block(tpots),
        "itl_ms": stats_block([g for r in ok for g in r.itl_ns()]),
        "e2e_ms": stats_block([t for r in ok if (t := r.e2e_ns) is not None]),
        "tokens_per_s_per_user": percentile(per_user, 50.0) if per_user else None,
        "schedule_lag_ms_p99": percentile(lags, 99.0) if lags else None,
        "client_lag_ms_p99": audits["schedule"].get("p99_ms"),
        "throughput": throughput,
        "drift": drifts,
        "audits": audits,
        "timeslices": timeslices(records, slices),
    }
    if slo is not None:
        block["slo"] = slo_figures(records, slo, verdict)
    block["verdict"] = verdict.to_dict()
    return block


def throughput_figures(
    records: list[RequestRecord], lines: dict[str, Timeline], window_s: float, precision: float | None, verdict: Verdict
) -> tuple[dict[str, dict], dict]:
    """Each throughput's value and interval, and the judged ones' drift; their reasons into ``verdict``."""
    throughput: dict[str, dict] = {}
    if records and "total_tokens_per_s" not in lines:
        throughput["total_tokens_per_s"] = {
            "value": None,
            "ci95": None,
            "plus_minus": None,
            "not_judged": "n/a: the prompt tokens of some completed requests are unknown (no usage, no tokenizer)",
        }
    drifts = {}
    for name, line in lines.items():
        value = float(line.samples.sum()) / window_s if window_s > 0 else None
        interval = throughput_interval(line)
        ci = interval.around(value) if interval is not None and value else None
        width = (ci[1] - ci[0]) / 2 / value if ci and value else None
        throughput[name] = {"value": value, "ci95": ci, "plus_minus": width}
        if name in JUDGED:
            found = drift(line, precision)
            drifts[name] = found.to_dict() if found is not None else None
            verdict.add(drift_reason(name, found))
            if precision is not None and (width is None or width > precision):
                shown_width = (
                    "has no interval (too few or too correlated requests)" if width is None else f"±{width:.1%}"
                )
                verdict.add(f"{NOT_PRECISE}{name} {shown_width} (precision {precision:.0%})")
    return throughput, drifts


def error_counts(records: list[RequestRecord]) -> dict[str, int]:
    """The failed requests by kind."""
    errors: dict[str, int] = {}
    for r in records:
        if r.error is not None:
            errors[r.error["kind"]] = errors.get(r.error["kind"], 0) + 1
    return errors


def step_audits(records: list[RequestRecord], max_error_rate: float, verdict: Verdict) -> dict[str, Any]:
    """The step's audits (error rate, output lengths, token counts, schedule, usage refused); what
    fails one is a reason in ``verdict``, what cannot be judged is named there."""
    ok = [r for r in records if r.ok]
    failed = len(records) - len(ok)
    if records and failed > max_error_rate * len(records):
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(error_counts(records).items()))
        verdict.add(
            f"error rate {failed / len(records):.1%} ({failed} of {len(records)} "
            f"requests failed: {kinds}) above max_error_rate {max_error_rate:.1%}"
        )
    lag = schedule_audit(records)
    if lag.get("reason"):
        verdict.add(lag["reason"])
    if lag.get("not_judged"):
        verdict.skip([lag["not_judged"]])
    audits: dict[str, Any] = {
        "error_rate": {"value": failed / len(records) if records else None, "max_error_rate": max_error_rate},
        "output_length": length_audit(ok),
        "token_counts": token_audit(ok),
        "schedule": lag,
        "usage_refused": usage_refused(records),
        "tpot_not_judged": sum(1 for r in ok if r.tpot_ns is None),
    }
    for audit in ("output_length", "token_counts"):
        verdict.add(audits[audit].get("reason"))
    return audits


def slo_figures(records: list[RequestRecord], slo: SLO, verdict: Verdict) -> dict[str, Any]:
    """The step's SLO attainment with its Wilson interval and verdict; requests not judged on TPOT named."""
    judged = [slo.judge(r) for r in records]
    met, unjudged = judged.count("met"), judged.count("not judged")
    counted = len(records) - unjudged
    share = met / counted if counted else 0.0
    attained = wilson(met, counted)
    if unjudged:
        verdict.skip([f"SLO: {unjudged} of {len(records)} requests not judged on TPOT (one token or one token event)"])
    return {
        **slo.to_dict(),
        "met": met,
        "not_judged": unjudged,
        "attainment": share,
        "attainment_ci95": attained,
        "verdict": slo_verdict(share, attained, slo.percentile / 100),
    }


def reasoning_figures(ok: list[RequestRecord]) -> dict:
    """The completed replies' output split into reasoning and answer tokens (client.py's ``count_reasoning``)."""
    with_reasoning = [r for r in ok if r.reasoning_tokens]
    return {
        "requests": len(with_reasoning),
        "reasoning_tokens": sum(r.reasoning_tokens or 0 for r in ok),
        "answer_tokens": sum(r.answer_tokens or 0 for r in ok),
        "counted_by": sorted({r.reasoning_source for r in with_reasoning if r.reasoning_source}),
        "without_answer": sum(1 for r in ok if r.answer_ns is None),
    }


def timeslices(records: list[RequestRecord], slices: int = DEFAULT_TIMESLICES) -> dict:
    """The step's window (first sent to last ended) cut into ``slices`` equal parts: each part's output
    tokens/s and the TTFT of the requests sent in it (module docstring)."""
    if not records or slices < 1:
        return {"slices": slices, "width_s": None, "items": []}
    t0 = min(r.sent_ns for r in records)
    t1 = max(r.end_ns or r.sent_ns for r in records)
    width = (t1 - t0) / slices
    if width <= 0:
        return {"slices": slices, "width_s": 0.0, "items": []}

    def slot(t_ns: int) -> int:
        return min(slices - 1, max(0, int((t_ns - t0) / width)))

    tokens = [0.0] * slices
    sent = [0] * slices
    completed = [0] * slices
    ttfts: list[list[float]] = [[] for _ in range(slices)]
    for r in records:
        sent[slot(r.sent_ns)] += 1
        if not r.ok:
            continue
        completed[slot(r.end_ns or r.sent_ns)] += 1
        if r.token_ns and r.output_tokens:
            share = r.output_tokens / len(r.token_ns)
            for t in r.token_ns:
                tokens[slot(t)] += share
        if r.ttft_ns is not None:
            ttfts[slot(r.sent_ns)].append(r.ttft_ns / 1e6)
    items = []
    for i in range(slices):
        ordered = sorted(ttfts[i])
        items.append(
            {
                "index": i,
                "start_s": i * width / 1e9,
                "end_s": (i + 1) * width / 1e9,
                "requests_sent": sent[i],
                "requests_completed": completed[i],
                "output_tokens": tokens[i],
                "output_tokens_per_s": tokens[i] / (width / 1e9),
                "ttft_ms": {
                    "count": len(ordered),
                    "mean": sum(ordered) / len(ordered) if ordered else None,
                    "p50": percentile(ordered, 50.0) if ordered else None,
                },
            }
        )
    return {"slices": slices, "width_s": width / 1e9, "items": items}


def length_audit(ok: list[RequestRecord]) -> dict:
    """MLPerf TEST09: the mean generated length of the replies that did not end on EOS against the
    mean length asked (module docstring). ``reason`` when outside ±``LENGTH_TOLERANCE``."""
    counted = [r for r in ok if r.finish_reason != "stop" and r.max_tokens]
    if not counted:
        why = "every completed reply ended on EOS" if ok else "no request completed"
        return {"judged": False, "why": why}
    made = [r.usage_output_tokens if r.usage_output_tokens is not None else (r.output_tokens or 0) for r in counted]
    mean_made = sum(made) / len(made)
    mean_asked = sum(r.max_tokens or 0 for r in counted) / len(counted)
    source = sorted({"usage" if r.usage_output_tokens is not None else (r.token_source or "events") for r in counted})
    out: dict[str, Any] = {
        "judged": True,
        "requests": len(counted),
        "mean_output_tokens": mean_made,
        "mean_max_tokens": mean_asked,
        "ratio": mean_made / mean_asked,
        "counted_by": source,
    }
    if abs(mean_made - mean_asked) > LENGTH_TOLERANCE * mean_asked:
        out["reason"] = (
            f"output length audit: {len(counted)} replies not ended on EOS generated {mean_made:.1f} tokens on "
            f"average where {mean_asked:.1f} were asked (counted by {', '.join(source)}; MLPerf TEST09 allows "
            f"±{LENGTH_TOLERANCE:.0%})"
        )
    return out


def token_audit(ok: list[RequestRecord]) -> dict:
    """The server's usage against the tokenizer's count of the same replies (module docstring)."""
    pairs = [(r.tokenizer_output_tokens, r.usage_output_tokens) for r in ok]
    both = [(t, u) for t, u in pairs if t is not None and u is not None]
    if not both:
        return {"judged": False, "why": "needs both the server's usage and --tokenizer"}
    ours, theirs = sum(t for t, _ in both), sum(u for _, u in both)
    out: dict[str, Any] = {"judged": True, "requests": len(both), "tokenizer": ours, "usage": theirs}
    if theirs and ours:
        out["ratio"] = ours / theirs
    if (theirs == 0) != (ours == 0) or (
        theirs and ours and not 1 / TOKEN_AUDIT_FACTOR <= ours / theirs <= TOKEN_AUDIT_FACTOR
    ):
        out["reason"] = (
            f"token count audit: the server's usage says {theirs} output tokens where the tokenizer counts {ours} "
            f"in the same {len(both)} replies (beyond a factor of {TOKEN_AUDIT_FACTOR:g})"
        )
    return out


def schedule_audit(records: list[RequestRecord]) -> dict:
    """How late the client sent what its schedule said (module docstring); {} for closed loops."""
    scheduled = [r for r in records if r.scheduled_ns is not None]
    if not scheduled:
        return {}
    lags = sorted(max(0, r.sent_ns - (r.slot_ns or r.scheduled_ns or 0)) / 1e6 for r in scheduled)
    p99 = percentile(lags, 99.0)
    times = sorted(r.scheduled_ns or 0 for r in scheduled)
    out: dict[str, Any] = {"p99_ms": p99}
    if len(times) < 2 or times[-1] == times[0]:
        out["not_judged"] = "schedule lag: every request was due at once (nothing to keep to)"
        return out
    gap_ms = (times[-1] - times[0]) / (len(times) - 1) / 1e6
    bound = max(LAG_FLOOR_MS, gap_ms)
    out.update(mean_gap_ms=gap_ms, bound_ms=bound)
    if p99 > bound:
        out["reason"] = (
            f"the client fell behind its schedule (coordinated omission): schedule lag p99 {p99:.1f} ms "
            f"above {bound:.1f} ms (max of {LAG_FLOOR_MS:g} ms and one mean inter-arrival gap, {gap_ms:.1f} ms)"
        )
    return out


def usage_refused(records: list[RequestRecord]) -> dict:
    notes = [n for r in records for n in r.notes if n.startswith("usage refused")]
    return {
        "requests": sum(1 for r in records if any(n.startswith("usage refused") for n in r.notes)),
        "examples": notes[:3],
    }


def token_count_note(records: list[RequestRecord]) -> str | None:
    """A sentence when the tokenizer's output counts differ from the server's usage by over 10 %."""
    pairs = [(r.tokenizer_output_tokens, r.usage_output_tokens) for r in records if r.usage_output_tokens]
    pairs = [p for p in pairs if p[0] is not None]
    if not pairs:
        return None
    ours, theirs = sum(p[0] or 0 for p in pairs), sum(p[1] for p in pairs)
    if abs(ours - theirs) <= 0.1 * theirs:
        return None
    return (
        f"the tokenizer counted {ours} output tokens where the server's usage says {theirs}: "
        "re-tokenising the generated text "
        "does not give back the generated ids (TPOT and tokens/s follow the token source; "
        "--count-tokens usage counts the server's)"
    )


class StepStop:
    """When a step stops issuing: ``min_requests`` always; then, with no precision, at once;
    with one, when requests/s and output tokens/s are within it (``StopRule``, checked at most
    every half second), or at ``max_duration_s``."""

    def __init__(
        self, min_requests: int, precision: float | None, max_duration_s: float, clock_start_ns: int | None = None
    ) -> None:
        self.min_requests = min_requests
        self.precision = precision
        self.max_duration_s = max_duration_s
        self.start_ns = clock_start_ns
        self.rule = StopRule(Target(throughput=JUDGED, precision=precision), max_s=max_duration_s)
        self.reason: str | None = None

    def __call__(self, records: list[RequestRecord], now_ns: int) -> bool:
        if self.start_ns is None:
            self.start_ns = min(r.sent_ns for r in records)
        if len(records) < self.min_requests:
            return False
        if self.precision is None:
            self.reason = MINIMUMS_MET
            return True
        elapsed = now_ns - self.start_ns
        if elapsed >= self.max_duration_s * 1e9:
            self.reason = MAX_DURATION_REACHED
            return True
        lines, _ = timelines(records, None)
        decision = self.rule.decide(now_ns, elapsed, lambda: measure_figures(self.rule.target, lines))
        if decision is not None:
            self.reason = decision
            return True
        return False


__all__ = ["SLO", "StepStop", "step_figures", "wilson", "PRECISION_REACHED"]
