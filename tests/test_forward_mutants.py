"""tools.measure.loop: the timing loop, to the nanosecond (mutation testing, docs/testing.md).

The clocks (``tools.measure.loop.time.perf_counter_ns`` and ``time.time``), the device
synchronisation (``sync_for_config``) and the contention reading (``CpuContention``) are replaced
by fakes, so every figure of a ``PhaseResult`` is known exactly: core = call +
sync - foo_time, whole = wall - foo_time, windows on the cumulative core clock.
The clock starts far from zero so that a lost ``- start`` shows.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from common.errors import EngineError
from contract.phase import ContentionReading
from tests.infra.loop_rig import SYNC_NS, Loader, Rig, config
from tools.measure import loop as forward


# ---- small helpers ---------------------------------------------------------------------
def test_as_input_list():
    t = torch.zeros(2)
    assert forward.as_input_list([t, 1]) == [t, 1]
    assert forward.as_input_list((t,)) == [t]
    assert forward.as_input_list(t)[0] is t and len(forward.as_input_list(t)) == 1


def test_batch_len_prefers_y_then_the_first_input_then_one():
    assert forward._batch_len([1, 2, 3, 4], [torch.zeros(2)]) == 4
    assert forward._batch_len(None, [torch.zeros(5), torch.zeros(1)]) == 5
    assert forward._batch_len(7, [torch.zeros(3)]) == 3
    assert forward._batch_len(None, []) == 1
    assert forward._batch_len(None, [object()]) == 1


def test_tail_batch_size():
    assert forward._tail_batch_size(Loader([4], dataset_len=10, batch_size=4)) == 2
    assert forward._tail_batch_size(Loader([4], dataset_len=10, batch_size=4, drop_last=False)) == 2
    assert forward._tail_batch_size(Loader([4], dataset_len=10, batch_size=4, drop_last=True)) == 0
    assert forward._tail_batch_size(Loader([4], dataset_len=12, batch_size=4)) == 0
    assert forward._tail_batch_size(Loader([4], dataset_len=10, batch_size=None)) == 0
    assert forward._tail_batch_size(Loader([4])) == 0  # no dataset attribute
    assert forward._tail_batch_size([(torch.zeros(1), None)]) == 0  # a plain list


@pytest.mark.parametrize(
    "result, message",
    [
        ([[torch.zeros(1)], 0.0], "inference: the engine call must return (list_of_outputs, foo_time), got list"),
        ((1, 2, 3), "inference: the engine call must return (list_of_outputs, foo_time), got tuple"),
        ((torch.zeros(1), 0.0), "inference: the engine's outputs must be a list of tensors, got Tensor"),
        (([], -0.5), "inference: the engine's foo_time must be a non-negative number of seconds, got -0.5"),
        (([], "1"), "inference: the engine's foo_time must be a non-negative number of seconds, got '1'"),
    ],
)
def test_check_step_result_messages(result, message):
    with pytest.raises(EngineError) as info:
        forward._check_step_result(result, "inference")
    assert str(info.value) == message


def test_check_step_result_refuses_a_bool_foo_time():
    with pytest.raises(EngineError):
        forward._check_step_result(([], True), "inference")


def test_check_step_result_accepts_tuples_and_ints():
    t = torch.zeros(1)
    outputs, foo = forward._check_step_result(((t,), 2), "p")
    assert outputs == [t] and isinstance(outputs, list) and foo == 2.0 and isinstance(foo, float)


# ---- the measured loop -------------------------------------------------------------------------
def test_core_is_call_plus_sync_minus_foo_and_every_figure_exact(monkeypatch, caplog_loguru):
    rig = Rig(monkeypatch, share=0.0, cpus=2)
    calls: list = []
    loader = Loader([3] * 8)
    cfg = config(min_query_count=48)  # the minimum decides: 48 is also the first count whose thirds judge drift
    result = forward.timed_forward(rig.step(1_500_000_000, foo_s=1.0, calls=calls), loader, None, cfg, "inference")
    core = 1_500_000_000 + SYNC_NS - 1_000_000_000
    assert result.phase == "inference"
    assert (result.passes, result.batches, result.samples, result.warmup_batches) == (6, 48, 144, 0)
    assert result.core_latencies_ns == [core] * 48
    assert result.core_time_s == 48 * core / 1e9
    assert result.foo_time_s == 48.0
    assert result.whole_time_s == 48 * core / 1e9
    assert result.accuracy is None
    assert result.window_qps == [24 * 1e9 / (8 * core)] * 6  # six windows of 8 queries
    assert result.latency.count == 48 and result.latency.p50 == core / 1e6
    assert result.contention is rig.reading
    assert result.verdict.valid, result.verdict.reasons
    assert rig.configs == [cfg] and rig.configs[0] is cfg and rig.syncs == 48 and rig.devices == ["cpu"]
    assert result.span_unix == (1_700_000_000.25, 1_700_000_042.5)
    assert [c[0] is b[0] for c, b in zip(calls, loader.batches * 6)] == [True] * 48
    warnings = [r["message"] for r in caplog_loguru if r["level"] == "WARNING"]
    assert warnings == ["inference: engine declared 48.000 s of foo_time (excluded from whole and core)"]
    infos = [r["message"] for r in caplog_loguru if r["level"] == "INFO"]
    assert infos == ["inference: 6 passes over the data (48 queries) to reach the measurement minimums and precision"]


def test_bare_config_takes_the_measurement_defaults(monkeypatch, caplog_loguru):
    rig = Rig(monkeypatch, share=0.105, cpus=3)  # above the default contention_limit of 10 %
    calls: list = []
    result = forward.timed_forward(
        rig.step(50_000_000 - SYNC_NS, calls=calls), Loader([2] * 8), None, SimpleNamespace(), "validation"
    )
    # defaults: 2 warm-up calls; the settle phase in blocks of 5 calls (0.25 s at 50 ms), settled after two equal
    # blocks; repeat 1, 64 queries and 2 s: 8 passes of 8 x 50 ms = 3.2 s, at ±0 % (every call alike)
    assert rig.devices == ["cpu"]
    assert len(calls) == 2 + 10 + 64 and result.passes == 8 and result.batches == 64 and result.warmup_batches == 2
    assert (result.precision["settle_queries"], result.precision["settle_block"], result.precision["settle_s"]) == (
        10,
        5,
        0.5,
    )
    assert result.precision["target"] == 0.02 and result.precision["stop_reason"] == "precision reached"
    assert result.verdict.reasons == [
        "contention: other processes used 10% of the 3 CPU(s) available to the benchmark during the measured phase "
        "(limit 10%)"
    ]
    assert not [r for r in caplog_loguru if "batch " in r["message"]]  # log_freq 0: no per-batch lines
    infos = [r["message"] for r in caplog_loguru if r["level"] == "INFO"]
    assert infos == ["validation: 8 passes over the data (64 queries) to reach the measurement minimums and precision"]
    assert not [r for r in caplog_loguru if r["level"] == "WARNING"]  # no foo_time declared


def test_config_values_are_read(monkeypatch):
    rig = Rig(monkeypatch, share=0.45, cpus=4, gpu=0)
    result = forward.timed_forward(
        rig.step(1_000_000),
        Loader([2] * 4),
        None,
        config(device="cuda:3", repeat=13, contention_limit=0.5),
        "inference",
    )
    assert rig.devices == ["cuda:3"]
    # repeat decides: 13 passes, one more than the 12 (48 queries) that judging the window's drift needs
    assert result.passes == 13 and result.batches == 52
    assert result.verdict.reasons == []  # 45 % <= 50 %: no contention
    rig.reading = ContentionReading(0.55, 4, 1.0, 3)
    rig.unix = iter([1.0, 2.0])
    result = forward.timed_forward(
        rig.step(1_000_000), Loader([2] * 4), None, config(contention_limit=0.5), "inference"
    )
    assert result.verdict.reasons == [
        "contention: other processes used 55% of the 4 CPU(s) available to the benchmark during the measured phase "
        "(limit 50%)",
        "contention: 3 other process(es) held a compute context on the benchmark's GPU during the measured phase",
    ]


def test_accuracy_is_weighted_by_batch_size(monkeypatch):
    rig = Rig(monkeypatch)
    loader = Loader([3, 3, 2])
    expected = {0: 1.0, 1: 0.5, 2: 0.0}
    seen = []

    def evaluator(outputs, y):
        index = int(outputs[0][0, 0])  # the step returns the first input: its batch index
        seen.append((index, len(y)))
        return expected[index]

    result = forward.timed_forward(rig.step(1_000), loader, evaluator, config(precision=0.5), "validation")
    assert seen == [(0, 3), (1, 3), (2, 2)] * 16  # whole passes until each third holds the 16 queries drift needs
    assert result.accuracy == (3 * 1.0 + 3 * 0.5 + 2 * 0.0) / 8
    assert result.samples == 8 * 16


def test_samples_count_y_first_then_the_input(monkeypatch):
    rig = Rig(monkeypatch)
    loader = Loader([5])
    loader.batches = [(torch.zeros(1, 3), [0, 1, 2, 3]), (torch.zeros(6, 3), None)]
    result = forward.timed_forward(rig.step(1_000), loader, None, config(precision=0.5), "inference")
    assert result.samples == 23 * (4 + 6) and result.passes == 23  # 46 queries: each third of the window holds 16


def test_running_accuracy_log_lines(monkeypatch, caplog_loguru):
    rig = Rig(monkeypatch)
    forward.timed_forward(
        rig.step(1_500_000 - SYNC_NS), Loader([2] * 8), lambda o, y: 0.75, config(log_freq=8), "validation"
    )
    forward.timed_forward(rig.step(2_500_000 - SYNC_NS), Loader([2] * 17), None, config(log_freq=17), "inference")
    lines = [r["message"] for r in caplog_loguru if "batch " in r["message"]]
    # 48 queries each (the fewest whose thirds judge drift): 6 passes of 8, then 3 passes of 17 (51)
    assert lines == [f"validation: batch {n}, core 1.50 ms, running acc 0.7500" for n in range(8, 49, 8)] + [
        f"inference: batch {n}, core 2.50 ms, running acc nan" for n in (17, 34, 51)
    ]


def test_warmup_runs_on_the_first_batch_and_once_on_the_tail(monkeypatch):
    rig = Rig(monkeypatch)
    calls: list = []
    loader = Loader([4, 4, 2], dataset_len=10, batch_size=4)
    result = forward.timed_forward(
        rig.step(1_000, calls=calls), loader, None, config(warmup=2, precision=0.5), "inference"
    )
    first = loader.batches[0][0]
    assert [c[0] is first for c in calls[:2]] == [True, True]
    assert torch.equal(calls[2][0], first[:2]) and calls[2][0].shape == (2, 2)
    assert [c[0] is b[0] for c, b in zip(calls[3:], loader.batches * 16)] == [True] * 48
    assert len(calls) == 3 + 48 and result.batches == 48 and result.warmup_batches == 2
    assert rig.syncs == 1 + 48  # once after warm-up, then after every measured call


@pytest.mark.parametrize("warmup, drop_last, expected_calls", [(0, None, 48), (1, None, 50), (1, True, 49)])
def test_warmup_counts(monkeypatch, warmup, drop_last, expected_calls):
    rig = Rig(monkeypatch)
    calls: list = []
    loader = Loader([4, 4, 2], dataset_len=10, batch_size=4, drop_last=drop_last)
    forward.timed_forward(rig.step(1_000, calls=calls), loader, None, config(warmup=warmup, precision=0.5), "inference")
    assert len(calls) == expected_calls


@pytest.mark.parametrize("bad_at", [0, 1, 3])  # first warm-up call, the tail warm-up call, a measured call
def test_a_bad_engine_result_names_the_phase(monkeypatch, bad_at):
    Rig(monkeypatch)  # patches the clock the forward loop reads
    count = [0]

    def step(inputs):
        count[0] += 1
        return "oops" if count[0] - 1 == bad_at else ([inputs[0]], 0.0)

    loader = Loader([4, 4, 2], dataset_len=10, batch_size=4)
    with pytest.raises(EngineError) as info:
        forward.timed_forward(step, loader, None, config(warmup=1), "framework")
    assert str(info.value) == "framework: the engine call must return (list_of_outputs, foo_time), got str"


def test_empty_loader(monkeypatch):
    rig = Rig(monkeypatch)
    with pytest.raises(EngineError) as info:
        forward.timed_forward(rig.step(1), [], None, config(), "inference")
    assert str(info.value) == "inference: the data loader yielded no batch"


def test_min_duration_is_met_at_exactly_its_value(monkeypatch):
    rig = Rig(monkeypatch)
    result = forward.timed_forward(
        rig.step(62_500_000 - SYNC_NS), Loader([1] * 48), None, config(min_duration_s=3.0), "inference"
    )
    assert result.passes == 1 and result.batches == 48  # 48 x 62.5 ms = 3 s: one pass, no second
    assert result.verdict.reasons == []


def test_max_duration_stops_at_exactly_its_value(monkeypatch):
    rig = Rig(monkeypatch)
    result = forward.timed_forward(
        rig.step(250_000_000 - SYNC_NS),
        Loader([1, 1]),
        None,
        config(min_query_count=1000, max_duration_s=1.5),
        "inference",
    )
    assert result.passes == 3 and result.batches == 6


def test_too_short_counts_wall_time_including_foo(monkeypatch):
    rig = Rig(monkeypatch)
    # 0.25 s per call of which 0.1 s declared foo: 3 passes of 2 calls reach max_duration_s (1.5 s)
    result = forward.timed_forward(
        rig.step(250_000_000 - SYNC_NS, foo_s=0.1),
        Loader([1, 1]),
        None,
        config(min_duration_s=10.0, max_duration_s=1.5),
        "inference",
    )
    assert result.batches == 6
    assert result.whole_time_s == pytest.approx(0.9, abs=1e-12) and result.foo_time_s == pytest.approx(0.6)
    assert result.verdict.reasons == [
        "too short: 1.5 s measured, min_duration_s is 10",
        "not precise enough: core qps has no interval after 1.5 s (it needs at least 16 queries, more if correlated; "
        "precision 2%)",
        "not precise enough: whole qps has no interval after 1.5 s (it needs at least 16 queries, more if correlated; "
        "precision 2%)",
    ]


def test_passes_equal_to_repeat_log_nothing(monkeypatch, caplog_loguru):
    rig = Rig(monkeypatch)
    forward.timed_forward(rig.step(1_000), Loader([1] * 24), None, config(repeat=2), "inference")  # 48 queries
    assert [r["message"] for r in caplog_loguru] == []


def test_repeat_defaults_to_one_pass(monkeypatch):
    rig = Rig(monkeypatch)
    result = forward.timed_forward(
        rig.step(1_000), Loader([1] * 48), None, SimpleNamespace(min_query_count=1, min_duration_s=0.0), "inference"
    )
    assert result.passes == 1 and result.batches == 48
    # the default settle phase: blocks of at most 1024 calls (0.25 s at 2 µs would be 125000), two alike
    assert (result.precision["settle_queries"], result.precision["settle_block"]) == (2048, 1024)


def test_core_never_goes_below_zero(monkeypatch):
    rig = Rig(monkeypatch)
    result = forward.timed_forward(rig.step(1_000, foo_s=1e-5), Loader([1]), None, config(), "inference")
    assert result.core_latencies_ns == [0] * 16 and result.core_time_s == 0.0 and result.core_qps is None
    assert result.core_qps_ci95 is None and result.precision["figures"] == {}  # a clock that never moved is not judged


def test_log_values_round_at_the_displayed_digit(monkeypatch, caplog_loguru):
    rig = Rig(monkeypatch)
    # 16 calls (the fewest an interval needs) each declaring 62531251 ns: 1.000500016 s in all
    forward.timed_forward(
        rig.step(1_235_000 - SYNC_NS, foo_s=0.0625312515), Loader([1]), None, config(log_freq=1), "inference"
    )
    messages = [r["message"] for r in caplog_loguru]
    assert "inference: batch 1, core 0.00 ms, running acc nan" in messages  # foo exceeds the call
    assert "inference: engine declared 1.001 s of foo_time (excluded from whole and core)" in messages
    rig = Rig(monkeypatch)
    forward.timed_forward(rig.step(1_235_000 - SYNC_NS), Loader([1]), None, config(log_freq=1), "validation")
    assert "validation: batch 1, core 1.24 ms, running acc nan" in [r["message"] for r in caplog_loguru]


# ---- the settle phase without warm-up, the intervals and the stop rule's checks --------------------
def test_without_warm_up_a_settle_phase_still_runs_on_the_first_batch_and_never_the_tail(monkeypatch):
    rig = Rig(monkeypatch)
    calls: list = []
    loader = Loader([2, 2, 1], dataset_len=5, batch_size=2)  # a last, partial batch of 1 (batch 2: value 2.0)
    cfg = config(warmup=0, settle_max_s=0.5, precision=None)
    result = forward.timed_forward(rig.step(1_000, calls=calls), loader, None, cfg, "inference")
    settle_calls = calls[: len(calls) - result.batches]
    assert result.batches == 3 and len(settle_calls) == result.precision["settle_queries"] > 0
    assert all(c[0] is loader.batches[0][0] for c in settle_calls)  # the first batch, whole: no tail warm-up


def test_a_bad_result_in_the_settle_phase_names_the_phase(monkeypatch):
    rig = Rig(monkeypatch)
    with pytest.raises(EngineError, match=r"^inference: the engine call must return \(list_of_outputs, foo_time\)"):
        forward.timed_forward(lambda inputs: inputs, Loader([2]), None, config(settle_max_s=0.5), "inference")
    assert rig.syncs == 2  # the warm-up's closing sync, then the settle phase's first call


def test_an_empty_loader_is_one_engine_error_at_the_warm_up(monkeypatch):
    Rig(monkeypatch)
    with pytest.raises(EngineError, match=r"^validation: the data loader yielded no batch$"):
        forward.timed_forward(lambda inputs: ([], 0.0), Loader([]), None, config(warmup=1), "validation")


def test_both_throughputs_get_their_interval_and_the_checks_are_counted(monkeypatch):
    rig = Rig(monkeypatch)
    costs = iter([1_000, 3_000] * 200)

    def step(inputs):
        rig.now += next(costs)
        return [inputs[0]], 0.0

    result = forward.timed_forward(step, Loader([1] * 8), None, config(min_query_count=64, precision=0.5), "x")
    for qps, ci in ((result.core_qps, result.core_qps_ci95), (result.whole_qps, result.whole_qps_ci95)):
        assert ci is not None and ci[0] < qps < ci[1], (qps, ci)
    assert result.precision["checks"] == 1  # one look at the figures, at the pass that met the minimums
