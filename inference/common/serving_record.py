"""A serving run's summary.json (``ServingSummary``, ``run.py --endpoint``'s), and the frontier of its
steps (``pareto``).

Its rows are ``common.record.ServingStep``, the one row of a served LLM's load step that a serving
vendor (``compiler: vllm``, ``llamacpp``) writes into result.json's ``llm.serving`` too. Both are
records of the one codec (``common/codec.py``): a key's JSON is its field's declaration. A summary
without its identity (``run_id``, ``endpoint``, ``served_model``), a row without its own (``label``,
``phase``, ``verdict``) or a key of the wrong type is one ``RecordError`` line naming the file and key.
``run.py compare`` and the results history read them back (``utils/results/serving_compare.py``). The
keys are described in docs/serving.md.
"""

from __future__ import annotations

from typing import Any, Final, Sequence

from common.codec import Json, Record, json_field
from common.record import RecordError, ServingStep, Verdict, step_figures
from common.stats import pareto_front
from common.summary_record import Repetitions, SummaryLLM, SummaryRecord

__all__ = ["SERVING", "ServingStep", "ServingSummary", "pareto", "step_figures"]


def pareto(steps: list[ServingStep]) -> list[ServingStep]:
    """The steps no other step beats on both tokens/s per user and output tokens/s, in their order: the
    throughput-latency frontier (``common.stats.pareto_front``) with a step's latency its time per token."""
    usable = []
    for step in steps:
        user, total = step.tokens_per_s_per_user, step.rate("output_tokens_per_s")
        if user and total:
            usable.append((step, 1.0 / float(user), float(total)))
    front = set(pareto_front([(per_token, total) for _, per_token, total in usable]))
    return [step for i, (step, _, _) in enumerate(usable) if i in front]


SERVING: Final = "serving"  # summary.json's ``kind`` of a run.py --endpoint run


class ServingSummary(Record, where="summary.json"):
    """A serving run's summary.json (``"kind": "serving"``): where it measured (``endpoint``,
    ``served_model``, ``api``), what it sent (``seed``, ``workload``), the SLO it judged by, a
    ``ServingStep`` per sweep step and capacity probe, and the capacity search's result."""

    kind: str = json_field(kw_only=True, default=SERVING)
    run_id: str = json_field(required=True)
    endpoint: str = json_field(required=True)
    served_model: str = json_field(required=True)
    api: str | None
    seed: int | None
    workload: Json
    slo: Json | None
    rows: tuple[ServingStep, ...]
    capacity: Json | None
    # run.py --endpoint --repeat N (and each side of run.py ab): the step plan ran N times, each a folder
    # of its own; ``rows`` hold the repetitions' geometric means, this block every repetition's figure
    repetitions: Repetitions | None = json_field(default=None, skip_none=True)

    @property
    def steps(self) -> tuple[ServingStep, ...]:
        """The sweep's steps (the capacity probes ran at loads the bisection chose: not rows to compare)."""
        return tuple(row for row in self.rows if row.phase == "step")

    @classmethod
    def from_json(cls, data: Any, where: str | None = None) -> ServingSummary:
        """The summary; a JSON object without ``"kind": "serving"`` is refused before its keys are read."""
        where = cls.WHERE if where is None else where
        if not isinstance(data, dict) or data.get("kind") != SERVING:
            raise RecordError(f'{where}: not a serving run\'s summary (no "kind": "serving")')
        return super().from_json(data, where)


ENDPOINT_FRAMEWORK: Final = "endpoint"  # a serving run's record's framework: ``serving:endpoint``


def as_record(summary: ServingSummary, log_dir: str | None = None) -> SummaryRecord:
    """A serving run as one record of a run of cases (``serving:endpoint`` on its endpoint): its sweep's
    steps as a served LLM's ``llm.serving`` rows (the capacity probes ran at loads the bisection chose:
    they are no rows), its repetitions block, and a verdict naming each INVALID step. The one shape
    that summary.md, compare and the results history read a served LLM's steps in."""
    reasons = tuple(f"{step.label}: {reason}" for step in summary.steps for reason in step.verdict.reasons)
    unjudged = tuple(f"{step.label}: {what}" for step in summary.steps for what in step.verdict.not_judged)
    return SummaryRecord(
        case="serving",
        framework=ENDPOINT_FRAMEWORK,
        host=f"{summary.served_model} at {summary.endpoint}",
        noderank=None,
        status="success",
        log_dir=log_dir,
        verdict=Verdict(reasons=reasons, not_judged=unjudged),
        llm=SummaryLLM(
            model={"served_model": summary.served_model},
            workload=dict(summary.workload),
            serving=summary.steps,
            served_by={"endpoint": summary.endpoint, "api": summary.api},
        ),
        repetitions=summary.repetitions,
    )


def is_endpoint(record: SummaryRecord) -> bool:
    """A serving run's record (``as_record``), not a case's."""
    return record.case == "serving" and record.framework == ENDPOINT_FRAMEWORK


# ---- a step's text: summary.md's table (utils/results/llm_summary.py) and the console's line -------------
def plus_minus(block: dict) -> str:
    """A throughput block (``{value, plus_minus}``) as ``12.3 ±4.5%`` (``±?`` without its interval)."""
    value, pm = block.get("value"), block.get("plus_minus")
    return f"{shown(value)} ±{pm:.1%}" if pm is not None else f"{shown(value)} ±?"


def error_kinds(errors: dict[str, int]) -> str:
    """Failed requests by kind, most first: ``stall 2, http_500 1``."""
    return ", ".join(f"{kind} {n}" for kind, n in sorted(errors.items(), key=lambda item: (-item[1], item[0])))


def verdict_text(verdict: Verdict) -> str:
    text = "VALID" if verdict.valid else "INVALID: " + "; ".join(verdict.reasons)
    unjudged = verdict.not_judged
    return text + ("" if not unjudged else " (not judged: " + "; ".join(unjudged) + ")")


# ---- the server's own figures (tools/serving/metrics.py's block, a step's ``server_metrics``) ---------------
NOT_EXPOSED: Final = "not exposed"  # a figure the server does not expose: never read as 0


def not_exposed(block: Any) -> bool:
    return not isinstance(block, dict) or not block.get("exposed")


def shown(value: Any, digits: int = 1, scale: float = 1.0, unit: str = "") -> str:
    """A figure for summary.md: "not exposed", "—" (none over the step), or the number."""
    if value == NOT_EXPOSED:
        return NOT_EXPOSED
    if value is None:
        return "—"
    return f"{value * scale:.{digits}f}{unit}"


def summary_row(label: str, block: dict, client_ttft: dict) -> dict:
    """summary.md's row of the server's figures for one step, beside the client's TTFT."""
    if not_exposed(block):
        return {"step": label, "server": NOT_EXPOSED}

    def gauge(key: str, scale: float = 1.0, digits: int = 1, unit: str = "") -> str:
        value = block.get(key)
        if not isinstance(value, dict):
            return NOT_EXPOSED
        return f"{shown(value['mean'], digits, scale, unit)} / {shown(value['peak'], digits, scale, unit)}"

    ttft, queue = block.get("ttft_ms"), block.get("queue_time_ms")
    spec = block.get("spec_decode")
    return {
        "step": label,
        "server": block.get("server") or "?",
        "kv_cache_mean_peak": gauge("kv_cache_usage", 100.0, 1, " %"),
        "prefix_cache_hit_rate": shown(block.get("prefix_cache_hit_rate"), 1, 100.0, " %"),
        "running_mean_peak": gauge("running"),
        "waiting_mean_peak": gauge("waiting"),
        "queue_time_mean_ms": shown(queue.get("mean") if isinstance(queue, dict) else NOT_EXPOSED, 2),
        "server_ttft_mean_p50_ms": (
            f"{shown(ttft.get('mean'), 2)} / {shown(ttft.get('p50'), 2)}" if isinstance(ttft, dict) else NOT_EXPOSED
        ),
        "client_ttft_mean_p50_ms": f"{shown(client_ttft.get('mean'), 2)} / {shown(client_ttft.get('p50'), 2)}",
        "preemptions": shown(block.get("preemptions"), 0),
        "spec_acceptance": shown(spec.get("acceptance_rate"), 1, 100.0, " %")
        if isinstance(spec, dict)
        else NOT_EXPOSED,
    }


def server_rows(steps: Sequence[ServingStep]) -> list[dict]:
    """Each step's row of the server's own figures beside the client's TTFT (``summary_row``), every row
    with the same keys (a step the server exposed nothing for reads "not exposed"); [] when it exposed none."""
    blocks = [step.server_metrics or {} for step in steps]
    if not any(block.get("exposed") for block in blocks):
        return []
    rows = [summary_row(step.label, block, step.ttft_ms) for step, block in zip(steps, blocks)]
    keys = list(next(row for row in rows if len(row) > 2))
    return [row if len(row) > 2 else {key: row.get(key, NOT_EXPOSED) for key in keys} for row in rows]
