"""The per-query path the harness times: what it does per call, counted, never timed.

bench/harness_overhead.py measures what this path costs against a bare loop (docs/measurement.md,
"Harness overhead"); these tests pin the work per query that the profile found avoidable, on
fakes and a tiny real ONNX Runtime session: no import inside the ONNX Runtime engine's call, one
``session.run`` per call, one lookup of the engine's ``step`` per generation, and two clock reads
per query in the measured loop and ``output_length + 2`` in a generation.
"""

from __future__ import annotations

import builtins
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tests.infra.loop_rig import Loader, Rig, config
from tests.infra.onnx_models import doubling_onnx  # noqa: F401 - a fixture
from tools.measure import loop as forward
from tools.measure.llm import generate_timed


def test_the_onnxruntime_call_imports_nothing_and_runs_the_session_once(doubling_onnx, monkeypatch):
    from inference_engine.cpu.onnxruntime import InferModel

    values = {"intra_op_num_threads": 1, "graph_optimization_level": "all"}
    engine_config = SimpleNamespace(fp16=False, engine_path=None, get=values.get)
    engine = InferModel(engine_config, doubling_onnx, None)
    runs = []
    run = engine.session.run

    def counted_run(names, feeds):
        runs.append((names, {name: type(value) for name, value in feeds.items()}))
        return run(names, feeds)

    monkeypatch.setattr(engine.session, "run", counted_run)
    imports = []
    real_import = builtins.__import__

    def counted_import(name, *args, **kwargs):
        imports.append(name)
        return real_import(name, *args, **kwargs)

    batches = [torch.full((2, 3), float(k)) for k in range(5)]
    engine([batches[0]])  # the first call's lazy imports (numpy's, inside torch) are the warm-up's
    runs.clear()
    builtins.__import__ = counted_import
    try:
        results = [engine([batch]) for batch in batches]
    finally:
        builtins.__import__ = real_import
    assert imports == []  # an import statement per call costs a lookup in sys.modules every query
    assert runs == [(["y"], {"x": np.ndarray})] * 5
    for batch, (outputs, foo_time) in zip(batches, results):
        assert foo_time == 0.0 and len(outputs) == 1 and isinstance(outputs[0], torch.Tensor)
        assert torch.equal(outputs[0], batch * 2)


class _CountingEngine:
    """An LLM engine (contract/llm_base.py's contract) that counts its attribute lookups."""

    def __init__(self, clock) -> None:
        self.lookups: dict[str, int] = {}
        self.clock = clock

    def __getattribute__(self, name: str):
        if not name.startswith("__") and name not in ("lookups", "clock"):
            lookups = object.__getattribute__(self, "lookups")
            lookups[name] = lookups.get(name, 0) + 1
        return object.__getattribute__(self, name)

    def prefill(self, prompts, output_length):
        return [0]

    def step(self, state):
        state[0] += 1
        return np.array([state[0]])

    def release(self, state):
        state.clear()


@pytest.mark.parametrize("keep", [False, True])
def test_a_generation_reads_the_clock_once_a_token_and_looks_up_step_once(keep):
    reads = []

    def clock() -> int:
        reads.append(len(reads))
        return 1000 * len(reads)

    engine = _CountingEngine(clock)
    generation = generate_timed(engine, np.zeros((1, 4), dtype=np.int64), 32, clock, keep_tokens=keep)
    assert len(reads) == 32 + 2  # issue, prefill end, one a token: nothing else in the timed path
    assert engine.lookups == {"prefill": 1, "step": 1, "release": 1}
    assert generation.token_ns == [1000 * k for k in range(3, 35)] and generation.prefill_end_ns == 2000
    if keep:
        assert generation.tokens.tolist() == [list(range(1, 33))]


def test_the_measured_loop_reads_the_clock_twice_a_query(monkeypatch):
    """Each query costs two clock reads (its start and end); the rest is per pass or per window."""
    reads = {}
    for batches in (3, 7):
        rig = Rig(monkeypatch)
        count = [0]

        def clock(rig=rig, count=count) -> int:
            count[0] += 1
            return rig.now

        monkeypatch.setattr(forward.time, "perf_counter_ns", clock)
        result = forward.timed_forward(
            rig.step(1000), Loader([2] * batches), None, config(repeat=4, precision=None), "inference"
        )
        assert result.batches == 4 * batches
        reads[batches] = count[0]
    assert reads[7] - reads[3] == 2 * 4 * (7 - 3)
