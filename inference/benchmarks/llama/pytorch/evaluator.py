"""MMLU scoring as FlagPerf's LLM cases do it: decode the argmax of the next-token
logits, keep its letters A-D, and compare them with the answer letter."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from .dataloader import CHOICES


def evaluator(outputs: Sequence[Any], y: Any, decode: Callable[[list[int]], str] | None = None) -> float:
    """Share of the batch's questions answered right; ``outputs[0]`` is ``[batch, vocab]`` logits."""
    if decode is None:
        raise ValueError("evaluator: the llama case scores by decoding tokens; pass the tokenizer's decode")
    logits = outputs[0]
    if logits.dim() != 2 or logits.shape[0] != len(y.answers):
        raise ValueError(f"evaluator: expected logits [{len(y.answers)}, vocab], got {list(logits.shape)}")
    chosen = logits.argmax(dim=-1).tolist()
    right = sum(
        "".join(c for c in decode([token]) if c in CHOICES) == answer for token, answer in zip(chosen, y.answers)
    )
    return right / len(y.answers) if y.answers else 0.0
