"""The rules that make a figure valid or invalid, and the numbers they judge.

Pure functions are checked against values computed by hand; the measured loop
runs on a fake clock so its figures are exact; contention is provoked with a
real CPU hog that is not a descendant of the measuring process.
"""

from __future__ import annotations

import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from common.stats import LatencyStats, percentile
from contract.phase import Verdict
from tests.infra.loop_rig import config
from tools.measure import loop as forward
from tools.measure.contention import CpuContention
from tools.measure.verdict import contention_reason, minimum_reasons, minimums_met, window_throughputs


# ---- percentiles: measured or null, never extrapolated -----------------------
def test_p90_needs_64_samples_and_is_exact_at_64():
    below = LatencyStats.from_ns([i * 1_000_000 for i in range(1, 64)])
    assert below.p90 is None and below.p99 is None and below.p99_9 is None
    assert "p90 needs at least 64 queries, got 63" in below.notes
    at = LatencyStats.from_ns([i * 1_000_000 for i in range(1, 65)])
    # values 1..64 ms: rank 63 * 0.9 = 56.7 -> 57 + 0.7 * (58 - 57)
    assert at.p90 == pytest.approx(57.7)
    assert at.p99 is None and "p99 needs at least 662 queries, got 64" in at.notes


def test_p99_needs_662_samples_and_is_the_99th_not_the_90th():
    assert LatencyStats.from_ns([1_000_000] * 661).p99 is None
    stats = LatencyStats.from_ns([i * 1_000_000 for i in range(1, 663)])
    # rank 661 * 0.99 = 654.39 -> 655 + 0.39
    assert stats.p99 == pytest.approx(655.39)
    assert stats.p90 == pytest.approx(1 + 661 * 0.9)
    assert stats.p50 == pytest.approx(331.5)
    assert stats.mean == pytest.approx(331.5) and stats.min == 1.0 and stats.max == 662.0


def test_p99_9_floor_and_order():
    stats = LatencyStats.from_ns(list(range(1, 6621)))
    assert stats.p99_9 is not None and stats.p50 < stats.p90 < stats.p99 < stats.p99_9 <= stats.max
    assert LatencyStats.from_ns(list(range(1, 6620))).p99_9 is None


def test_cv_is_information_and_std_is_population():
    stats = LatencyStats.from_ns([1_000_000, 3_000_000])
    assert stats.mean == 2.0 and stats.std == pytest.approx(1.0) and stats.cv == pytest.approx(0.5)
    assert stats.p50 == 2.0
    assert LatencyStats.from_ns([]) is None
    assert LatencyStats.from_ns([5_000_000]).p50 is None  # a median of one sample is not reported


def test_percentile_interpolates_like_numpy():
    assert percentile([10.0, 20.0, 30.0, 40.0], 50) == 25.0
    assert percentile([10.0, 20.0, 30.0, 40.0], 100) == 40.0
    assert percentile([10.0, 20.0, 30.0, 40.0], 0) == 10.0
    with pytest.raises(ValueError):
        percentile([], 50)


# ---- throughput windows (information only) ------------------------------------------
def test_windows_tile_the_measured_time_exactly():
    # 24 queries of 2 samples; the first 8 take 2 ms each, the rest 1 ms.
    durations = [2_000_000] * 8 + [1_000_000] * 16
    elapsed, total = [], 0
    for d in durations:
        total += d
        elapsed.append(total)
    rates = window_throughputs(elapsed, [2] * 24)
    assert rates == pytest.approx([16 / 0.016, 16 / 0.008, 16 / 0.008])


def test_window_count_and_minimum():
    assert window_throughputs(list(range(1, 24)), [1] * 23) == []  # < 3 windows of 8
    assert len(window_throughputs(list(range(1, 25)), [1] * 24)) == 3
    assert len(window_throughputs(list(range(1, 1001)), [1] * 1000)) == 10


def test_minimum_and_contention_reasons():
    assert minimum_reasons(64, 2.0, 64, 2.0) == []
    assert minimum_reasons(63, 2.0, 64, 2.0) == ["too few queries: 63 measured, min_query_count is 64"]
    assert minimum_reasons(64, 1.5, 64, 2.0) == ["too short: 1.5 s measured, min_duration_s is 2"]
    assert minimums_met(64, 2.0, 64, 2.0) and not minimums_met(63, 5.0, 64, 2.0) and not minimums_met(64, 1.99, 64, 2.0)
    assert contention_reason(0.10, 2, 0.10) is None and contention_reason(None, 2, 0.10) is None
    assert contention_reason(0.47, 2, 0.10) == (
        "contention: other processes used 47% of the 2 CPU(s) available to the benchmark during the measured phase "
        "(limit 10%)"
    )


def test_verdict_collects_distinct_reasons():
    verdict = Verdict().add(None).add("a").extend(["b", "a", None])
    assert verdict.to_dict() == {"valid": False, "reasons": ["a", "b"]}
    assert Verdict().valid and Verdict().to_dict() == {"valid": True, "reasons": []}


# ---- the measured loop on a fake clock --------------------------------------------
class FakeClock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def _loader(batches: int, size: int):
    import torch

    return [(torch.zeros(size, 1), torch.zeros(size)) for _ in range(batches)]


def test_core_subtracts_foo_time_and_keeps_going_until_the_minimums(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(forward.time, "perf_counter_ns", clock)

    def step(inputs):
        clock.now += 5_000_000  # the call takes 5 ms ...
        return list(inputs), 0.002  # ... of which 2 ms the engine declares unrelated

    result = forward.timed_forward(step, _loader(3, 4), None, config(min_query_count=10), "inference")
    # 10 queries meet the minimum and 18 are precise (constant times: ±0 %), but the drift needs 16 queries in
    # each third of the window, so passes go on to 48
    assert result.passes == 16 and result.batches == 48 and result.samples == 192
    assert result.core_latencies_ns == [3_000_000] * 48
    assert result.core_time_s == pytest.approx(0.144) and result.foo_time_s == pytest.approx(0.096)
    assert result.whole_time_s == pytest.approx(0.144)
    assert result.core_qps == pytest.approx(192 / 0.144)
    assert result.core_qps_ci95 == pytest.approx([192 / 0.144] * 2) and result.verdict.valid
    assert result.verdict.not_judged == [] and result.window_qps == pytest.approx([192 / 0.144] * 6)  # 6 windows of 8


def test_min_duration_counts_wall_time_and_max_duration_stops_with_a_reason(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(forward.time, "perf_counter_ns", clock)

    def step(inputs):
        clock.now += 1_000_000
        return list(inputs), 0.0

    ok = forward.timed_forward(step, _loader(8, 2), None, config(min_duration_s=0.05), "validation")
    assert ok.batches == 56 and ok.passes == 7  # passes end at 8, 16, ... 56 ms: the first past 50 ms
    assert ok.verdict.valid and len(ok.window_qps) == 7 and ok.window_qps == pytest.approx([2000.0] * 7)

    capped = forward.timed_forward(
        step, _loader(8, 2), None, config(min_query_count=1000, min_duration_s=0.0, max_duration_s=0.02), "inference"
    )
    assert capped.batches == 24  # stopped at the first pass boundary past 20 ms
    assert "too few queries: 24 measured, min_query_count is 1000" in capped.verdict.reasons


def test_repeat_is_the_minimum_number_of_passes(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(forward.time, "perf_counter_ns", clock)

    def step(inputs):
        clock.now += 1_000_000
        return list(inputs), 0.0

    # 16 passes of 4 queries: past the 48 that the minimums, the precision and the drift need here
    result = forward.timed_forward(step, _loader(4, 3), None, config(repeat=16), "inference")
    assert result.passes == 16 and result.samples == 192


# ---- contention, for real -----------------------------------------------------------
def _spawn_orphan_hogs(count: int, seconds: float) -> None:
    """CPU hogs that are NOT descendants of this process (the shell exits at once)."""
    hog = f"import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass"
    script = " ".join(f"{sys.executable} -c '{hog}' &" for _ in range(count))
    subprocess.run(["sh", "-c", script + " exit 0"], check=True)


@pytest.mark.slow
@pytest.mark.serial
def test_contention_sees_an_unrelated_cpu_hog():
    cpus = len(CpuContention().cpus)
    _spawn_orphan_hogs(cpus, 2.5)
    time.sleep(0.3)
    with CpuContention() as measured:
        time.sleep(1.5)
    assert measured.reading.cpus == cpus
    assert measured.reading.share > 0.6, measured.reading


def test_contention_share_arithmetic(monkeypatch):
    """(busy time of our CPUs - our own CPU time) / (wall x CPUs), clamped to [0, 1]."""
    from tools.measure import contention

    busy = iter([100.0, 103.0])  # the CPUs were busy 3.0 s during the phase
    own = iter([10.0, 11.2])  # 1.2 s of it was this process and its children
    wall = iter([50.0, 51.5])  # 1.5 s of wall time
    monkeypatch.setattr(contention, "_busy_seconds", lambda cpus: next(busy))
    monkeypatch.setattr(contention, "_own_seconds", lambda: next(own))
    monkeypatch.setattr(contention.time, "monotonic", lambda: next(wall))
    monkeypatch.setattr(contention, "_cpus", lambda: [0, 1])
    reading = CpuContention().start().stop()
    assert reading.cpus == 2 and reading.seconds == pytest.approx(1.5)
    assert reading.share == pytest.approx((3.0 - 1.2) / (1.5 * 2))

    busy, own, wall = iter([0.0, 0.5]), iter([0.0, 2.0]), iter([0.0, 1.0])
    assert CpuContention().start().stop().share == 0.0  # never negative
    busy, own, wall = iter([0.0, None]), iter([0.0, 0.0]), iter([0.0, 1.0])
    monkeypatch.setattr(contention, "_busy_seconds", lambda cpus: next(busy))
    assert CpuContention().start().stop().share is None  # unknown, never 0


def _wait_until_quiet(limit: float = 0.1, within_s: float = 30.0) -> float | None:
    """The other processes' share over 0.5 s, measured again until it is at most ``limit``
    or ``within_s`` passes (a neighbour test's daemons, containers and hogs wind down)."""
    deadline = time.monotonic() + within_s
    while True:
        with CpuContention() as quiet:
            time.sleep(0.5)
        share = quiet.reading.share
        if share is None or share <= limit or time.monotonic() > deadline:
            return share


@pytest.mark.slow
@pytest.mark.serial
def test_contention_does_not_count_the_benchmark_itself():
    """Work in this process and its children is the benchmark's own, not contention."""
    share = _wait_until_quiet()
    if share is None or share > 0.1:
        pytest.skip(f"machine not quiet enough to tell ({share})")
    child = subprocess.Popen(
        [sys.executable, "-c", "import time\nend = time.time() + 1.5\nwhile time.time() < end: pass"]
    )
    with CpuContention() as measured:
        end = time.time() + 1.2
        while time.time() < end:
            pass
    child.wait()
    assert measured.reading.share is not None and measured.reading.share < 0.3, measured.reading


# ---- accelerator contention (NVML stood in: no GPU on these machines) ---------------
class _FakeNvml:
    def __init__(self, pids):
        self.pids = pids
        self.asked = []

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self.asked.append(uuid)
        return uuid

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return [SimpleNamespace(pid=p) for p in self.pids]


def _fake_gpu(monkeypatch, pids):
    import os

    import torch

    from tools.measure import contention

    fake = _FakeNvml([os.getpid() if p == "self" else p for p in pids])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: SimpleNamespace(uuid=f"uuid-{index}"))
    return contention, fake


def test_gpu_contention_counts_other_processes_on_the_benchmarks_gpu(monkeypatch):
    contention, fake = _fake_gpu(monkeypatch, ["self", 999_001, 999_002])
    assert contention.gpu_other_processes("cuda:1") == 2
    assert fake.asked == ["GPU-uuid-1"]  # the GPU this process sees as cuda:1, not NVML's index 1
    assert contention.gpu_other_processes("cpu") is None


def test_gpu_contention_in_another_pid_namespace_counts_the_benchmark_as_one(monkeypatch):
    contention, _ = _fake_gpu(monkeypatch, [999_001])  # a container: only host PIDs, one is us
    assert contention.gpu_other_processes("cuda") == 0
    contention, _ = _fake_gpu(monkeypatch, [999_001, 999_002, 999_003])
    assert contention.gpu_other_processes("cuda") == 2


def test_gpu_contention_unknown_without_nvml(monkeypatch):
    from tools.measure import contention

    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert contention.gpu_other_processes("cuda") is None


def test_accelerator_reason():
    from tools.measure.verdict import accelerator_reason

    assert accelerator_reason(None) is None and accelerator_reason(0) is None
    assert accelerator_reason(2) == (
        "contention: 2 other process(es) held a compute context on the benchmark's GPU during the measured phase"
    )
