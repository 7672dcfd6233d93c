"""The loop every monitor shares: sample, append one JSON line, sleep, stop cleanly on a signal."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable, NoReturn

from common import lifetime
from common.files import json_text

# A sampling interval outside this range busy-loops or samples nothing.
MIN_INTERVAL_S = 0.05
MAX_INTERVAL_S = 60.0
_GIB = 1024**3


def monitor_args(description: str, argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--output", required=True, type=Path, help="JSON-lines file to append samples to")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    parser.add_argument("--devices", default=None, help="comma-separated device indices to sample (default all)")
    args = parser.parse_args(argv)
    if not MIN_INTERVAL_S <= args.interval <= MAX_INTERVAL_S:
        parser.error(f"--interval must be between {MIN_INTERVAL_S} and {MAX_INTERVAL_S} seconds, got {args.interval}")
    return args


def memory_gib(memory: Any) -> dict[str, float]:
    """A sample's memory fields from psutil's ``virtual_memory()``: used (total less available) and total, GiB."""
    return {"mem_used_gib": (memory.total - memory.available) / _GIB, "mem_total_gib": memory.total / _GIB}


class _Stopped(BaseException):
    """Raised by the stop signals' handler where the loop is. The handler takes no lock: one that set a
    threading.Event could wait forever on the Event's own lock, held by the wait it interrupted."""


def _stop(_signum: int, _frame: object) -> NoReturn:
    for sig in STOP_SIGNALS:  # a second signal must not cut the file's closing short
        signal.signal(sig, signal.SIG_IGN)
    raise _Stopped


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def run_sampler(sample: Callable[[], dict], output: Path, interval: float) -> int:
    """Sample every ``interval`` seconds, one JSON line each, until a stop signal; 0 then."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _stop)
    try:
        lifetime.watch()  # stop when run.py is gone or the case's time is long over
        output.parent.mkdir(parents=True, exist_ok=True)
        with open(output, "a", encoding="utf-8", buffering=1) as handle:
            while True:
                started = time.monotonic()
                try:
                    record = {"timestamp": time.time(), **sample()}
                except Exception as exc:  # one bad reading must not end the monitor
                    record = {"timestamp": time.time(), "error": f"{type(exc).__name__}: {exc}"}
                handle.write(json_text(record, indent=None) + "\n")
                time.sleep(max(0.0, interval - (time.monotonic() - started)))
    except _Stopped:
        return 0


def read_samples(path: str | Path) -> list[dict]:
    samples: list[dict] = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError:
        return samples
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short when the monitor was killed
        if isinstance(record, dict) and "error" not in record:
            samples.append(record)
    return samples


def fail(message: str) -> NoReturn:
    print(message, file=sys.stderr)
    sys.exit(1)
