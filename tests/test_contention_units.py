"""tools.measure.contention without a real hog: /proc/stat parsing, own CPU time, the share, the GPU count.

/proc/stat, os.times, psutil, the monotonic clock and NVML are replaced by
fakes whose figures are chosen so that each term of the arithmetic shows: a
dropped or doubled term gives a different number. (The real-hog tests in
tests/test_verdict.py are marked slow.)
"""

from __future__ import annotations

import io
import os
import sys
from types import SimpleNamespace

from contract.phase import ContentionReading
from tools.measure import contention
from tools.measure.contention import CpuContention

PROC_STAT = """cpu  9000 9000 9000 9000 9000 9000 9000 9000 0 0
cpu0 10 20 30 40 50 60 70 80 90 100
cpu1 1000 1000 1000 1000 1000 1000 1000 1000 1000 1000
cpu2 1 2 3 4 5
cpu10 7 7 7 7 7 7 7 7 7 7
intr 12345 1 2 3
ctxt 999
"""


def fake_proc_stat(monkeypatch, text: str | None = PROC_STAT):
    opened = []

    def fake_open(path, *args, **kwargs):
        opened.append(path)
        if text is None or path != "/proc/stat":
            raise FileNotFoundError(path)
        return io.StringIO(text)

    monkeypatch.setattr(contention, "open", fake_open, raising=False)
    return opened


def test_reading_to_dict():
    assert ContentionReading(0.25, 3, 1.5, 2).to_dict() == {
        "other_processes_cpu_share": 0.25,
        "cpus": 3,
        "seconds": 1.5,
        "gpu_other_processes": 2,
    }
    assert ContentionReading(None, 1, 0.0).to_dict()["gpu_other_processes"] is None


def test_busy_seconds_sums_user_nice_system_irq_softirq_steal_of_our_cpus(monkeypatch):
    opened = fake_proc_stat(monkeypatch)
    hz = os.sysconf("SC_CLK_TCK")
    # cpu0: fields 0 1 2 5 6 7 = 10 + 20 + 30 + 60 + 70 + 80; cpu2 has only 5 fields: 1 + 2 + 3
    assert contention._busy_seconds([0, 2]) == (270 + 6) / hz
    assert contention._busy_seconds([1]) == 6000 / hz
    assert contention._busy_seconds([10]) == 42 / hz  # "cpu10" is not "cpu1"
    assert opened == ["/proc/stat"] * 3


def test_busy_seconds_unknown(monkeypatch):
    fake_proc_stat(monkeypatch)
    assert contention._busy_seconds([5]) is None  # none of our CPUs listed
    fake_proc_stat(monkeypatch, None)
    assert contention._busy_seconds([0]) is None  # not Linux


def test_cpus_from_affinity_or_count(monkeypatch):
    asked = []

    def affinity(pid):
        asked.append(pid)
        return {3, 1} if pid == 0 else {0, 1, 2, 3, 4, 5, 6, 7}

    monkeypatch.setattr(contention.os, "sched_getaffinity", affinity, raising=False)
    assert contention._cpus() == [1, 3] and asked == [0]
    monkeypatch.delattr(contention.os, "sched_getaffinity")
    monkeypatch.setattr(contention.os, "cpu_count", lambda: 3)
    assert contention._cpus() == [0, 1, 2]
    monkeypatch.setattr(contention.os, "cpu_count", lambda: None)
    assert contention._cpus() == [0]


class FakePsutil:
    class Error(Exception):
        pass

    def __init__(self, children, grandchildren):
        self.children_, self.grandchildren = children, grandchildren

    def Process(self):
        fake = self

        class Proc:
            def children(self, recursive=False):
                return fake.children_ + (fake.grandchildren if recursive else [])

        return Proc()


def _child(user, system, pid=0, fails=False, error=None):
    def cpu_times():
        if fails:
            raise error("gone")
        return SimpleNamespace(user=user, system=system)

    return SimpleNamespace(cpu_times=cpu_times, pid=pid)


def test_own_seconds_counts_threads_children_and_live_descendants(monkeypatch):
    monkeypatch.setattr(
        contention.os, "times", lambda: SimpleNamespace(user=1.0, system=2.0, children_user=4.0, children_system=8.0)
    )
    psutil = FakePsutil([], [])
    gone = _child(0, 0, fails=True, error=FakePsutil.Error)
    psutil.children_ = [gone, _child(0.5, 0.25)]
    psutil.grandchildren = [_child(0.0625, 0.03125)]
    monkeypatch.setitem(sys.modules, "psutil", psutil)
    assert contention._own_seconds() == 15.0 + 0.75 + 0.09375
    monkeypatch.setitem(sys.modules, "psutil", None)  # psutil not installed
    assert contention._own_seconds() == 15.0


def _scripted(monkeypatch, wall, busy, own, gpu=None, cpus=(0, 1)):
    wall, busy, own = iter(wall), iter(busy), iter(own)
    gpu = iter(gpu or [None, None])
    monkeypatch.setattr(contention.time, "monotonic", lambda: next(wall))
    monkeypatch.setattr(contention, "_busy_seconds", lambda c: next(busy))
    monkeypatch.setattr(contention, "_own_seconds", lambda: next(own))
    monkeypatch.setattr(contention, "gpu_other_processes", lambda device: next(gpu))
    monkeypatch.setattr(contention, "_cpus", lambda: list(cpus))


def test_share_arithmetic_and_clamps(monkeypatch):
    _scripted(monkeypatch, [10.0, 12.0], [100.0, 105.0], [1.0, 2.0], cpus=(0, 1, 2, 3))
    measure = CpuContention()
    assert measure.reading is None and measure.device == "cpu"
    reading = measure.start().stop()
    assert reading == ContentionReading((5.0 - 1.0) / (2.0 * 4), 4, 2.0, None)
    assert measure.reading is reading
    _scripted(monkeypatch, [0.0, 1.0], [0.0, 50.0], [0.0, 0.0])
    assert CpuContention().start().stop().share == 1.0  # more than all CPUs: clamped
    _scripted(monkeypatch, [5.0, 5.0], [0.0, 1.0], [0.0, 0.0])
    assert CpuContention().start().stop() == ContentionReading(None, 2, 0.0, None)  # no time passed
    _scripted(monkeypatch, [0.0, 1.0], [None, 1.0], [0.0, 0.0])
    assert CpuContention().start().stop().share is None  # unknown at the start


def test_gpu_count_is_the_larger_of_both_ends(monkeypatch):
    _scripted(monkeypatch, [0.0, 1.0], [0.0, 0.0], [0.0, 0.0], gpu=[3, 1])
    with CpuContention("cuda:0") as measured:
        pass
    assert measured.reading.gpu_other_processes == 3
    _scripted(monkeypatch, [0.0, 1.0], [0.0, 0.0], [0.0, 0.0], gpu=[0, 2])
    assert CpuContention("cuda").start().stop().gpu_other_processes == 2
    _scripted(monkeypatch, [0.0, 1.0], [0.0, 0.0], [0.0, 0.0], gpu=[None, 2])
    assert CpuContention("cuda").start().stop().gpu_other_processes == 2
    _scripted(monkeypatch, [0.0, 1.0], [0.0, 0.0], [0.0, 0.0], gpu=[4, None])
    assert CpuContention("cuda").start().stop().gpu_other_processes is None


# ---- NVML stood in ----------------------------------------------------------------------
class FakeNvml:
    def __init__(self, pids):
        self.pids = pids
        self.calls = []

    def nvmlInit(self):
        self.calls.append("init")

    def nvmlShutdown(self):
        self.calls.append("shutdown")

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self.calls.append(("uuid", uuid))
        return uuid

    def nvmlDeviceGetHandleByIndex(self, index):
        self.calls.append(("index", index))
        return index

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        self.calls.append(("processes", handle))
        return [SimpleNamespace(pid=p) for p in self.pids]


def _gpu(monkeypatch, pids, uuid=True, children=()):
    import torch

    fake = FakeNvml(pids)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    props = (lambda index: SimpleNamespace(uuid=f"u{index}")) if uuid else (lambda index: SimpleNamespace())
    monkeypatch.setattr(torch.cuda, "get_device_properties", props)
    psutil = FakePsutil([SimpleNamespace(pid=p) for p in children], [])
    monkeypatch.setitem(sys.modules, "psutil", psutil)
    return fake


def test_gpu_other_processes_by_uuid_or_index(monkeypatch):
    me = os.getpid()
    fake = _gpu(monkeypatch, [me, 4242, 4343, 4444], children=[4343])
    assert contention.gpu_other_processes("cuda:2") == 2  # this process and its child are ours
    assert fake.calls == ["init", ("uuid", "GPU-u2"), ("processes", "GPU-u2"), "shutdown"]
    fake = _gpu(monkeypatch, [me], uuid=False)
    assert contention.gpu_other_processes("cuda") == 0
    assert fake.calls == ["init", ("index", 0), ("processes", 0), "shutdown"]


def test_gpu_other_processes_in_a_container_and_unknown(monkeypatch):
    _gpu(monkeypatch, [])
    assert contention.gpu_other_processes("cuda:0") == 0  # never negative
    _gpu(monkeypatch, [7, 8])
    assert contention.gpu_other_processes("cuda:0") == 1
    assert contention.gpu_other_processes("cpu") is None
    assert contention.gpu_other_processes("mlu:0") is None

    class Broken(FakeNvml):
        def nvmlDeviceGetComputeRunningProcesses(self, handle):
            raise RuntimeError("driver")

    broken = Broken([])
    monkeypatch.setitem(sys.modules, "pynvml", broken)
    assert contention.gpu_other_processes("cuda:0") is None
    assert broken.calls[-1] == "shutdown"  # NVML is shut down even then


def test_own_pids(monkeypatch):
    monkeypatch.setitem(sys.modules, "psutil", FakePsutil([SimpleNamespace(pid=11)], [SimpleNamespace(pid=12)]))
    assert contention._own_pids() == {os.getpid(), 11, 12}
    monkeypatch.setitem(sys.modules, "psutil", None)
    assert contention._own_pids() == {os.getpid()}
