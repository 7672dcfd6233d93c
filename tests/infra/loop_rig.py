"""A rig for ``tools.measure.loop.timed_forward``: a fake clock, sync and contention reading, a data
loader and a config, so that every figure of a ``PhaseResult`` is known exactly. The clock starts
far from zero so that a lost ``- start`` shows.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from contract.phase import ContentionReading
from tools.measure import loop as forward

START = 10**12


SYNC_NS = 1_000


class Rig:
    """Fake clock, sync and contention for one timed_forward call."""

    def __init__(self, monkeypatch, share: float | None = 0.0, cpus: int = 2, gpu: int | None = None) -> None:
        self.now = START
        self.configs: list = []
        self.devices: list = []
        self.syncs = 0
        self.reading = ContentionReading(share, cpus, 1.0, gpu)
        self.unix = iter([1_700_000_000.25, 1_700_000_042.5] + [float(k) for k in range(100)])
        monkeypatch.setattr(forward.time, "perf_counter_ns", lambda: self.now)
        monkeypatch.setattr(forward.time, "time", lambda: next(self.unix))

        def sync_fn(config):
            self.configs.append(config)

            def sync():
                self.syncs += 1
                self.now += SYNC_NS

            return sync

        rig = self

        class FakeContention:
            def __init__(self, device):
                rig.devices.append(device)

            def start(self):
                return self

            def stop(self):
                return rig.reading

        monkeypatch.setattr(forward, "sync_for_config", sync_fn)
        monkeypatch.setattr(forward, "CpuContention", FakeContention)

    def step(self, cost_ns: int, foo_s: float = 0.0, calls: list | None = None):
        def step(inputs):
            if calls is not None:
                calls.append(inputs)
            self.now += cost_ns
            return [inputs[0]], foo_s

        return step


class Loader:
    """A data loader: batches of (x, y), and optionally dataset / batch_size / drop_last like torch's."""

    def __init__(self, sizes, dataset_len=None, batch_size=None, drop_last=None, y=True):
        self.batches = [(torch.full((n, 2), float(i)), torch.arange(n) if y else None) for i, n in enumerate(sizes)]
        if dataset_len is not None:
            self.dataset = [0] * dataset_len
            self.batch_size = batch_size
        if drop_last is not None:
            self.drop_last = drop_last

    def __iter__(self):
        return iter(self.batches)


def config(**values):
    base = dict(
        device="cpu",
        warmup=0,
        repeat=1,
        log_freq=0,
        min_query_count=1,
        min_duration_s=0.0,
        max_duration_s=600.0,
        contention_limit=1.0,
        settle_max_s=0.0,
    )
    base.update(values)
    return SimpleNamespace(**base)
