"""tools.checks.audit on a fake clock, value by value (mutation testing, docs/testing.md).

The distinct inputs are checked exactly (source + k x delta, sources taken in
turn), the interleaving of the two arms call by call, the budget to the
nanosecond, and every AuditResult in full.
"""

from __future__ import annotations

import hashlib

import pytest
import torch

from common.errors import EngineError
from contract.tolerances import DEFAULT_TOLERANCES
from tools.checks import audit
from tools.checks.audit import DistinctInputs, accuracy_in_performance_mode, anti_caching_audit, input_key

FP32 = DEFAULT_TOLERANCES["fp32"]
START = 10**12


class Clock:
    def __init__(self):
        self.ns = START

    def __call__(self):
        return self.ns


def kinds_engine(clock, same_batch, same_ns, distinct_ns, log=None, foo=0.0):
    """Costs same_ns on inputs equal to same_batch, distinct_ns otherwise; logs 'S' / 'D'."""

    def step(inputs):
        same = all(torch.equal(a, b) for a, b in zip(inputs, same_batch))
        if log is not None:
            log.append("S" if same else "D")
        clock.ns += same_ns if same else distinct_ns
        return [inputs[0]], foo

    return step


def floats(*values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype)


# ---- keys and bytes -------------------------------------------------------------------
def test_input_key_is_blake2b_16_of_dtype_shape_and_bytes():
    a = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    b = floats(1.5, -2.0, dtype=torch.bfloat16)  # numpy has no bfloat16: the raw-bytes path
    h = hashlib.blake2b(digest_size=16)
    h.update(b"torch.int32(2, 3)|")
    h.update(a.numpy().tobytes())
    h.update(b"torch.bfloat16(2,)|")
    h.update(b.view(torch.int16).numpy().tobytes())
    assert input_key([a, b]) == h.hexdigest() and len(input_key([a])) == 32
    assert audit._tensor_bytes(torch.ones(2, 2, dtype=torch.bfloat16)) == b"\x80\x3f" * 4


# ---- DistinctInputs, floating inputs ------------------------------------------------------
def test_float_inputs_are_sources_in_turn_plus_k_deltas_and_other_tensors_untouched():
    ids = torch.tensor([7, 8])
    pool = [[floats(0.5, -0.25), ids], [floats(0.125, 0.0), ids], [floats(0.75, 0.5), ids]]
    maker = DistinctInputs(pool)
    assert maker.unavailable is None
    made = [maker.next() for _ in range(4)]
    expected = [(0, 1), (1, 1), (2, 1), (0, 2)]  # (source, k): sources in turn, k counts per source
    for batch, (s, k) in zip(made, expected):
        assert torch.equal(batch[0], pool[s][0] + k * 1e-3)
        assert batch[1] is ids and batch[1].dtype == torch.int64
    assert maker.made == 4


def test_delta_scales_with_the_largest_finite_magnitude():
    half = floats(1024.0, -3.0, float("nan"), dtype=torch.float16)
    maker = DistinctInputs([[half, floats(float("nan"), float("inf"))]])
    first = maker.next()
    assert torch.equal(first[0][:2], floats(1028.0, 1.0, dtype=torch.float16))  # 4 x eps(fp16) x 1024 = 4
    assert first[1][0].isnan() and first[1][1] == float("inf")  # nothing finite: stays put


def test_marker_is_the_first_finite_element():
    maker = DistinctInputs([[floats(float("nan"), 2.0, float("nan"))]])
    assert torch.equal(maker.next()[0][1:2], floats(2.001))


def test_a_candidate_whose_marker_a_pool_batch_has_is_skipped():
    a = floats(0.5, 0.25)
    b = a + 1e-3
    b[1] = 9.0  # same marker element as a + delta, not the same batch
    maker = DistinctInputs([[a], [b]])
    first = maker.next()
    assert torch.equal(first[0], b + 1e-3)  # a + delta was skipped: its marker is b's


def test_marker_keys_tell_dtypes_apart():
    a = floats(0.5, dtype=torch.float16)
    delta = 4 * 2**-10 * 0.5  # 4 x eps(fp16) x peak, above 1e-3
    twin = (a + delta).view(torch.bfloat16)  # the same two bytes, another dtype
    maker = DistinctInputs([[a], [twin]])
    assert torch.equal(maker.next()[0], a + delta)


def test_pool_batches_of_another_structure_do_not_break_the_maker():
    maker = DistinctInputs([[torch.tensor([1, 2]), floats(0.5, 0.5)], [floats(0.5)]])
    assert maker.unavailable is None and maker.next() is not None


# ---- DistinctInputs, integer inputs ------------------------------------------------------------
def test_one_dimensional_ids_are_rearranged_from_the_pool():
    pool = [[torch.arange(4)], [torch.arange(4) + 10]]
    maker = DistinctInputs(pool)
    made = [maker.next()[0] for _ in range(3)]
    values = set(range(4)) | set(range(10, 14))
    for ids in made:
        assert ids.shape == (4,) and set(ids.tolist()) <= values
        assert not any(torch.equal(ids, b[0]) for b in pool)
    assert len({tuple(ids.tolist()) for ids in made}) == 3


def test_integer_rows_are_rearranged_deterministically():
    pool = [[torch.arange(i * 10, i * 10 + 5).repeat(2, 1) + torch.tensor([[0], [100]])] for i in range(3)]
    first, second = DistinctInputs(pool), DistinctInputs(pool)
    for _ in range(5):
        a, b = first.next(), second.next()
        assert torch.equal(a[0], b[0]) and a[0].shape == (2, 5)
    assert first.made == 5


@pytest.mark.parametrize(
    "pool, available",
    [
        ([[torch.arange(4)], [torch.arange(4) + 10]], True),  # 1-D ids: the rows are scalars
        ([[torch.tensor([[1, 2]])], [torch.tensor([[3, 4]])]], True),  # two samples: still rearrangeable
        ([[torch.tensor(3)]], False),  # 0-d
        ([[torch.arange(4), torch.arange(3)]], False),  # no common batch axis
        ([[]], False),  # no tensors at all
    ],
)
def test_integer_availability(pool, available):
    maker = DistinctInputs(pool)
    if available:
        assert maker.unavailable is None
    else:
        assert maker.unavailable == (
            "the inputs have no common batch axis to rearrange and no floating tensor to offset"
        )
        assert maker.next() is None


def test_unavailable_is_said_in_the_audit():
    result = anti_caching_audit(lambda inputs: ([], 0.0), [[torch.tensor(3)]], clock=Clock())
    assert result.to_dict() == {
        "name": "anti_caching",
        "passed": None,
        "figures": {},
        "detail": (
            "anti-caching audit: not run, the inputs have no common batch axis to rearrange and no floating "
            "tensor to offset"
        ),
    }
    assert anti_caching_audit(lambda inputs: ([], 0.0), [], clock=Clock()).to_dict() == {
        "name": "anti_caching",
        "passed": None,
        "figures": {},
        "detail": "anti-caching audit: not run, there is no input batch to repeat",
    }


# ---- timing ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "result, message",
    [
        ([[], 0.0], "anti-caching audit: the engine call must return (outputs, foo_time), got list"),
        (([], 0.0, 1), "anti-caching audit: the engine call must return (outputs, foo_time), got tuple"),
        (([], True), "anti-caching audit: the engine's foo_time must be a non-negative number of seconds, got True"),
        (([], "1"), "anti-caching audit: the engine's foo_time must be a non-negative number of seconds, got '1'"),
        (([], -1.0), "anti-caching audit: the engine's foo_time must be a non-negative number of seconds, got -1.0"),
    ],
)
def test_timed_call_checks_the_result(result, message):
    with pytest.raises(EngineError) as info:
        audit._timed_ms(lambda inputs: result, [], lambda: None, Clock())
    assert str(info.value) == message


def test_timed_call_subtracts_foo_to_the_nanosecond_and_clamps():
    clock = Clock()

    def step(inputs):
        clock.ns += 1_500_000_000
        return [], 1.0

    assert audit._timed_ms(step, [], lambda: None, clock) == 500.0

    def quick(inputs):
        clock.ns += 1_000
        return [], 0.5

    assert audit._timed_ms(quick, [], lambda: None, clock) == 0.0


# ---- the audit loop -------------------------------------------------------------------------
def test_arms_alternate_and_repeats_are_fresh_copies():
    pool = [[floats(0.5, 0.25)], [floats(1.0, 2.0)]]
    clock = Clock()
    log: list[str] = []
    seen = []
    step = kinds_engine(clock, pool[0], 1_000_000, 1_000_000, log)

    def recording(inputs):
        seen.append(inputs[0])
        return step(inputs)

    anti_caching_audit(recording, pool, clock=clock, budget_s=0.0, min_calls=6)
    assert "".join(log) == "S" + "SDDS" + "DSSD" + "SDDS"
    repeats = [x for x, kind in zip(seen, log) if kind == "S"]
    assert len({id(x) for x in repeats}) == len(repeats) and all(x is not pool[0][0] for x in repeats[1:])


def test_default_budget_is_two_seconds_to_the_nanosecond():
    # warm-up 1 ns; a round = 4 x 250_000_000 ns = 1 s. After round 1, spent (1 ns + 1 s) plus
    # the next round's estimate (1 s) is 2_000_000_001 ns: over 2 s by one nanosecond, so one round only
    # (every call costs the same, so the audit passes and nothing is confirmed)
    pool = [[floats(0.5, 0.25)], [floats(1.0, 2.0)]]

    def engine(clock):
        def step(inputs):
            clock.ns += 250_000_000 if clock.ns > START else 1
            return [inputs[0]], 0.0

        return step

    clock = Clock()
    result = anti_caching_audit(engine(clock), pool, clock=clock, min_calls=2)
    assert result.passed is True and result.figures["calls"] == 2
    clock = Clock()
    result = anti_caching_audit(engine(clock), pool, clock=clock, min_calls=2, budget_s=2.000000001)
    assert result.passed is True and result.figures["calls"] == 4


def test_budget_boundary_and_clock_offset():
    pool = [[floats(0.5, 0.25)], [floats(1.0, 2.0)]]
    clock = Clock()
    # warm-up 10 ms, rounds of 40 ms: after round 1, 50 + 40 = 90 ms is not over a 90 ms budget
    result = anti_caching_audit(
        kinds_engine(clock, pool[0], 10_000_000, 10_000_000), pool, clock=clock, budget_s=0.09, min_calls=2
    )
    assert result.figures["calls"] == 4


def test_max_calls_is_the_cap():
    pool = [[floats(0.5, 0.25)], [floats(1.0, 2.0)]]
    clock = Clock()
    result = anti_caching_audit(kinds_engine(clock, pool[0], 0, 0), pool, clock=clock, budget_s=1000.0)
    assert result.to_dict() == {
        "name": "anti_caching",
        "passed": None,
        "detail": "anti-caching audit: not run, the engine calls took no measurable time",
        "figures": {
            "same_input_ms": 0.0,
            "distinct_inputs_ms": 0.0,
            "speedup": None,
            "limit": 1.1,
            "calls": 200,
            "first_call_ms": 0.0,
        },
    }


def test_repeats_free_but_distinct_costly_fails():
    pool = [[floats(0.5, 0.25)], [floats(1.0, 2.0)]]
    clock = Clock()
    result = anti_caching_audit(kinds_engine(clock, pool[0], 0, 500_000), pool, clock=clock, budget_s=0.0, min_calls=4)
    assert result.to_dict() == {
        "name": "anti_caching",
        "passed": False,
        "detail": (
            "anti-caching audit: repeating one input took no measurable time while distinct inputs took 0.500 "
            "ms: the engine may cache results"
        ),
        "figures": {
            "same_input_ms": 0.0,
            "distinct_inputs_ms": 0.5,
            "speedup": None,
            "limit": 1.1,
            "calls": 16,
            "first_call_ms": 0.0,
        },
    }


def test_passing_and_failing_results_in_full():
    pool = [[floats(0.5, 0.25)], [floats(1.0, 2.0)]]
    clock = Clock()
    result = anti_caching_audit(
        kinds_engine(clock, pool[0], 2_000_000, 2_100_000), pool, clock=clock, budget_s=0.0, min_calls=4, threshold=0.25
    )
    assert result.to_dict() == {
        "name": "anti_caching",
        "passed": True,
        "detail": (
            "anti-caching audit: repeating one input ran at 1.05x the speed of distinct inputs over 4 calls each "
            "(limit 1.25x)"
        ),
        "figures": {
            "same_input_ms": 2.0,
            "distinct_inputs_ms": 2.1,
            "speedup": 2.1 / 2.0,
            "limit": 1.25,
            "calls": 4,
            "first_call_ms": 2.0,
        },
    }
    clock = Clock()
    result = anti_caching_audit(
        kinds_engine(clock, pool[0], 1_000_000, 3_000_000), pool, clock=clock, budget_s=0.0, min_calls=4
    )
    assert result.to_dict() == {
        "name": "anti_caching",
        "passed": False,
        "detail": (
            "anti-caching audit: repeating one input ran 3.0x faster than distinct inputs (limit 1.10x): the "
            "engine may cache results"
        ),
        "figures": {
            "same_input_ms": 1.0,
            "distinct_inputs_ms": 3.0,
            "speedup": 3.0,
            "limit": 1.1,
            "calls": 16,
            "first_call_ms": 1.0,
        },
    }


def test_a_failure_on_few_calls_is_confirmed_on_sixteen_before_it_stands():
    """A slow engine whose first calls favoured the repeated input by chance: 4 calls say 1.5x,
    16 say 1.0x, and the audit passes. A real cache stays a failure (above), with 16 calls."""
    pool = [[floats(0.5, 0.25)], [floats(1.0, 2.0)]]
    clock = Clock()
    log: list[str] = []
    fair = kinds_engine(clock, pool[0], 2_000_000, 2_000_000, log)
    lucky = kinds_engine(clock, pool[0], 1_000_000, 2_000_000, log)

    def step(inputs):  # the warm-up and the first 8 timed calls see the lucky engine, the rest a fair one
        return (lucky if len(log) < 9 else fair)(inputs)

    result = anti_caching_audit(step, pool, clock=clock, budget_s=0.0, min_calls=4)
    assert audit.CONFIRM_CALLS == 16
    assert result.passed is True and result.figures["calls"] == 16 and len(log) == 1 + 32, result
    assert (
        result.detail
        == "anti-caching audit: repeating one input ran at 1.00x the speed of distinct inputs over 16 calls each "
        "(limit 1.10x)"
    )


def test_no_confirmation_at_sixteen_calls_or_without_a_failure():
    pool = [[floats(0.5, 0.25)], [floats(1.0, 2.0)]]
    for same_ns, calls, expected in ((1_000_000, 16, False), (2_000_000, 4, True)):
        clock = Clock()
        engine = kinds_engine(clock, pool[0], same_ns, 2_000_000)
        result = anti_caching_audit(engine, pool, clock=clock, budget_s=0.0, min_calls=calls)
        assert (result.passed, result.figures["calls"]) == (expected, calls)
    clock = Clock()
    result = anti_caching_audit(
        kinds_engine(clock, pool[0], 1_000_000, 2_000_000), pool, clock=clock, budget_s=0.0, min_calls=18
    )
    assert (result.passed, result.figures["calls"]) == (False, 18)  # more than 16 already: judged as measured


def test_confirmation_stops_when_no_new_input_can_be_made():
    pool = [[torch.tensor([[1, 2], [3, 4]])], [torch.tensor([[5, 6], [7, 8]])]]  # a handful of row rearrangements
    clock = Clock()
    result = anti_caching_audit(
        kinds_engine(clock, pool[0], 1_000, 3_000), pool, clock=clock, budget_s=0.0, min_calls=2
    )
    made = audit.DistinctInputs(pool).made
    assert result.passed is False and 2 <= result.figures["calls"] < 16, (result, made)


def test_too_few_distinct_inputs_in_full():
    pool = [[torch.tensor([[1, 2]])], [torch.tensor([[3, 4]])]]  # every rearrangement is a pool batch
    clock = Clock()
    result = anti_caching_audit(kinds_engine(clock, pool[0], 1_000, 1_000), pool, clock=clock, min_calls=3)
    assert result.to_dict() == {
        "name": "anti_caching",
        "passed": None,
        "detail": (
            "anti-caching audit: not run, only 0 inputs the engine had not seen could be made from the pool (needs 3)"
        ),
        "figures": {"distinct_inputs_made": 0},
    }


def test_bare_tensor_pool_batches_are_one_input_each():
    pool = [floats(0.5, 0.25), floats(1.0, 2.0)]
    clock = Clock()
    shapes = []

    def step(inputs):
        shapes.append([tuple(x.shape) for x in inputs])
        clock.ns += 1_000_000
        return [inputs[0]], 0.0

    result = anti_caching_audit(step, pool, clock=clock, budget_s=0.0, min_calls=4)
    assert result.passed is True and set(map(tuple, shapes)) == {((2,),)}


# ---- accuracy in performance mode --------------------------------------------------------------
def refs():
    return {0: [floats(3.0, 4.0)], 1: floats(1.0, 1.0)}


def test_accuracy_in_performance_mode_counts_every_sample():
    samples = {2: (5, [floats(1.0)]), 3: (7, [floats(1.0)]), 4: (0, floats(3.0, 4.0)), 9: (1, [floats(1.0, 1.0)])}
    result = accuracy_in_performance_mode(samples, refs(), "fp16", FP32)
    assert result.to_dict() == {
        "name": "accuracy_in_performance_mode",
        "passed": True,
        "detail": (
            "accuracy in performance mode: all 2 outputs sampled under load match accuracy mode (largest "
            "difference 0.0e+00 of the RMS, fp16)"
        ),
        "figures": {"compared": 2, "failed": 0, "max_rel": 0.0, "failed_queries": [], "without_reference": 2},
    }


def test_accuracy_in_performance_mode_lists_at_most_20_failed_queries():
    samples = {q: (0, [floats(3.0, 5.0)]) for q in range(25)}
    result = accuracy_in_performance_mode(samples, refs(), "fp32", FP32)
    assert result.passed is False and result.name == "accuracy_in_performance_mode"
    assert result.figures["failed"] == 25 and result.figures["failed_queries"] == list(range(20))
    assert result.detail.startswith(
        "accuracy in performance mode: 25 of 25 outputs sampled under load differ from accuracy mode, e.g. query 0 "
        "(pool batch 0): output0 differs"
    )


def test_accuracy_in_performance_mode_without_references():
    result = accuracy_in_performance_mode({1: (4, [floats(1.0)])}, refs(), "fp32", FP32)
    assert result.to_dict() == {
        "name": "accuracy_in_performance_mode",
        "passed": None,
        "detail": "accuracy in performance mode: not run, no sampled query has an accuracy-mode reference",
        "figures": {"compared": 0, "failed": 0, "max_rel": 0.0, "failed_queries": [], "without_reference": 1},
    }
