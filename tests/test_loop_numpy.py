"""The inference pass for an engine that declares ``call_numpy`` (contract/engine_base.py,
tools/measure/loop.py): batches read and converted before the clock in chunks, the calls back to
back, the outputs evaluated after; with a fake clock (tests/infra/loop_rig.py's Rig), and
ONNX Runtime's engine on a tiny real session.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from common.errors import EngineError
from contract.engine_base import EngineBase
from tests.infra.loop_rig import SYNC_NS, Loader, Rig, config
from tests.infra.onnx_models import doubling_onnx  # noqa: F401  (a fixture)
from tools.compat.adapters import OutputAdapter, as_engine
from tools.measure import loop as forward


class NumpyEngine(EngineBase):
    """Doubles its input; logs every call and evaluation in ``events``, costs ``cost_ns`` on the rig's clock."""

    def __init__(self, rig: Rig, events: list, cost_ns: int = 1_000, foo_s: float = 0.0) -> None:
        super().__init__(None, None, None)
        self.rig, self.events, self.cost_ns, self.foo_s = rig, events, cost_ns, foo_s

    def __call__(self, inputs):
        self.events.append(("tensor call", type(inputs[0]).__name__))
        self.rig.now += self.cost_ns
        return [inputs[0] * 2], self.foo_s

    def call_numpy(self, arrays):
        self.events.append(("call", float(arrays[0][0, 0]), type(arrays[0]).__name__))
        self.rig.now += self.cost_ns
        return [arrays[0] * 2], self.foo_s


def evaluator_into(events: list):
    def evaluator(outputs, y):
        assert isinstance(outputs[0], torch.Tensor)  # the case's evaluator still gets the contract's tensors
        events.append(("evaluate", float(outputs[0][0, 0])))
        return float((outputs[0] == outputs[0][0, 0]).float().mean())  # a batch holds one value, doubled

    return evaluator


def test_a_chunk_of_calls_runs_back_to_back_and_is_evaluated_after(monkeypatch):
    rig = Rig(monkeypatch)
    monkeypatch.setattr(forward, "CHUNK_BATCHES", 2)
    events: list = []
    loader = Loader([3, 3, 3, 3, 1])  # batch i holds the value i
    result = forward.timed_forward(
        NumpyEngine(rig, events, 1_000), loader, evaluator_into(events), config(precision=None), "inference"
    )
    calls = [("call", float(i), "ndarray") for i in range(5)]
    evaluations = [("evaluate", 2.0 * i) for i in range(5)]
    # before each chunk but the first, two untimed calls on its last batch (the caches the evaluations left cold)
    assert events == [
        *calls[0:2],
        *evaluations[0:2],
        calls[3],
        calls[3],
        *calls[2:4],
        *evaluations[2:4],
        calls[4],
        calls[4],
        calls[4],
        evaluations[4],
    ]
    # what is timed is unchanged: each call and its sync, one query per batch, samples from y
    assert result.core_latencies_ns == [1_000 + SYNC_NS] * 5 and (result.batches, result.samples) == (5, 13)
    assert result.accuracy == 1.0 and rig.syncs == 5 + 2  # and one after each chunk's untimed calls
    assert result.whole_time_s == (5 + 4) * (1_000 + SYNC_NS) / 1e9 - 2 * SYNC_NS / 1e9  # whole time counts them


def test_untimed_calls_come_before_a_chunk_only_after_a_call_under_a_millisecond(monkeypatch):
    monkeypatch.setattr(forward, "CHUNK_BATCHES", 1)
    for cost, extra in ((forward.REWARM_BELOW_NS - 1 - SYNC_NS, 2), (forward.REWARM_BELOW_NS - SYNC_NS, 0)):
        rig = Rig(monkeypatch)
        events: list = []
        result = forward.timed_forward(
            NumpyEngine(rig, events, cost), Loader([3, 3, 3]), None, config(precision=None), "inference"
        )
        assert len(events) == 3 + 2 * extra and result.core_latencies_ns == [cost + SYNC_NS] * 3
    assert (forward.REWARM_CALLS, forward.REWARM_BELOW_NS) == (2, 1_000_000)


def test_a_chunk_is_bounded_by_its_bytes_and_a_pass_still_covers_every_batch(monkeypatch):
    rig = Rig(monkeypatch)
    monkeypatch.setattr(forward, "REWARM_CALLS", 0)  # the chunks alone (the untimed calls: the test above)
    events: list = []
    monkeypatch.setattr(forward, "CHUNK_BYTES", 2 * 3 * 2 * 4)  # two batches of 3 x 2 float32
    loader = Loader([3, 3, 3])
    forward.timed_forward(NumpyEngine(rig, events), loader, evaluator_into(events), config(precision=None), "inference")
    assert [e[0] for e in events] == ["call", "call", "evaluate", "evaluate", "call", "evaluate"]
    monkeypatch.setattr(forward, "CHUNK_BYTES", 1)  # a batch over the bound is a chunk of its own
    events.clear()
    forward.timed_forward(NumpyEngine(rig, events), loader, evaluator_into(events), config(precision=None), "inference")
    assert [e[0] for e in events] == ["call", "evaluate"] * 3
    assert (forward.CHUNK_BATCHES, forward.CHUNK_BYTES) != (0, 0)


def test_a_loader_of_numpy_arrays_is_passed_as_it_is(monkeypatch):
    rig = Rig(monkeypatch)
    events: list = []
    loader = [(np.full((2, 3), 5.0, dtype=np.float32), np.arange(2))]
    result = forward.timed_forward(
        NumpyEngine(rig, events), loader, evaluator_into(events), config(precision=None), "i"
    )
    assert events == [("call", 5.0, "ndarray"), ("evaluate", 10.0)] and result.accuracy == 1.0


def test_the_bytes_bound_is_reached_at_its_value_not_before(monkeypatch):
    rig = Rig(monkeypatch)
    monkeypatch.setattr(forward, "REWARM_CALLS", 0)  # the chunks alone
    events: list = []
    monkeypatch.setattr(forward, "CHUNK_BYTES", 3 * 2 * 4 + 1)  # one batch of 3 x 2 float32 and a byte
    forward.timed_forward(NumpyEngine(rig, events), Loader([3, 3]), evaluator_into(events), config(precision=None), "i")
    assert [e[0] for e in events] == ["call", "call", "evaluate", "evaluate"]
    events.clear()
    monkeypatch.setattr(forward, "CHUNK_BYTES", 3 * 2 * 4 * 2)  # exactly two batches: two, then the last
    forward.timed_forward(
        NumpyEngine(rig, events), Loader([3, 3, 3]), evaluator_into(events), config(precision=None), "i"
    )
    assert [e[0] for e in events] == ["call", "call", "evaluate", "evaluate", "call", "evaluate"]


def test_samples_count_the_labels_first_then_the_input_and_the_evaluator_gets_them(monkeypatch):
    rig = Rig(monkeypatch)
    seen: list = []

    def evaluator(outputs, y):
        seen.append(None if y is None else y.tolist())
        return 1.0

    labelled = [(torch.zeros(4, 2), torch.tensor([7, 8]))]  # two labels for four rows: FlagPerf counts the labels
    result = forward.timed_forward(NumpyEngine(rig, []), labelled, evaluator, config(precision=None), "inference")
    assert result.samples == 2 and seen == [[7, 8]]
    unlabelled = [(torch.zeros(4, 2), None)]
    result = forward.timed_forward(NumpyEngine(rig, []), unlabelled, None, config(precision=None), "inference")
    assert result.samples == 4


def test_a_log_line_without_an_evaluator_and_with_a_long_call(monkeypatch, caplog_loguru):
    rig = Rig(monkeypatch)
    engine = NumpyEngine(rig, [], cost_ns=10_000_000_000 - SYNC_NS)  # a core of exactly 10 s
    forward.timed_forward(engine, Loader([2]), None, config(log_freq=1, precision=None), "x")
    infos = [r["message"] for r in caplog_loguru if r["level"] == "INFO"]
    assert infos == ["x: batch 1, core 10000.00 ms, running acc nan"]


def test_progress_is_due_at_its_interval_exactly(monkeypatch, capsys):
    rig = Rig(monkeypatch)
    engine = NumpyEngine(rig, [], cost_ns=500_000_000 - SYNC_NS)  # each query ends on the next 0.5-s mark
    forward.timed_forward(engine, Loader([2, 2]), None, config(precision=None), "inference")
    done = [json.loads(line.split(" ", 1)[1])["done"] for line in capsys.readouterr().out.splitlines()]
    assert done == [1, 2, 2]  # at each mark, then the phase's last line


def test_the_shipped_chunk_bounds():
    assert (forward.CHUNK_BATCHES, forward.CHUNK_BYTES) == (64, 64 * 2**20)


def test_foo_time_whole_and_passes_are_kept_as_for_a_tensor_engine(monkeypatch, caplog_loguru):
    rig = Rig(monkeypatch)
    events: list = []
    loader = Loader([3] * 8)
    engine = NumpyEngine(rig, events, 1_500_000_000, foo_s=1.0)
    result = forward.timed_forward(engine, loader, None, config(min_query_count=48), "inference")
    core = 1_500_000_000 + SYNC_NS - 1_000_000_000
    assert (result.passes, result.batches, result.samples) == (6, 48, 144)
    assert result.core_latencies_ns == [core] * 48 and result.foo_time_s == 48.0
    assert result.whole_time_s == 48 * core / 1e9 and result.window_qps == [24 * 1e9 / (8 * core)] * 6
    assert {e[0] for e in events} == {"call"}  # no evaluator: nothing else


def test_warm_up_and_log_lines_with_a_numpy_engine(monkeypatch, caplog_loguru):
    rig = Rig(monkeypatch)
    events: list = []
    loader = Loader([2, 2, 2, 2])
    forward.timed_forward(
        NumpyEngine(rig, events), loader, evaluator_into(events), config(warmup=2, log_freq=2, precision=None), "x"
    )
    assert events[:2] == [("tensor call", "Tensor")] * 2  # warm-up through the contract's call
    infos = [r["message"] for r in caplog_loguru if r["level"] == "INFO"]
    core_ms = (1_000 + SYNC_NS) / 1e6
    assert infos == [f"x: batch {k}, core {core_ms:.2f} ms, running acc 1.0000" for k in (2, 4)]


def test_a_bad_result_of_call_numpy_is_the_contracts_error(monkeypatch):
    rig = Rig(monkeypatch)

    class Broken(NumpyEngine):
        def call_numpy(self, arrays):
            return arrays[0]

    with pytest.raises(EngineError, match="inference: the engine call must return"):
        forward.timed_forward(Broken(rig, []), Loader([2]), None, config(precision=None), "inference")


def test_only_an_engine_that_declares_call_numpy_gets_the_numpy_pass(monkeypatch):
    rig = Rig(monkeypatch)
    engine = NumpyEngine(rig, [])
    assert forward.numpy_call(engine) == engine.call_numpy
    assert forward.numpy_call(EngineBase(None, None, None)) is None  # declared on the base, not implemented
    assert forward.numpy_call(lambda inputs: (inputs, 0.0)) is None  # a case's own step
    assert forward.numpy_call(as_engine(SimpleNamespace())) is None  # a foreign engine without it
    # an adapter reshapes __call__'s outputs: its call_numpy would hand back the engine's unadapted
    assert forward.numpy_call(OutputAdapter(engine, None, 2)) is None
    events: list = []
    forward.timed_forward(
        OutputAdapter(NumpyEngine(rig, events), None, 2), Loader([2]), None, config(precision=None), "inference"
    )
    assert events == [("tensor call", "Tensor")]


def test_onnxruntime_call_numpy_is_its_call_without_the_conversions(doubling_onnx):  # noqa: F811
    from inference_engine.cpu.onnxruntime import InferModel

    values = {"intra_op_num_threads": 1, "graph_optimization_level": "all"}
    engine = InferModel(SimpleNamespace(fp16=False, engine_path=None, get=values.get), doubling_onnx, None)
    assert engine.implements("call_numpy")
    batch = np.arange(6, dtype=np.float32).reshape(2, 3)
    (first,), foo = engine.call_numpy([batch])
    (second,), _ = engine.call_numpy([batch + 1])
    assert foo == 0.0 and isinstance(first, np.ndarray) and np.array_equal(first, batch * 2)
    assert np.array_equal(second, (batch + 1) * 2) and np.array_equal(first, batch * 2)  # not overwritten
    assert torch.equal(engine([torch.from_numpy(batch)])[0][0], torch.from_numpy(batch * 2))
    with pytest.raises(EngineError, match=r"engine expects 1 inputs \['x'\], got 2"):
        engine.call_numpy([batch, batch])
