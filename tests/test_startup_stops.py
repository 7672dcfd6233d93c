"""A stop at any moment of run.py's start-up ends in one line and its exit status (issue 42, item 8).

run.py is started for real on the digits case and sent a real SIGINT or SIGTERM after a range of
delays that cover every window of its start-up: run.py's imports (before main() has any handler;
the interpreter's own start-up too: the test starts run.py with the stop signals blocked, and
run.py unblocks them once its first handler is in place), the start-up checks
(common/stop_signals.py's deferring handler), the opening of the run folder and its log, the plan,
the hosts' sessions, and the first case. Whatever the window, the
process prints no traceback, leaves either no run folder or a finished one (summary.json written:
the cases that had started are "interrupted"), and ends with 128 + the signal before the run is
opened, 130 (run.py's status for an interrupted run) after.

The delays are wall-clock offsets, but nothing is judged on time: whichever window a signal lands
in, the same three things must hold.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import copy_inference_tree
from tests.infra.run_inference import ended
from tests.infra.run_py import host_yaml
from tests.measure_config import CHEAP_SET

# run.py is started with the stop signals blocked, as a launcher may start it: a stop sent before
# the interpreter has reached run.py's first line waits there for run.py's handler, so even the
# earliest offsets test run.py's handling, however slowly the interpreter starts on a busy machine.
DELAYS_S = (0.0, 0.05, 0.15, 0.2, 0.3, 0.4, 0.5, 0.65, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.5)
STOPS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def _block_stops() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    return copy_inference_tree(tmp_path_factory.mktemp("startup") / "inference")


@pytest.mark.parametrize("delay", DELAYS_S)
def test_a_stop_at_any_moment_of_start_up_is_one_line_and_its_status(tree, digits_data_dir, tmp_path, delay):
    sig = signal.SIGINT if DELAYS_S.index(delay) % 2 == 0 else signal.SIGTERM
    config = host_yaml(tmp_path, tree, CASES={"digits:pytorch": str(digits_data_dir)})
    proc = subprocess.Popen(
        [sys.executable, "run.py", "--config", str(config), *CHEAP_SET],
        cwd=tree,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_block_stops,
    )
    time.sleep(delay)
    proc.send_signal(sig)
    out, err = ended(proc)
    text = out + err
    assert "Traceback" not in text, text[-3000:]
    runs = list((tmp_path / "result").glob("run*")) if (tmp_path / "result").is_dir() else []
    assert all((run / "summary.json").is_file() for run in runs), (runs, text[-3000:])
    # before the run is opened: 128 + the signal; once it is, run.py's documented 130 for any stop
    assert proc.returncode == (130 if runs else 128 + sig), text[-3000:]
