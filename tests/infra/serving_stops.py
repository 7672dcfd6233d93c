"""Stop signals at many moments of a serving run, in one process: ``python -m tests.infra.serving_stops
OUT TRIALS``. Each trial runs tools/serving/cli.py's ``main`` against a loopback server that answers
at once (16 streams, so the event loop is always inside a send, a read or a callback), and a thread
sends this process a real SIGINT or SIGTERM (in turn) a different number of milliseconds after the
trial's first request. Writes ``OUT/trials.jsonl``, one line per trial: the signal, ``main``'s exit
status and whether the trial's output folder holds anything. A trial whose stop is lost ends with its
``REQUESTS`` requests done (seconds), written. What the run printed to stderr is the caller's to read:
a stop handled well prints only its one line."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

STEP_MS = 7  # trial k's signal comes k * STEP_MS ms after its first request
REQUESTS = 1000  # a trial's requests: seconds of work, so that a lost stop ends it, written, soon


def _signal_later(server, before: int, delay_s: float, sig: int) -> threading.Thread:
    def send() -> None:
        while server.requests == before:
            time.sleep(0.001)
        time.sleep(delay_s)
        os.kill(os.getpid(), sig)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def main(out: Path, trials: int) -> None:
    from tools.serving.cli import main as serving_main
    from tools.serving.loopback import LoopbackServer, steady

    with LoopbackServer(steady(0.0, 1.0), model="m") as server:
        for k in range(trials):
            sig = (signal.SIGINT, signal.SIGTERM)[k % 2]
            folder = out / f"trial{k}"
            sender = _signal_later(server, server.requests, k * STEP_MS / 1000, sig)
            argv = ["--endpoint", server.url, "--served-model", "m", "--num-requests", str(REQUESTS)]
            argv += ["--concurrency", "16", "--warmup", "0", "--output-len", "4", "--output-dir", str(folder)]
            code = serving_main(argv, out / "results")
            sender.join()
            written = folder.exists() and any(folder.iterdir())
            with open(out / "trials.jsonl", "a", encoding="utf-8") as trials_file:
                trials_file.write(
                    json.dumps({"signal": signal.Signals(sig).name, "code": code, "written": written}) + "\n"
                )


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
