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

from typing import Any, Final

from common.codec import Json, Record, json_field
from common.record import RecordError, ServingStep, step_figures
from common.stats import pareto_front

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
