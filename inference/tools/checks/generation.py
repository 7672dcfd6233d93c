"""Numeric checks of an LLM engine against the framework model on the same prompts.

Greedy agreement: the engine generates ``n`` greedy tokens per prompt; the
framework model then reads each prompt followed by the engine's tokens in one
forward (teacher forcing) and picks its own greedy token at every position,
never an end-of-sequence token (``eos_ids``), as the engine contract says
(``contract/llm_base.py``: a query generates exactly its N tokens).
The share of positions where the two agree is the figure (target for fp32:
``greedy_agreement_target``, 0.99). Teacher forcing keeps one early difference
from counting against every later position, which comparing two free-running
generations would do; the first position where the engine's token differs
is reported too.

Prefill logits: the engine's logits after its prefill against the framework's
at the last prompt position, by ``tools.checks.numeric.compare_outputs`` (the
normalised relative difference every case uses, tolerances per precision).

``reference(ids)`` is the framework model as a function: int64 ids
``[batch, length]`` -> float logits ``[batch, length, vocab]``.
"""

from __future__ import annotations

from typing import Any, Callable

from loguru import logger

from tools.checks.numeric import compare_outputs

Reference = Callable[[Any], Any]


def greedy_agreement(engine_tokens: Any, reference_tokens: Any, target: float) -> dict:
    """Share of positions where both chose the same token; ``passed`` against ``target``."""
    import numpy as np

    engine_tokens, reference_tokens = np.asarray(engine_tokens), np.asarray(reference_tokens)
    if engine_tokens.shape != reference_tokens.shape:
        return {
            "positions": 0,
            "agreeing": 0,
            "share": None,
            "target": target,
            "passed": False,
            "reason": (
                f"the engine gave tokens of shape {list(engine_tokens.shape)}, "
                f"the reference {list(reference_tokens.shape)}"
            ),
        }
    same = engine_tokens == reference_tokens
    first = [int(np.argmin(row)) if not row.all() else None for row in same]
    share = float(same.mean()) if same.size else None
    passed = share is not None and share >= target
    record: dict[str, Any] = {
        "positions": int(same.size),
        "agreeing": int(same.sum()),
        "share": share,
        "target": target,
        "passed": passed,
        "first_difference": first,
    }
    if not passed:
        shown = "n/a" if share is None else f"{share:.2%}"
        record["reason"] = (
            f"greedy agreement {shown} of {same.size} positions with the framework model, below the target {target:.0%}"
        )
    return record


def greedy_check(
    engine: Any, reference: Reference, prompts: Any, n: int, target: float, eos_ids: tuple[int, ...] = ()
) -> tuple[dict, Any]:
    """(the greedy agreement record, the reference's logits): ``n`` greedy tokens per prompt from the
    engine's ``generate``, scored by teacher forcing against the framework model (module docstring)."""
    import numpy as np

    length = prompts.shape[1]
    tokens = np.asarray(engine.generate(prompts, n)).reshape(prompts.shape[0], n).astype(np.int64)
    forced = np.concatenate([prompts, tokens[:, :-1]], axis=1)
    ref_logits = np.asarray(reference(forced), dtype=np.float32)
    chosen = ref_logits[:, length - 1 :, :].copy()
    chosen[..., list(eos_ids)] = -np.inf  # the contract never selects them (a no-op without eos_ids)
    greedy = greedy_agreement(tokens, chosen.argmax(axis=-1), target)
    greedy["eos_ids_masked"] = list(eos_ids)
    return greedy, ref_logits


def check_generation(
    engine: Any,
    reference: Reference,
    prompts: Any,
    n: int,
    precision: str,
    tolerances: dict,
    target: float,
    eos_ids: tuple[int, ...] = (),
) -> tuple[dict, dict, list[str]]:
    """(greedy agreement record, prefill logits NumericReport as a dict, reasons that fail the engine)."""
    import numpy as np
    import torch

    length = prompts.shape[1]
    greedy, ref_logits = greedy_check(engine, reference, prompts, n, target, eos_ids)
    state = engine.prefill(prompts, 1)
    try:
        actual = np.asarray(engine.logits(state), dtype=np.float32)
    finally:
        engine.release(state)
    numeric = compare_outputs(
        [[torch.from_numpy(ref_logits[:, length - 1, :].copy())]],
        [[torch.from_numpy(actual)]],
        precision,
        tolerances,
        label="prefill logits check",
    )
    reasons = ([greedy["reason"]] if not greedy["passed"] else []) + list(numeric.reasons)
    share = "n/a" if greedy["share"] is None else f"{greedy['share']:.2%}"
    logger.info(
        f"generation check: greedy agreement {share} of {greedy['positions']} positions (target {target:.0%}), "
        f"prefill logits max_rel {numeric.outputs[0].max_rel:.2e}" + ("" if not reasons else " - FAILED")
        if numeric.outputs
        else f"generation check: greedy agreement {share}; prefill logits not comparable"
    )
    return greedy, numeric.to_dict(), reasons
