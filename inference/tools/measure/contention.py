"""How much of the benchmark's CPUs other processes used during a measured phase.

Read at the two ends of the phase, not sampled: ``/proc/stat`` gives the busy
time of each CPU the process may run on (its affinity set; inside a container
``/proc/stat`` is the host's, so other containers count), and the process's
own CPU time (all threads, plus its child processes such as DataLoader
workers) is taken out. What remains, divided by wall time x CPUs, is the share
other processes took: 0.0 on a quiet machine, about 1.0 when a hog saturates
every core. Hypervisor steal counts as other use. Where ``/proc/stat`` cannot
be read (not Linux) the share is ``None``: unknown, never reported as 0.

On a CUDA device the accelerator is checked too: the processes holding a
compute context on the benchmark's GPU (NVML, at both ends of the phase) other
than the benchmark itself. NVML reports host PIDs, which a container cannot
match against its own, so there the benchmark is counted as one of them.
Unknown (no NVML, no GPU) is ``None``.
"""

from __future__ import annotations

import os
import time

from contract.phase import ContentionReading

_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user nice system irq softirq steal (guest is inside user)


def _own_pids() -> set[int]:
    pids = {os.getpid()}
    try:
        import psutil

        pids |= {child.pid for child in psutil.Process().children(recursive=True)}
    except (ImportError, Exception):  # psutil.Error
        pass
    return pids


def gpu_other_processes(device: str) -> int | None:
    """How many processes other than this benchmark hold a compute context on ``device``'s GPU."""
    if not device.startswith("cuda"):
        return None
    try:
        import pynvml
        import torch

        index = torch.device(device).index or 0
        pynvml.nvmlInit()
        try:
            uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
            if uuid is not None:
                handle = pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
            else:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            pids = {p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)}
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML, no driver, no GPU: unknown
        return None
    own = _own_pids()
    if pids & own:
        return len(pids - own)
    return max(len(pids) - 1, 0)  # another PID namespace (a container): one of them is this benchmark


def _cpus() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def _busy_seconds(cpus: list[int]) -> float | None:
    wanted = {f"cpu{i}" for i in cpus}
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    ticks = 0
    found = 0
    for line in lines:
        name, _, rest = line.partition(" ")
        if name in wanted:
            values = rest.split()
            ticks += sum(int(values[i]) for i in _BUSY_FIELDS if i < len(values))
            found += 1
    if not found:
        return None
    return ticks / os.sysconf("SC_CLK_TCK")


def _own_seconds() -> float:
    times = os.times()
    own = times.user + times.system + times.children_user + times.children_system
    try:
        import psutil

        for child in psutil.Process().children(recursive=True):
            try:
                cpu = child.cpu_times()
                own += cpu.user + cpu.system
            except psutil.Error:
                continue
    except ImportError:
        pass
    return own


class CpuContention:
    """``with CpuContention(device) as c: ...`` then ``c.reading``; or start() / stop()."""

    def __init__(self, device: str = "cpu") -> None:
        self.cpus = _cpus()
        self.device = device
        self.reading: ContentionReading | None = None

    def start(self) -> "CpuContention":
        self._gpu = gpu_other_processes(self.device)
        self._wall = time.monotonic()
        self._busy = _busy_seconds(self.cpus)
        self._own = _own_seconds()
        return self

    def stop(self) -> ContentionReading:
        seconds = time.monotonic() - self._wall
        busy = _busy_seconds(self.cpus)
        own = _own_seconds() - self._own
        share = None
        if busy is not None and self._busy is not None and seconds > 0:
            others = (busy - self._busy) - own
            share = min(1.0, max(0.0, others / (seconds * len(self.cpus))))
        gpu = gpu_other_processes(self.device)
        if gpu is not None and self._gpu is not None:
            gpu = max(gpu, self._gpu)
        self.reading = ContentionReading(share, len(self.cpus), seconds, gpu)
        return self.reading

    def __enter__(self) -> "CpuContention":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
