"""FlagPerf's prefill pass: one forward per prompt, timed by the framework's loop.

Throughput is in prompt tokens/s (a sample is a token: ``dataloader.py``), so
``p_inference_core`` is FlagPerf's prefill figure for its LLM cases and MFU
follows from ``flops`` per token. Accuracy is per question: the share whose
answer letter is the decoded argmax of the next-token logits (``evaluator.py``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable

from contract.measuring import measuring
from contract.phase import PhaseResult

from .model import framework_step

if TYPE_CHECKING:
    from contract.config import CaseConfig


class _PerQuestion:
    """The evaluator as the loop calls it, keeping each question's result: the loop
    weights batch accuracy by samples (tokens here), FlagPerf counts questions."""

    def __init__(self, evaluator: Callable, decode: Callable) -> None:
        self.evaluator, self.decode = evaluator, decode
        self.right = 0
        self.asked = 0

    def __call__(self, outputs: list, y: Any) -> float:
        score = self.evaluator(outputs, y, self.decode)
        self.right += round(score * len(y.answers))
        self.asked += len(y.answers)
        return score

    def accuracy(self) -> float | None:
        return self.right / self.asked if self.asked else None


def _timed(step: Callable, dataloader: Any, evaluator: Callable, config: CaseConfig, phase: str) -> PhaseResult:
    answers = getattr(getattr(dataloader, "dataset", None), "answers", None) or [None]
    scored = all(answer is not None for answer in answers)
    if not scored:
        return measuring().timed_forward(step, dataloader, None, config, phase=phase)
    from .weights import load_tokenizer

    tokenizer = load_tokenizer(config)
    tally = _PerQuestion(evaluator, lambda ids: tokenizer.decode(ids))
    result = measuring().timed_forward(step, dataloader, tally, config, phase=phase)
    return replace(result, accuracy=tally.accuracy())


def model_forward(model: Any, dataloader: Any, evaluator: Callable, config: CaseConfig) -> PhaseResult:
    return _timed(framework_step(model, config), dataloader, evaluator, config, "validation")


def engine_forward(engine: Any, dataloader: Any, evaluator: Callable, config: CaseConfig) -> PhaseResult:
    return _timed(engine, dataloader, evaluator, config, "inference")
