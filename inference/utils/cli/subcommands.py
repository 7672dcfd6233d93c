"""The subcommands that run no case: ``run.py compare`` (utils/results/compare.py), ``history`` and
``calibrate`` (utils/history/cli.py)."""

from __future__ import annotations

import signal
import sys

from utils.cli import INFERENCE_DIR
from utils.cli.stops import STOP_SIGNALS, restore


def subcommand(name: str, argv: list[str]) -> int:
    """``run.py compare`` (utils/results/compare.py), ``history`` and ``calibrate`` (utils/history/cli.py).
    A stop unwinds them (a store's transaction rolls back, files are written atomically): one line, its status."""
    stops: list[int] = []

    def stop(signum: int, _frame: object) -> None:
        stops.append(signum)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    try:
        if name == "compare":
            from utils.results.compare import main as compare_main

            return compare_main(argv, INFERENCE_DIR / "result")
        from utils.history import cli

        return cli.main(argv, INFERENCE_DIR) if name == "history" else cli.calibrate(argv, INFERENCE_DIR)
    except KeyboardInterrupt:
        signum = stops[0] if stops else signal.SIGINT
        sys.stderr.write(f"run.py {name}: stopped by {signal.Signals(signum).name}\n")
        return 128 + signum
    finally:
        restore(previous)
