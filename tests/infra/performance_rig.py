"""A scenario run of known latencies, and the config and quiet contention reading that judge it; a
``PerformanceStage`` on a fake engine and clock (``Rig``, ``make_stage``)."""

from __future__ import annotations

import itertools
from dataclasses import replace
from types import SimpleNamespace

import torch

from contract.phase import ContentionReading
from tests.infra.clocks import MS, FakeClock
from tools.measure import scenarios
from tools.measure import stage as performance
from tools.measure.scenarios import ScenarioRun, ScenarioSpec, run_scenario
from tools.measure.stage import PerformanceStage


# ---- judging rows -------------------------------------------------------------------------------
def scenario_run(scenario, queries, latency_ns=MS, bs=2, duration_s=None, target=None):
    completions = [latency_ns * (k + 1) for k in range(queries)]
    duration = queries * latency_ns / 1e9 if duration_s is None else duration_s
    return ScenarioRun(
        scenario,
        bs,
        1,
        queries,
        queries * bs,
        duration,
        [latency_ns] * queries,
        completions,
        0.0,
        "minimums met",
        target_qps=target,
        issued_qps=(target and target * 0.9),
    )


CONFIG = SimpleNamespace(min_query_count=24, min_duration_s=0.0, contention_limit=0.1, latency_bound_ms=5.0)


QUIET = ContentionReading(0.0, 2, 1.0, None)


# ---- the query pool --------------------------------------------------------------------------
class Loader:
    def __init__(self, batches):
        self.batches = batches
        self.yielded = 0

    def __iter__(self):
        for batch in self.batches:
            self.yielded += 1
            yield batch


class Rig:
    def __init__(self, monkeypatch, cost_ns=MS, share=0.0):
        self.clock = FakeClock()
        self.cost_ns = cost_ns
        self.calls: list = []
        self.syncs = 0
        self.devices: list = []
        self.readings = 0
        self.runs: list = []
        self.share = share
        self.unix = itertools.count(1000)
        real = run_scenario

        def traced(step, pool, spec: ScenarioSpec):
            assert spec.clock is ScenarioSpec.clock and spec.sleep is ScenarioSpec.sleep  # the stage's: the defaults
            self.runs.append(vars(spec).copy())
            return real(step, pool, replace(spec, clock=self.clock, sleep=self.clock.sleep))

        rig = self

        class FakeContention:
            def __init__(self, device):
                rig.devices.append(device)

            def start(self):
                return self

            def stop(self):
                rig.readings += 1
                return ContentionReading(rig.share, rig.readings, 1.0, None)

        monkeypatch.setattr(performance, "run_scenario", traced)
        # several clients on one fake clock: workers one after another (as in tests/test_scenarios_mutants.py)
        monkeypatch.setattr(scenarios, "_run_threads", lambda worker, clients: [worker() for _ in range(clients)])
        monkeypatch.setattr(performance, "CpuContention", FakeContention)
        monkeypatch.setattr(performance.time, "time", lambda: float(next(self.unix)))

    def engine(self, inputs):
        self.calls.append(inputs)
        self.clock.t += self.cost_ns
        return [inputs[0] * 2.0], 0.0

    def sync(self):
        self.syncs += 1


def stage_config(**changes):
    values = dict(
        pool_max_mb=1.0,
        batch_sizes=[2, 4],
        batch_size=2,
        numeric_batches=2,
        numeric_tolerance=None,
        warmup=1,
        audits=True,
        scenario=["offline"],
        clients=[1],
        server_search=False,
        target_qps=None,
        min_query_count=24,
        min_duration_s=0.0,
        max_duration_s=100.0,
        seed=0,
        device="cpu",
        contention_limit=0.1,
        latency_bound_ms=50.0,
        settle_max_s=0.0,  # the settle phase has its own test (real time)
    )
    values.update(changes)
    return SimpleNamespace(**values)


def make_stage(rig, count=20, **changes):
    loader = Loader([(torch.full((3, 2), float(b)) + torch.arange(3.0).reshape(3, 1) / 10, None) for b in range(count)])
    stage = PerformanceStage(stage_config(**changes), loader, rig.sync, "fp32")
    return stage, loader
