"""Run a FlagPerf-style daemon monitor under InferPerf's monitor lifecycle.

FlagPerf's vendor monitors are daemons driven as
``python3 VENDOR_monitor.py -o start|stop -l DIR``: ``start`` forks a sampler
that writes its own log in DIR and returns; ``stop`` ends it. InferPerf's
lifecycle starts a monitor as one long-lived process (or container) and stops
it with SIGTERM. This holder joins the two: it runs ``-o start``, stays alive
while the daemon samples (so a container holding it keeps running), and on
SIGTERM/SIGINT/SIGHUP, when run.py is gone, or when its lifetime bound passes,
runs ``-o stop`` and exits. A ``start`` that fails ends the holder with the
same status, so the lifecycle's startup check names the monitor.

    python3 -m common.daemon_monitor --script docker_images/V/V_monitor.py --log-dir DIR
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading

from common import lifetime

COMMAND_TIMEOUT_S = 60.0


def _run(script: str, operation: str, log_dir: str) -> int:
    try:
        done = subprocess.run([sys.executable, script, "-o", operation, "-l", log_dir], timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        print(f"{script} -o {operation} did not return within {COMMAND_TIMEOUT_S:.0f} s", file=sys.stderr)
        return 124
    return done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--script", required=True, help="the FlagPerf-style VENDOR_monitor.py")
    parser.add_argument("--log-dir", required=True, help="the directory passed as -l")
    args = parser.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda _s, _f: stop.set())
    code = _run(args.script, "start", args.log_dir)
    if code != 0:
        return code
    lifetime.watch()  # its SIGTERM lands in the handler above: stop cleanly
    stop.wait()
    return _run(args.script, "stop", args.log_dir)


if __name__ == "__main__":
    raise SystemExit(main())
