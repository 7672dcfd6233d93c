"""The stop signals of a run (Ctrl-C, SIGTERM, SIGHUP) once run.py's start-up checks are done: held
while the run folder is opened, raised where the hosts' threads are waited on, ignored (with one
notice) while the run is already stopping."""

from __future__ import annotations

import signal
import threading

from loguru import logger

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

HELD: list[int] = []  # stop signals received between the run folder's opening and run_hosts


def hold_stop(signum: int, _frame: object) -> None:
    """A stop while the run is being opened: remembered, raised once run_hosts can handle it. (Blocking the
    signals would not do: a signal blocked in the main thread is delivered to another thread, and Python
    runs its handler in the main thread all the same.)"""
    HELD.append(signum)


def raise_keyboard_interrupt(signum, _frame) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def ignore_while_stopping(signum, _frame) -> None:
    # A second Ctrl-C must not cut the cleanup short: containers, monitors and the summary come first.
    # Its notice goes out from a thread of its own: the signal may land while this thread is inside the
    # logger, which is not re-entrant (loguru refuses the line and prints its own traceback, as when a
    # second Ctrl-C comes while the first one's "interrupted" line is being written).
    notice = f"{signal.Signals(signum).name} again: already stopping, cleanup and summary follow"
    threading.Thread(target=logger.warning, args=(notice,), name="stop-notice").start()


def restore(previous: dict) -> None:
    """The handlers that were in place before run.py installed its own."""
    for sig, handler in previous.items():
        signal.signal(sig, handler)
