"""An LLM engine with known delays and an LLM case config, for the generation and LLM stage tests."""

from __future__ import annotations

import time
import types

import numpy as np

from contract.llm_base import LLMEngineBase


class SleepyEngine(LLMEngineBase):
    """Prefill takes ``prefill_s``, every later step ``step_s``; the first step only selects."""

    def __init__(self, prefill_s: float, step_s: float, sleep=time.sleep) -> None:
        self.prefill_s, self.step_s, self.sleep = prefill_s, step_s, sleep

    def prefill(self, input_ids, max_new_tokens):
        self.sleep(self.prefill_s)
        return {"batch": input_ids.shape[0], "steps": 0}

    def step(self, state):
        if state["steps"]:
            self.sleep(self.step_s)
        state["steps"] += 1
        return np.full(state["batch"], state["steps"])

    def logits(self, state):
        return np.zeros((state["batch"], 8), dtype=np.float32)


def llm_config(**over):
    values = dict(
        batch_sizes=[1],
        input_lengths=[16],
        output_length=4,
        server_requests=12,
        server_input_length=[8, 8],
        server_output_length=[3, 3],
        ttft_bound_ms=300,
        tpot_bound_ms=50,
        server_bound_percentile="p50",
        min_query_count=1,
        min_duration_s=0.0,
        max_duration_s=100.0,
        contention_limit=1.0,
        warmup=1,
        device="cpu",
        precision=0.5,
        latency_precision=10.0,
        settle_max_s=0.0,
        seed=0,
    )
    values.update(over)
    config = types.SimpleNamespace(**values, origin={})
    config.get = lambda key, default=None: getattr(config, key, default)
    return config
