"""Monitors in tests: drive a monitor process (let it write samples, then stop it like run.py does), and
install a FlagPerf-style vendor monitor (a daemon driven by ``-o start|stop -l DIR``) with its
``analysis_log`` in a copy of the inference tree."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path


def sample_then_stop(process: subprocess.Popen, output: Path, min_lines: int = 2, timeout: float = 30) -> int:
    """Wait until ``output`` holds ``min_lines`` samples, send SIGTERM, return the exit status.

    A monitor that dies early fails the calling test with its stderr.
    """
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and (not output.exists() or len(output.read_text().splitlines()) < min_lines):
            assert process.poll() is None, process.stderr.read() if process.stderr else "monitor exited"
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGTERM)
        return_code = process.wait(timeout=timeout)
    return return_code


FLAGPERF_MONITOR = """
import argparse, os, signal, sys, time

parser = argparse.ArgumentParser()
parser.add_argument("-o", "--operation", required=True, choices=["start", "stop"])
parser.add_argument("-l", "--log", required=True)
args = parser.parse_args()
pid_file = os.path.join(args.log, "cpu_monitor.pid")
if args.operation == "stop":
    with open(pid_file) as handle:
        os.kill(int(handle.read()), signal.SIGTERM)
    os.remove(pid_file)
    sys.exit(0)
if os.fork():
    sys.exit(0)
os.setsid()
if os.fork():
    os._exit(0)
with open(pid_file, "w") as handle:
    handle.write(str(os.getpid()))
used = 1000
with open(os.path.join(args.log, "cpu_monitor.log"), "a", buffering=1) as log:
    while True:
        used += 500
        log.write(f"{time.time()} {used} 16000\\n")
        time.sleep(0.1)
"""

FLAGPERF_ANALYSIS = """
def analysis_log(logpath):
    used = total = 0
    for line in open(logpath):
        _, u, t = line.split()
        used, total = max(used, float(u) / 1000), float(t) / 1000
    return used, total, 1.0e12, 2.0e12
"""


def install_flagperf_monitor(perf: Path) -> None:
    """The cpu vendor's monitor and analysis in ``perf`` (a copy of inference/) replaced by FlagPerf's kind."""
    (perf / "docker_images" / "cpu" / "cpu_monitor.py").write_text(FLAGPERF_MONITOR)
    (perf / "docker_images" / "cpu" / "cpu_analysis.py").write_text(FLAGPERF_ANALYSIS)
