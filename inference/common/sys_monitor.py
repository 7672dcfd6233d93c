"""System monitor: CPU %, memory and (where readable) package power, once per interval.

Run from inference/:  python3 -m common.sys_monitor --output FILE --interval 1
"""

from __future__ import annotations

import time
from pathlib import Path

from common.energy import read_rapl
from common.sampler import memory_gib, monitor_args, read_samples, run_sampler


class _PowerMeter:
    """Average package power between two samples, from the RAPL counters (common/energy.py: the package
    zones summed, a wrap undone), and the raw counters for the energy of a window."""

    def __init__(self) -> None:
        self.last: tuple[float, dict[str, tuple[int, int]]] | None = None

    def read(self) -> dict:
        zones, why = read_rapl()
        if zones is None:
            self.last = None
            return {"power_w": None, "rapl": None, "rapl_note": why}
        now = time.monotonic()
        counters = {z["zone"]: (z["energy_uj"], z["max_energy_range_uj"]) for z in zones}
        previous, self.last = self.last, (now, counters)
        watts = None
        if previous is not None and previous[1].keys() == counters.keys() and now > previous[0]:
            step = sum(
                value - previous[1][zone][0] if value >= previous[1][zone][0] else top - previous[1][zone][0] + value
                for zone, (value, top) in counters.items()
            )
            watts = step / 1e6 / (now - previous[0])
        return {"power_w": watts, "rapl": zones}


def make_sampler():
    import psutil

    psutil.cpu_percent(interval=None)  # prime: the first reading is meaningless otherwise
    power = _PowerMeter()
    power.read()

    def sample() -> dict:
        memory = memory_gib(psutil.virtual_memory())
        return {
            "cpu_percent": psutil.cpu_percent(interval=None),
            **memory,
            "load_1m": psutil.getloadavg()[0],
            **power.read(),
        }

    return sample


def analyse(path: str | Path) -> dict | None:
    samples = read_samples(path)
    if not samples:
        return None
    cpu = [s["cpu_percent"] for s in samples if s.get("cpu_percent") is not None]
    power = [s["power_w"] for s in samples if s.get("power_w") is not None]
    return {
        "samples": len(samples),
        "cpu_percent_avg": sum(cpu) / len(cpu) if cpu else None,
        "cpu_percent_max": max(cpu) if cpu else None,
        "mem_used_max_gib": max(s["mem_used_gib"] for s in samples),
        "mem_total_gib": samples[-1]["mem_total_gib"],
        "power_avg_w": sum(power) / len(power) if power else None,
    }


def main(argv: list[str] | None = None) -> int:
    args = monitor_args(__doc__.splitlines()[0], argv)
    return run_sampler(make_sampler(), args.output, args.interval)


if __name__ == "__main__":
    raise SystemExit(main())
