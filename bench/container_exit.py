"""What does the interpreter's teardown cost run_inference.py? A process that imports what a case's
pipeline imports (torch, tools.pipeline), then ends either as Python ends (``sys.exit``) or through
``common/process_exit.py::leave``, run.py's and run_inference.py's end (exit handlers, flush,
``os._exit``). The two run interleaved, round by round, in one run; the time measured is from the
process's last statement to its end as its parent
sees it.

    python3 -m bench.container_exit [--rounds 10] [--python PYTHON] [--side container|host]   (repo root)

Prints each way's median and interquartile range (ms) and the median of the paired differences; the
``bare`` row (a process that imports nothing and ends as Python ends) is the floor of what a process's end
costs here.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

INFERENCE = Path(__file__).resolve().parents[1] / "inference"

# what each side's process has imported when it ends: a case container's pipeline (torch), or run.py
# after a run in MODE docker (the Docker SDK, paramiko, numpy, the report, the results history)
MODULES = {
    "container": "torch, tools.pipeline",
    "host": "run, docker, paramiko, numpy, utils.executors.docker, utils.results.report, utils.history.ingest",
}
ENDINGS = ("bare", "python", "leave")


def one(python: str, way: str, stamp: Path, side: str = "container") -> float:
    """Seconds from the child's last statement to its end, as this process sees it."""
    last = f"open({str(stamp)!r}, 'w').write(repr(__import__('time').time()))"
    end = "common.process_exit.leave(0)" if way == "leave" else "sys.exit(0)"
    imports = {"bare": "import sys", "python": f"import sys; import {MODULES[side]}"}.get(
        way, f"import sys; import {MODULES[side]}, common.process_exit"
    )
    script = f"import sys; sys.path.insert(0, {str(INFERENCE)!r}); {imports}; {last}; {end}"
    subprocess.run([python, "-c", script], cwd=INFERENCE, check=True)
    ended = time.time()
    return ended - float(stamp.read_text())


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(values, n=4)
    return q[0], statistics.median(values), q[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--side", choices=sorted(MODULES), default="container", help="whose imports")
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds: at least 2 (quartiles)")
    times: dict[str, list[float]] = {way: [] for way in ENDINGS}
    with tempfile.TemporaryDirectory() as tmp:
        stamp = Path(tmp) / "last"
        os.environ.pop("PYTHONUNBUFFERED", None)
        for _ in range(args.rounds):
            for way in ENDINGS:
                times[way].append(one(args.python, way, stamp, args.side))
    print(f"{args.side}, {args.rounds} rounds, interleaved; ms from the last statement to the end")
    for way, values in times.items():
        low, mid, high = quartiles(values)
        print(f"  {way:7} median {mid * 1e3:7.1f}  IQR [{low * 1e3:.1f}, {high * 1e3:.1f}]")
    paired = [a - b for a, b in zip(times["python"], times["leave"])]
    low, mid, high = quartiles(paired)
    print(f"  saved by leave: median {mid * 1e3:.1f} ms, IQR [{low * 1e3:.1f}, {high * 1e3:.1f}] (paired by round)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
