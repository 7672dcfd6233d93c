"""Driving a monitor process in tests: let it write samples, then stop it like run.py does."""

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
