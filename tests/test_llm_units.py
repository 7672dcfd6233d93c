"""LLM metrics and scenarios without a model: TTFT/TPOT against engines with known
delays, the server's Poisson schedule and queueing, the FLOPs/KV formulas, bad keys."""

from __future__ import annotations

import math

import numpy as np
import pytest

from common.errors import ConfigError
from contract.llm_base import LLMEngineBase
from contract.llm_workload import LLMWorkload, PromptSource
from tests.infra.clocks import FakeClock
from tests.infra.llm_rig import SleepyEngine, llm_config
from tools.measure.llm import GenerationFigures, ModelShape, generate_timed
from tools.measure.llm_stage import Limits, Schedule, run_server, server_schedule


def test_ttft_and_tpot_of_an_engine_with_known_sleeps():
    """The real clock's path (time.perf_counter_ns). A sleep never returns early, so each figure is at
    least its sleep; how much a busy machine adds is not asserted (no test depends on the wall clock's
    speed): the exact figures are test_figures_on_a_fake_clock_are_exact's."""
    engine = SleepyEngine(prefill_s=0.050, step_s=0.005)
    gens = [generate_timed(engine, np.zeros((2, 16), dtype=np.int64), 8, keep_tokens=True) for _ in range(3)]
    for g in gens:
        assert g.ttft_ns() >= 50e6 and g.tpot_ns() >= 5e6
        assert len(g.itl_ns()) == 7 and min(g.itl_ns()) >= 5e6
        assert g.tokens.shape == (2, 8) and list(g.tokens[0]) == list(range(1, 9))
    record = GenerationFigures(gens, gens[0].issued_ns).to_dict()
    assert record["requests"] == 6 and record["queries"] == 3
    assert record["ttft_ms"]["p50"] >= 50 and record["ttft_ms"]["count"] == 6
    assert record["tpot_ms"]["p50"] >= 5 and record["itl_ms"]["count"] == 6 * 7
    assert record["ttft_ms"]["p90"] is None  # 6 requests: below LoadGen's floor, never extrapolated


def test_figures_on_a_fake_clock_are_exact():
    clock = FakeClock()
    engine = SleepyEngine(prefill_s=0.100, step_s=0.010, sleep=clock.sleep)
    start = clock()
    gens = [generate_timed(engine, np.zeros((4, 32), dtype=np.int64), 11, clock=clock) for _ in range(2)]
    record = GenerationFigures(gens, start, shape=ModelShape(1, 8, 2, 1, 4, 16, 32, 1000, 256)).to_dict()
    assert record["ttft_ms"]["mean"] == pytest.approx(100.0) and record["tpot_ms"]["mean"] == pytest.approx(10.0)
    assert record["e2e_ms"]["mean"] == pytest.approx(200.0)
    assert record["duration_s"] == pytest.approx(0.4)
    assert record["output_tokens_per_s"] == pytest.approx(2 * 4 * 11 / 0.4)
    assert record["requests_per_s"] == pytest.approx(8 / 0.4)
    assert record["prefill_tokens_per_s"] == pytest.approx(4 * 32 / 0.1)
    assert record["decode_tokens_per_s"] == pytest.approx(4 * 10 / 0.1)


def test_flops_and_kv_bytes_follow_the_model_shape():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = dict(
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=100,
    )
    model = LlamaForCausalLM(LlamaConfig(**cfg))
    shape = ModelShape.from_hf_config(cfg)
    assert shape.params == sum(p.numel() for p in model.parameters())
    assert shape.embedding_params == 100 * 64
    # 2 x (params less the embedding lookup) + 4 x layers x heads x head_dim x context
    assert shape.flops_per_token(10) == 2 * (shape.params - 6400) + 4 * 2 * 4 * 16 * 10
    # a prefill: the LM head (vocab x hidden) once per sequence, not per token
    assert shape.prefill_flops(3, 9) == 3 * (9 * (shape.flops_per_token(5) - 2 * 6400) + 2 * 6400)
    tied = ModelShape.from_hf_config({**cfg, "tie_word_embeddings": True})
    assert tied.params == shape.params - 6400 and tied.flops_per_token(0) == shape.flops_per_token(0)
    assert shape.kv_cache_bytes(positions=7, bytes_per_value=2) == 2 * 2 * 2 * 16 * 2 * 7


def test_poisson_schedule_rate_spread_lengths_and_seed():
    requests = [r for _, r in zip(range(4000), server_schedule(4.0, 7, [32, 256], [8, 64]))]
    gaps = np.diff([r.arrival_s for r in requests])
    assert requests[0].arrival_s == 0.0
    assert gaps.mean() == pytest.approx(0.25, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.06)  # exponential: CV 1
    assert np.mean(gaps < 0.25 * math.log(2)) == pytest.approx(0.5, abs=0.03)  # its median is mean x ln 2
    inputs = [r.input_length for r in requests]
    assert min(inputs) == 32 and max(inputs) == 256 and 130 < np.mean(inputs) < 158
    again = [r for _, r in zip(range(50), server_schedule(4.0, 7, [32, 256], [8, 64]))]
    assert again == requests[:50]
    assert [r for _, r in zip(range(50), server_schedule(4.0, 8, [32, 256], [8, 64]))] != again


def test_server_counts_ttft_from_the_scheduled_arrival():
    """An engine slower than the arrivals: requests queue, and TTFT grows with the queue."""
    clock = FakeClock()
    engine = SleepyEngine(prefill_s=0.2, step_s=0.05, sleep=clock.sleep)  # 0.3 s per request of 3 tokens
    config = llm_config()
    shape, prompts = ModelShape(1, 8, 2, 1, 4, 16, 32, 1000, 256), PromptSource(3, 50, 0)
    workload, limits = LLMWorkload.from_config(config), Limits.from_config(config)
    record = run_server(engine, shape, prompts, workload, 10.0, limits, [], Schedule(clock=clock, sleep=clock.sleep))
    ttft = record.ttft_ms
    assert record.requests >= 12 and record.target_qps == 10.0
    assert ttft["count"] == record.requests and ttft["mean"] > 1000  # 10 req/s against 3.3 served per second
    assert record.tpot_ms["mean"] == pytest.approx(50.0)
    assert record.ttft_bound_met is False and not record.verdict.valid
    assert any("p50 TTFT" in r and "exceeds ttft_bound_ms 300" in r for r in record.verdict.reasons)
    relaxed = run_server(
        SleepyEngine(0.02, 0.005, sleep=clock.sleep),
        shape,
        prompts,
        workload,
        2.0,
        limits,
        [],
        Schedule(clock=clock, sleep=clock.sleep),
    )
    assert relaxed.ttft_ms["mean"] == pytest.approx(20.0) and relaxed.ttft_bound_met is True
    assert relaxed.issued_qps == pytest.approx(2.0, rel=0.6)  # 12 Poisson gaps


class JitteryEngine(SleepyEngine):
    """Prefill times drawn from a seeded uniform distribution: TTFT varies from request to request."""

    def __init__(self, sleep) -> None:
        super().__init__(0.0, 0.005, sleep)
        self.rng = np.random.default_rng(5)

    def prefill(self, input_ids, max_new_tokens):
        self.prefill_s = float(self.rng.uniform(0.01, 0.3))
        return super().prefill(input_ids, max_new_tokens)


def test_server_stops_early_when_its_precision_is_out_of_reach():
    """p50 TTFT of 12 jittery requests is far from ±1 %: the stop rule gives up at its first look
    (it would need far more than 4 x max_duration_s), and the verdict says how long it would take;
    with a loose precision the same row stops because it is precise."""
    clock = FakeClock()
    shape, prompts = ModelShape(1, 8, 2, 1, 4, 16, 32, 1000, 256), PromptSource(3, 50, 0)
    config = llm_config(latency_precision=0.01)
    workload, limits = LLMWorkload.from_config(config), Limits.from_config(config)
    record = run_server(
        JitteryEngine(clock.sleep), shape, prompts, workload, 1.0, limits, [], Schedule(clock=clock, sleep=clock.sleep)
    )
    # 20 requests, not 12: until then a throughput's blocks were worth too few independent ones for any interval
    assert record.stop_reason == "precision out of reach" and record.requests == 20 and record.duration_s < 100
    assert any(r.startswith("not precise enough: p50 ±") and "out of reach: about" in r for r in record.verdict.reasons)
    loose = Limits.from_config(llm_config(latency_precision=10.0))
    again = run_server(
        JitteryEngine(clock.sleep), shape, prompts, workload, 1.0, loose, [], Schedule(clock=clock, sleep=clock.sleep)
    )
    assert again.stop_reason == "precision reached" and again.requests == 20
    assert not any("not precise enough" in r for r in again.verdict.reasons)


def test_no_precision_asked_stops_a_server_row_at_its_minimums():
    """``precision: null`` (no precision asked, as for a phase: ``LoopSettings``) is read the same way by
    the LLM stage: the row stops at its requests and is not judged on precision."""
    clock = FakeClock()
    shape, prompts = ModelShape(1, 8, 2, 1, 4, 16, 32, 1000, 256), PromptSource(3, 50, 0)
    config = llm_config(precision=None, latency_precision=None)
    workload, limits = LLMWorkload.from_config(config), Limits.from_config(config)
    assert limits.precision is None and limits.latency_precision is None
    record = run_server(
        JitteryEngine(clock.sleep), shape, prompts, workload, 1.0, limits, [], Schedule(clock=clock, sleep=clock.sleep)
    )
    assert record.stop_reason == "minimums met" and record.requests == 12
    assert not any("precise" in r for r in record.verdict.reasons)


@pytest.mark.parametrize(
    "override, message",
    [
        (dict(output_length=1), "key 'output_length' must be at least 2"),
        (dict(input_lengths=[0]), "key 'input_lengths' must be a list of 1 to 16 integers"),
        (dict(server_target_qps=[-1]), "key 'server_target_qps' must be a list of at most 16 positive request rates"),
        (dict(server_input_length=[9, 3]), "key 'server_input_length' must be [min, max] with min <= max"),
        (dict(server_bound_percentile="p95"), "key 'server_bound_percentile' must be one of p50, p90, p99"),
        (dict(ttft_bound_ms="fast"), "key 'ttft_bound_ms' must be a positive number of milliseconds"),
        (
            dict(server_target_qps=[1, 4], server_requests=200, max_duration_s=60),
            "key 'server_requests' is 200: at 1 requests/s they arrive over 200 s",
        ),
    ],
)
def test_bad_llm_keys_are_one_line(override, message):
    with pytest.raises(ConfigError) as info:
        LLMWorkload.from_config(llm_config(**override))
    assert message in str(info.value) and "\n" not in str(info.value)


class ScriptedEngine(LLMEngineBase):
    """Generates the given tokens (what a runtime that never selects EOS gives); logits: the reference's
    at the prompt's end."""

    def __init__(self, tokens, last_logits) -> None:
        self.tokens, self.last_logits, self.precision = (
            np.asarray(tokens),
            np.asarray(last_logits, dtype=np.float32),
            "fp32",
        )

    def prefill(self, input_ids, max_new_tokens):
        return {"i": 0}

    def step(self, state):
        state["i"] += 1
        return self.tokens[:, state["i"] - 1]

    def logits(self, state):
        return self.last_logits


def test_greedy_check_masks_eos_as_the_engine_contract_does():
    """The reference's top token at one position is EOS (id 1), which the contract never selects: the
    engine took the runner-up. With the EOS ids masked that position agrees; unmasked it would not."""
    from contract.tolerances import tolerances_for
    from tools.checks.generation import check_generation

    vocab, prompts, generated = 8, np.array([[5, 6, 7]]), np.array([[2, 3, 4, 2]])
    logits = np.zeros((1, 3 + 3, vocab), dtype=np.float32)
    for position, token in enumerate(generated[0]):
        logits[0, 2 + position, token] = 1.0
    logits[0, 2 + 2, 1] = 1.5  # EOS above the engine's token 4 at the third generated position

    def reference(ids):
        assert ids.tolist() == [[5, 6, 7, 2, 3, 4]]  # teacher forcing: the prompt and the engine's tokens but the last
        return logits

    engine = ScriptedEngine(generated, logits[:, 2, :])
    args = (prompts, 4, "fp32", tolerances_for("fp32"), 0.99)
    greedy, numeric, reasons = check_generation(engine, reference, *args, eos_ids=(1,))
    assert greedy["share"] == 1.0 and greedy["eos_ids_masked"] == [1] and numeric["passed"] and reasons == []
    greedy, _, reasons = check_generation(engine, reference, *args)
    assert (
        greedy["share"] == 0.75
        and greedy["first_difference"] == [2]
        and reasons
        and "greedy agreement 75.00% of 4" in reasons[0]
    )


def test_eos_token_ids_of_a_config():
    from contract.llm_base import eos_token_ids

    assert eos_token_ids({"eos_token_id": 2}) == (2,)
    assert eos_token_ids({"eos_token_id": [128001, 128009]}) == (128001, 128009)
    assert eos_token_ids({"eos_token_id": None}) == () and eos_token_ids({}) == ()
