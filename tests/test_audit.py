"""Audits with real engines: anti-caching (honest vs memoising) and accuracy in performance mode.

The engines' inputs are real (the audit's distinct inputs, keys, dtypes); their time is a fake
clock's (docs/testing.md, "No timed tests"): a miss costs ``MISS_NS``, a hit ``HIT_NS``, whatever
the machine is doing, so whether the audit passes never depends on a race.
"""

import json

import pytest
import torch

from contract.tolerances import DEFAULT_TOLERANCES
from tools.checks.audit import accuracy_in_performance_mode, anti_caching_audit

FP32 = DEFAULT_TOLERANCES["fp32"]
MISS_S = 0.003
MISS_NS = 3_000_000
HIT_NS = 100_000  # a memoised answer: copying it back


def key_of(inputs):
    """What a bytes-keyed cache would key on (computed independently of tools.checks.audit)."""
    return b"|".join(x.contiguous().view(-1).view(torch.uint8).numpy().tobytes() for x in inputs)


class FakeClock:
    def __init__(self):
        self.ns = 0

    def __call__(self):
        return self.ns


class HonestEngine:
    """Fixed work per call, whatever the input: MISS_NS on its fake clock (``self.clock``)."""

    def __init__(self):
        self.calls = 0
        self.clock = FakeClock()

    def __call__(self, inputs):
        self.calls += 1
        self.clock.ns += MISS_NS
        return [inputs[0].sum().reshape(1)], 0.0


class MemoEngine:
    """Caches results by input bytes: a miss costs MISS_NS, a hit HIT_NS (fake clock). Records every key it sees."""

    def __init__(self):
        self.cache = {}
        self.keys = []
        self.clock = FakeClock()

    def __call__(self, inputs):
        key = key_of(inputs)
        self.keys.append(key)
        if key not in self.cache:
            self.clock.ns += MISS_NS
            self.cache[key] = [inputs[0].sum().reshape(1)]
        else:
            self.clock.ns += HIT_NS
        return self.cache[key], 0.0


def float_pool(batches=3, dtype=torch.float32, scale=1.0):
    g = torch.Generator().manual_seed(0)
    return [[(torch.randn(4, 3, 8, 8, generator=g) * scale).to(dtype)] for _ in range(batches)]


def token_pool(batches=2, rows=4, seq=8):
    g = torch.Generator().manual_seed(1)
    return [
        [torch.randint(0, 30000, (rows, seq), generator=g), torch.ones(rows, seq, dtype=torch.int64)]
        for _ in range(batches)
    ]


def assert_distinct_and_unseen(engine, pool):
    pool_keys = {key_of(b) for b in pool}
    same = key_of(pool[0])
    new = [k for k in engine.keys if k != same]
    assert len(new) >= 4
    assert len(set(new)) == len(new), "a distinct input was repeated"
    assert not pool_keys & set(new), "a distinct input equals a pool batch"
    assert len(engine.keys) == len(new) + 1 + len(new)  # warm-up + same calls (as many as distinct)


def test_honest_engine_passes():
    pool = float_pool()
    engine = HonestEngine()
    res = anti_caching_audit(engine, pool, budget_s=0.2, clock=engine.clock)
    assert res.passed is True, res.detail
    assert res.name == "anti_caching"
    f = res.figures
    assert f["calls"] >= 4
    assert engine.calls == 1 + 2 * f["calls"]
    assert f["same_input_ms"] >= MISS_S * 1e3 and f["distinct_inputs_ms"] >= MISS_S * 1e3
    assert f["speedup"] == pytest.approx(f["distinct_inputs_ms"] / f["same_input_ms"])
    assert f["speedup"] == 1.0 and f["same_input_ms"] == f["distinct_inputs_ms"] == MISS_S * 1e3
    assert f"over {f['calls']} calls each (limit 1.10x)" in res.detail
    json.dumps(res.to_dict())


def test_memoising_engine_fails_naming_the_speedup():
    pool = float_pool()
    engine = MemoEngine()
    res = anti_caching_audit(engine, pool, budget_s=0.2, clock=engine.clock)
    assert res.passed is False
    speedup = res.figures["speedup"]
    assert speedup == MISS_NS / HIT_NS
    assert res.detail == (
        f"anti-caching audit: repeating one input ran {speedup:.1f}x faster than distinct inputs (limit 1.10x): the "
        "engine may cache results"
    )
    assert_distinct_and_unseen(engine, pool)


def test_distinct_inputs_for_fp16_with_large_values():
    # 1e-3 added to fp16 values near 1000 would round away: the offset must scale with the data.
    pool = float_pool(batches=1, dtype=torch.float16, scale=1000.0)
    engine = MemoEngine()
    res = anti_caching_audit(engine, pool, budget_s=0.1, clock=engine.clock)
    assert res.passed is False
    assert_distinct_and_unseen(engine, pool)


def test_integer_inputs_are_rearranged():
    pool = token_pool()
    engine = MemoEngine()
    res = anti_caching_audit(engine, pool, budget_s=0.2, clock=engine.clock)
    assert res.passed is False
    assert_distinct_and_unseen(engine, pool)
    # Every distinct input is made of the pool's rows (same cost), in the same shape and dtype.
    rows = {tuple(r.tolist()) for b in pool for r in b[0]}
    honest = HonestEngine()
    seen = []

    def recording(inputs):
        seen.append([x.clone() for x in inputs])
        return honest(inputs)

    res = anti_caching_audit(recording, pool, budget_s=0.2, clock=honest.clock)
    assert res.passed is True, res.detail
    for inputs in seen:
        assert inputs[0].shape == (4, 8) and inputs[0].dtype == torch.int64
        assert {tuple(r.tolist()) for r in inputs[0]} <= rows


def test_single_integer_sample_cannot_be_audited():
    pool = [[torch.tensor([[5, 6, 7]])]]
    engine = HonestEngine()
    res = anti_caching_audit(engine, pool, budget_s=0.1, clock=engine.clock)
    assert res.passed is None
    assert res.detail == (
        "anti-caching audit: not run, the pool holds a single sample of integer inputs, which cannot be rearranged "
        "into a new one"
    )
    assert engine.calls == 0


def test_identical_integer_rows_give_up_without_failing():
    pool = [[torch.zeros(3, 4, dtype=torch.int64)], [torch.zeros(3, 4, dtype=torch.int64)]]
    engine = HonestEngine()
    res = anti_caching_audit(engine, pool, budget_s=0.1, clock=engine.clock)
    assert res.passed is None
    assert "only 0 inputs the engine had not seen could be made from the pool (needs 4)" in res.detail


def test_empty_pool():
    engine = HonestEngine()
    res = anti_caching_audit(engine, [], budget_s=0.1, clock=engine.clock)
    assert res.passed is None and "no input batch" in res.detail


def scripted_engine(clock, pool, same_ns, distinct_ns, foo_s=0.0, extra_ns=0):
    """Advances a fake clock: same_ns for pool[0], distinct_ns otherwise, plus foo time it declares."""
    first = key_of(pool[0])

    def step(inputs):
        clock.ns += (same_ns if key_of(inputs) == first else distinct_ns) + extra_ns
        return [inputs[0]], foo_s

    return step


@pytest.mark.parametrize(
    "distinct_ns, passed, calls", [(1_100_000, True, 22), (1_110_000, False, 22), (900_000, True, 24)]
)
def test_threshold_is_on_medians_exactly(distinct_ns, passed, calls):
    pool = float_pool(batches=2)
    clock = FakeClock()
    step = scripted_engine(clock, pool, 1_000_000, distinct_ns)
    res = anti_caching_audit(step, pool, clock=clock, budget_s=0.05, min_calls=4)
    assert res.passed is passed
    assert res.figures["same_input_ms"] == 1.0
    assert res.figures["distinct_inputs_ms"] == distinct_ns / 1e6
    # A 1 ms warm-up, then rounds of 2 + 2 calls (R ms each) while another round fits in 50 ms:
    # the loop stops after the first round r with 1 + (r + 1) * R > 50.
    assert res.figures["calls"] == calls


def test_foo_time_is_subtracted():
    pool = float_pool(batches=2)
    clock = FakeClock()
    # Every call spends 4 ms on declared foo time; the inference itself takes 1 ms vs 3 ms.
    step = scripted_engine(clock, pool, 1_000_000, 3_000_000, foo_s=0.004, extra_ns=4_000_000)
    res = anti_caching_audit(step, pool, clock=clock, budget_s=0.0, min_calls=6)
    assert res.figures["same_input_ms"] == pytest.approx(1.0)
    assert res.figures["distinct_inputs_ms"] == pytest.approx(3.0)
    assert res.figures["calls"] == 16  # a failure on 6 calls is confirmed on audit.CONFIRM_CALLS
    assert res.passed is False
    assert "ran 3.0x faster" in res.detail


def test_sync_runs_around_every_call():
    pool = float_pool(batches=2)
    events = []
    clock = FakeClock()

    def step(inputs):  # every call 1 ms: the audit passes, so no confirmation calls are added
        events.append("call")
        clock.ns += 1_000_000
        return [inputs[0]], 0.0

    anti_caching_audit(step, pool, sync=lambda: events.append("sync"), budget_s=0.0, min_calls=4, clock=clock)
    assert events.count("call") == 9
    assert events == ["sync", "call", "sync"] * 9


# --- accuracy in performance mode ----------------------------------------------------------------


def refs():
    return {0: [torch.tensor([3.0, 4.0, 0.0, 0.0])], 1: [torch.tensor([[1.0, 2.0], [2.0, 1.0]])]}


def test_identical_samples_pass():
    r = refs()
    samples = {3: (0, [r[0][0].clone()]), 10: (1, [r[1][0].clone()]), 11: (0, [r[0][0].clone()])}
    res = accuracy_in_performance_mode(samples, r, "fp32", FP32)
    assert res.passed is True
    assert res.name == "accuracy_in_performance_mode"
    assert res.figures == {"compared": 3, "failed": 0, "max_rel": 0.0, "failed_queries": [], "without_reference": 0}
    json.dumps(res.to_dict())


def test_perturbed_sample_fails_naming_query_and_diff():
    r = refs()
    bad = r[0][0].clone()
    bad[1] += 0.125  # 0.125 / RMS 2.5 = 5e-2
    samples = {3: (1, [r[1][0].clone()]), 7: (0, [bad])}
    res = accuracy_in_performance_mode(samples, r, "fp32", FP32)
    assert res.passed is False
    assert res.detail == (
        "accuracy in performance mode: 1 of 2 outputs sampled under load differ from accuracy mode, "
        "e.g. query 7 (pool batch 0): output0 differs from accuracy mode by 5.0e-02 of its RMS (limit 1.0e-03 at fp32)"
    )
    assert res.figures["failed_queries"] == [7]
    assert res.figures["max_rel"] == 0.05


def test_nothing_to_compare_is_not_run():
    res = accuracy_in_performance_mode({}, refs(), "fp32", FP32)
    assert res.passed is None
    assert res.detail == "accuracy in performance mode: not run, no outputs were sampled during the performance run"
    res = accuracy_in_performance_mode({4: (9, [torch.ones(2)])}, refs(), "fp32", FP32)
    assert res.passed is None and res.figures["without_reference"] == 1
