"""Energy over a judged window, from a hardware energy counter and never from a guess.

Two counters are read, each cumulative since some origin the reader never needs:

- NVML's total energy of a GPU (``nvmlDeviceGetTotalEnergyConsumption``, millijoules since the
  driver loaded; Volta and later), recorded per device by ``docker_images/nvidia/nvidia_monitor.py``
  as ``energy_mj``;
- RAPL through ``/sys/class/powercap`` (``<zone>/energy_uj``, microjoules, wrapping to 0 after
  ``<zone>/max_energy_range_uj``), the package zones summed, recorded by ``common/sys_monitor.py``
  as ``rapl``. ``energy_uj`` is often mode 0400 (root only): a counter that cannot be read is
  recorded as the reason, never as 0.

A monitor sample holds the raw counter values; this module turns a monitor's samples into
intervals (each the counter difference between two consecutive samples, a RAPL wrap undone) and
the energy of a window into the sum of the intervals it covers, an interval at either end of the
window counted in proportion to the part of it inside the window (the counter read linearly between
its two samples; ``edge_s`` says how many seconds of the window that was). A window the samples do
not cover from end to end, or with a counter that reset or could not be read inside it, has no
figure: its reason says why.

Where no counter exists the figure is ``None`` with a reason naming what was looked for. An estimate
from a TDP table (``TDP_W``) is made only when the caller asks for it (``estimate="tdp"``), is marked
``estimate: true`` and names its source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

RAPL_ROOT = Path("/sys/class/powercap")
NVML_CALL = "nvmlDeviceGetTotalEnergyConsumption"
NO_COUNTER = "no energy counter"
# A package zone (``intel-rapl:0``, ``amd-rapl:0``); its sub-zones (``intel-rapl:0:0``, the cores)
# are inside the package figure and would be counted twice.
_PACKAGE_ZONE = re.compile(r"[a-z]+(?:-[a-z]+)*-rapl:\d+")
# The platform zone includes the packages: summing both would count them twice.
_PLATFORM_ZONE_NAME = "psys"

# Board power limits (W) of the GPUs in docker_images/nvidia/nvidia_analysis.py's peak table, from
# the same NVIDIA datasheets (the maximum thermal design power of the form factor). Used only for an
# estimate asked for: the board held at its limit for the whole window, an upper bound.
TDP_W: list[tuple[str, str, float]] = [
    ("H100 NVL", r"\bH100\b.*\bNVL\b", 400.0),
    ("H100 PCIe", r"\bH100\b.*\bPCIe\b", 350.0),
    ("H100 SXM", r"\bH100\b", 700.0),
    ("H200 NVL", r"\bH200\b.*\bNVL\b", 600.0),
    ("H200 SXM", r"\bH200\b", 700.0),
    ("A100 PCIe", r"\bA100\b.*\bPCIe\b", 300.0),
    ("A100 SXM", r"\bA100\b", 400.0),
    ("L40S", r"\bL40S\b", 350.0),
    ("L4", r"\bL4\b", 72.0),
    ("A10", r"\bA10\b", 150.0),
]
TDP_SOURCE = "the board's maximum power in NVIDIA's datasheet, held for the whole window (common/energy.py TDP_W)"


def _read_text(path: Path) -> str:
    return path.read_text(encoding="ascii")


# ---- reading the counters (in the monitors) ----------------------------------------------------
def read_rapl(root: Path = RAPL_ROOT, read: Callable[[Path], str] = _read_text) -> tuple[list[dict] | None, str]:
    """The package zones' RAPL counters, ``([{"zone", "energy_uj", "max_energy_range_uj"}, ...], "")``,
    or ``(None, why not)``: no zone under ``root``, or a zone whose counter cannot be read (the
    reason names the file and, for a permission error, that it needs root). ``read`` reads a file."""
    try:
        zones = sorted(p for p in root.iterdir() if _PACKAGE_ZONE.fullmatch(p.name))
    except OSError:
        zones = []
    if not zones:
        return None, f"no RAPL zone under {root}"
    readings = []
    for zone in zones:
        try:
            if read(zone / "name").strip() == _PLATFORM_ZONE_NAME:
                continue
        except OSError:
            pass  # a zone without a readable name is read as a package
        counter = zone / "energy_uj"
        try:
            energy = int(read(counter).strip())
            counter = zone / "max_energy_range_uj"
            top = int(read(counter).strip())
        except PermissionError:
            return None, f"{counter} is not readable by this user (often mode 0400: root only)"
        except (OSError, ValueError) as exc:
            return None, f"{counter} cannot be read ({getattr(exc, 'strerror', None) or exc})"
        readings.append({"zone": zone.name, "energy_uj": energy, "max_energy_range_uj": top})
    if not readings:
        return None, f"no package RAPL zone under {root} (only the platform zone)"
    return readings, ""


def read_nvml_energy(nvml: Any, handle: Any) -> int | None:
    """NVML's total energy of one GPU in mJ, or None where the board or the library lacks it."""
    call = getattr(nvml, NVML_CALL, None)
    if call is None:
        return None
    try:
        return int(call(handle))
    except nvml.NVMLError:
        return None


# ---- from samples to intervals -----------------------------------------------------------------
@dataclass(frozen=True)
class Interval:
    """The energy between two consecutive samples (J), or None: a counter reset or was unreadable."""

    start: float
    end: float
    joules: float | None


@dataclass(frozen=True)
class Counter:
    """One monitor's energy counter: the intervals between its samples, what it is, or why none."""

    source: str
    intervals: tuple[Interval, ...] = ()
    missing: str | None = None  # why there is no counter (then ``intervals`` is empty)


def _difference(previous: int, current: int, top: int | None) -> int | None:
    """A counter's increase; a wrap when ``top`` is its range (RAPL), a reset (None) otherwise."""
    if current >= previous:
        return current - previous
    if top:
        return top - previous + current
    return None


def _intervals(points: list[tuple[float, dict[str, tuple[int, int | None]] | None]], unit_j: float) -> list[Interval]:
    """``points``: (timestamp, {counter: (raw, wrap range or None)} or None where unreadable)."""
    out = []
    for (t0, before), (t1, after) in zip(points, points[1:]):
        joules: float | None = None
        if before is not None and after is not None and before.keys() == after.keys() and t1 > t0:
            steps = [_difference(before[k][0], after[k][0], after[k][1]) for k in after]
            joules = None if any(s is None for s in steps) else sum(s for s in steps if s is not None) * unit_j
        out.append(Interval(t0, t1, joules))
    return out


def _timed(samples: Iterable[dict]) -> list[dict]:
    return sorted(
        (s for s in samples if isinstance(s.get("timestamp"), (int, float))), key=lambda s: float(s["timestamp"])
    )


def rapl_counter(samples: Iterable[dict]) -> Counter:
    """The system monitor's RAPL counter (its samples' ``rapl``), the package zones summed."""
    timed = _timed(samples)
    points: list[tuple[float, dict[str, tuple[int, int | None]] | None]] = []
    reasons = []
    for sample in timed:
        zones = sample.get("rapl")
        if isinstance(zones, list) and zones:
            points.append(
                (
                    float(sample["timestamp"]),
                    {z["zone"]: (int(z["energy_uj"]), int(z["max_energy_range_uj"])) for z in zones},
                )
            )
        else:
            points.append((float(sample["timestamp"]), None))
            reasons.append(str(sample.get("rapl_note") or "RAPL not recorded by the system monitor"))
    if all(p[1] is None for p in points):
        return Counter("RAPL", missing=reasons[-1] if reasons else "no system monitor samples")
    return Counter("RAPL package energy (/sys/class/powercap)", tuple(_intervals(points, 1e-6)))


def nvml_counter(samples: Iterable[dict]) -> Counter:
    """The nvidia monitor's NVML counters (each device's ``energy_mj``), the monitored GPUs summed."""
    timed = _timed(samples)
    points: list[tuple[float, dict[str, tuple[int, int | None]] | None]] = []
    names: set[str] = set()
    for sample in timed:
        devices = sample.get("devices") or []
        values = {str(d.get("index")): d.get("energy_mj") for d in devices}
        names.update(str(d.get("name") or "GPU") for d in devices)
        if values and all(isinstance(v, int) for v in values.values()):
            points.append((float(sample["timestamp"]), {k: (int(v), None) for k, v in values.items()}))
        else:
            points.append((float(sample["timestamp"]), None))
    if all(p[1] is None for p in points):
        what = ", ".join(sorted(names)) or "no GPU sampled"
        return Counter("NVML", missing=f"NVML {NVML_CALL} gave no reading ({what})")
    gpus = ", ".join(sorted(names))
    return Counter(f"NVML total energy ({gpus})", tuple(_intervals(points, 1e-3)))


# ---- a window's energy -------------------------------------------------------------------------
@dataclass(frozen=True)
class WindowEnergy:
    """The energy of one window: ``joules`` with its ``source``, or None with ``reason``."""

    seconds: float
    joules: float | None
    source: str | None
    reason: str | None = None
    edge_s: float = 0.0  # seconds of the window read in proportion from a sample interval at its ends
    estimate: bool = False

    def per(self, count: int | None) -> float | None:
        return self.joules / count if self.joules is not None and count else None


def window_energy(counter: Counter, start: float, end: float) -> WindowEnergy:
    """The counter's increase over ``[start, end]`` (unix seconds)."""
    seconds = end - start
    if counter.missing is not None:
        return WindowEnergy(seconds, None, None, f"{NO_COUNTER}: {counter.missing}")
    intervals = counter.intervals
    if seconds <= 0:
        return WindowEnergy(seconds, None, None, "the window has no length")
    if not intervals or intervals[0].start > start or intervals[-1].end < end:
        first = intervals[0].start if intervals else None
        last = intervals[-1].end if intervals else None
        return WindowEnergy(
            seconds, None, None, f"the {counter.source} samples ({first} to {last}) do not cover the window"
        )
    joules = edge = 0.0
    for interval in intervals:
        overlap = min(interval.end, end) - max(interval.start, start)
        if overlap <= 0:
            continue
        if interval.joules is None:
            return WindowEnergy(seconds, None, None, f"the {counter.source} reset or was unreadable inside the window")
        span = interval.end - interval.start
        if overlap < span:
            edge += overlap
        joules += interval.joules * overlap / span
    return WindowEnergy(seconds, joules, counter.source, edge_s=edge)


def tdp_estimate(device_name: str, seconds: float) -> WindowEnergy:
    """The estimate asked for: the board's TDP (``TDP_W``) for ``seconds``; None when it is not in the table."""
    for label, pattern, watts in TDP_W:
        if re.search(pattern, device_name, flags=re.IGNORECASE):
            return WindowEnergy(seconds, watts * seconds, f"TDP {watts:g} W of {label}: {TDP_SOURCE}", estimate=True)
    return WindowEnergy(seconds, None, None, f"no TDP entry for {device_name!r}")


# ---- the record: every judged window of a result ------------------------------------------------
@dataclass(frozen=True)
class Window:
    """A judged window: its label, unix span and what it served (queries, samples, output tokens)."""

    label: str
    start: float | None
    end: float | None
    queries: int | None
    samples: int | None
    output_tokens: int | None = None


def pick_counter(sys_samples: Sequence[dict], vendor_samples: Sequence[dict], vendor: str) -> Counter:
    """The device's counter: NVML where the vendor's monitor samples GPUs (``devices``), RAPL for the cpu
    vendor (the CPU is its device). A GPU run never falls back to RAPL: the CPU package is not its device."""
    if any("devices" in s for s in vendor_samples):
        return nvml_counter(vendor_samples)
    if vendor == "cpu":
        return rapl_counter(sys_samples)
    return Counter(
        "none",
        missing=f"the {vendor} monitor records no energy counter (NVML's {NVML_CALL} is read "
        "from a monitor that samples GPUs)",
    )


def device_name(vendor_samples: Sequence[dict]) -> str | None:
    for sample in vendor_samples:
        for device in sample.get("devices") or []:
            if device.get("name"):
                return str(device["name"])
        if sample.get("device"):
            return str(sample["device"])
    return None


def energy_block(
    windows: Sequence[Window],
    sys_samples: Sequence[dict],
    vendor_samples: Sequence[dict],
    vendor: str,
    estimate: str | None = None,
) -> dict | None:
    """summary.json's ``energy`` of one result: ``source`` (the counter, or null), ``reason`` (why
    there is none), ``estimate`` (true when the figures are the TDP estimate asked for) and
    ``windows[]``: ``label``, ``seconds``, ``joules``, ``watts``, ``per_query``, ``per_sample``,
    ``per_output_token``, ``edge_s``, ``reason``. None when no monitor ran (nothing was looked at)."""
    if not sys_samples and not vendor_samples:
        return None
    if estimate not in (None, "tdp"):
        raise ValueError(f"energy estimate {estimate!r}: the only estimate is 'tdp'")
    counter = pick_counter(sys_samples, vendor_samples, vendor)
    name = device_name(vendor_samples)
    rows = []
    for window in windows:
        if window.start is None or window.end is None:
            figure = WindowEnergy(0.0, None, None, "the window has no unix start and end")
        else:
            figure = window_energy(counter, window.start, window.end)
            if figure.joules is None and estimate == "tdp" and counter.missing is not None:
                guess = tdp_estimate(name or "", figure.seconds)
                figure = (
                    guess
                    if guess.joules is not None
                    else WindowEnergy(figure.seconds, None, None, f"{figure.reason}; {guess.reason}")
                )
        rows.append(
            {
                "label": window.label,
                "seconds": round(figure.seconds, 4),
                "joules": _rounded(figure.joules),
                "watts": _rounded(
                    figure.joules / figure.seconds if figure.joules is not None and figure.seconds else None
                ),
                "per_query": _rounded(figure.per(window.queries)),
                "per_sample": _rounded(figure.per(window.samples)),
                "per_output_token": _rounded(figure.per(window.output_tokens)),
                "edge_s": round(figure.edge_s, 4),
                "estimate": figure.estimate,
                "source": figure.source,
                "reason": figure.reason,
            }
        )
    return {
        "source": None if counter.missing is not None else counter.source,
        "reason": f"{NO_COUNTER}: {counter.missing}" if counter.missing is not None else None,
        "windows": rows,
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.6g}")


def energy_cell(window: dict | None, per: str = "per_query") -> str:
    """A window's energy per query (``per_query``), per sample or per output token, for summary.md and
    the report: ``0.0123 J``, ``0.52 J est.``, ``n/a (reason)``, or ``-`` when nothing was looked at."""
    if window is None:
        return "-"
    value = window.get(per)
    if value is None:
        return f"n/a ({window.get('reason') or 'no ' + per.replace('_', ' ')})"
    return f"{value:.4g} J" + (" est." if window.get("estimate") else "")


def judged_windows(result: Any) -> list[Window]:
    """The judged windows of a ``common.record.CaseResult``: the inference phase and every performance
    row (the validation pass is information, not judged). An LLM case's cells record no unix window yet,
    so their energy per output token has no window to be read over."""
    windows = []
    phase = result.inference
    if phase is not None and phase.judged:
        windows.append(Window("inference", phase.started_at_unix, phase.finished_at_unix, phase.batches, phase.samples))
    for row in result.performance:
        windows.append(Window(row.label, row.started_at_unix, row.finished_at_unix, row.queries, row.samples))
    return windows
