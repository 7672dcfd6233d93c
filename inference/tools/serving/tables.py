"""``run.py --endpoint``'s console line per step, and the steps' Pareto points (result.json's). Its
summary.md is written by run.py's one summary writer (``utils/results/summary.py::write_serving_summary``)."""

from __future__ import annotations

from common import serving_record
from common.serving_record import ServingStep, error_kinds, plus_minus, verdict_text


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


def step_line(step: ServingStep) -> str:
    """The console's line for a step: completions, throughput, failures by kind, verdict."""
    out = plus_minus(step.throughput["output_tokens_per_s"])
    kinds = error_kinds(step.errors)
    failed = f", {step.failed} failed ({kinds})" if kinds else ""
    return (
        f"{step.label}: {step.completed}/{step.requests} completed{failed}, output {out} tokens/s, "
        f"{verdict_text(step.verdict)}"
    )
