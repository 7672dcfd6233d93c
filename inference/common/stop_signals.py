"""A stop signal that waits for the import under way to end: both entry points' handler core
(run.py's start-up checks, run_inference.py's whole run).

A stop signal's handler raises, and the exception surfaces wherever the main thread is. Inside an
import that can be inside an extension module's own initialisation, where C or C++ code meets it:

- onnxruntime's pybind11 module importing numpy prints the KeyboardInterrupt's traceback itself
  and turns it into an ImportError;
- torch's import (``import torch`` in a case's data loader) can abort run_inference.py with SIGABRT:
  exit -6 instead of 130, and no failure.json.

So a stop that lands inside an import is deferred: a SIGALRM, handled by the same ``handle``, looks
again every ``IMPORT_RECHECK_S`` until no import is under way, and then stops. An import that hangs
is still cut short: after ``IMPORT_GRACE_S``, or at a second stop signal.

A stop that lands inside the logger is deferred the same way, until the log call has returned.
loguru's handler takes a lock (``with self._lock``), and a stop raised after the lock is taken and
before its ``with`` block is entered leaves it held for good: the report of that very stop would
then wait on it forever (docs/decisions.md, 2026-11-28).

A stop raised where Python cannot pass it on is not lost either: inside a ``__del__`` (numpy's
``NpzFile.__del__``, run when a case's data file is collected) Python hands the exception to
``sys.unraisablehook``, whose default prints "Exception ignored" and lets the run go on to exit 0.
The hook installed here takes a stop it is given back, says nothing, and raises it again
``IMPORT_RECHECK_S`` later, from wherever the main thread is then.

The look-again timer's SIGALRM is unblocked when the handler is installed: a process inherits its
launcher's signal mask, and a launcher that blocks SIGALRM (a test harness, a supervisor) would
otherwise leave the stop waiting for the import's own end, however long that is.

``end()`` closes the deferral: no look pending, SIGALRM's handler and the unraisable hook from
before restored.

A stop that lands while an event loop runs is not raised where the signal landed either: there it can
be inside a transport's ``sock.send``, a callback, a weakref's callback or a library's own cleanup,
and asyncio, aiohttp or Python turn it into a logged traceback, a "Task exception was never
retrieved", or swallow it, and the run goes on; inside the loop's construction it leaves a half-made
loop whose finaliser fails. A stop handler calls ``raise_stop(exc)``: inside a ``LoopGuard``'s block
(the loop made, run and closed) the stop is kept, the loop's main task is cancelled at the loop's next
turn and given ``grace_s`` to unwind, and the guard's owner raises ``exc`` after the block.

Imports only built-in modules (``_signal``, ``sys``, ``time``): run_inference.py imports it before
anything else, to own the stop signals from its first lines.
"""

from __future__ import annotations

import _signal
import sys
import time

IMPORT_RECHECK_S = 0.01  # how often a stop that came during an import looks again for the import's end
# How long a stop waits for an import to end: well above ``import torch``'s time on a loaded machine
# (its measurements: docs/decisions.md, 2026-11-28), and under the host's SIGTERM-to-SIGKILL grace
# (utils/executors: local STOP_GRACE_S, a container's STOP_TIMEOUT_S, both 10 s), so that a hung
# import is still cut short with its failure.json.
IMPORT_GRACE_S = 8.0


LOGGER_FILES = "/loguru/"  # a frame of the logger's own code (its handlers hold a lock: module docstring)


def inside_a_deferred_region(frame) -> bool:
    """Whether a stop must wait here: an import, or a log call (loguru's frames) is on the stack."""
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith("<frozen importlib") or LOGGER_FILES in name:
            return True
        frame = frame.f_back
    return False


class ImportSafeStop:
    """The handler of the stop signals (install ``handle`` for each): record the signal, then call
    ``stop(signum)`` with the first one received, which raises; outside an import or a log call at
    once, inside one once it has ended (module docstring). ``received``: the signals in order (a list the caller
    may pass, to share it)."""

    def __init__(self, stop, received: list[int] | None = None) -> None:
        self.stop = stop
        self.received: list[int] = [] if received is None else received
        self.first_at = time.monotonic()  # reset at the first signal this handler records
        self.deferring = True
        self.alarm = _signal.signal(_signal.SIGALRM, self.handle)
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, {_signal.SIGALRM})  # the look-again timer (docstring)
        self.unraisable = sys.unraisablehook
        sys.unraisablehook = self.swallowed

    def handle(self, signum: int, frame) -> None:
        if signum != _signal.SIGALRM:
            self.received.append(signum)
            if len(self.received) == 1:
                self.first_at = time.monotonic()
        if not self.received:
            return
        if (
            self.deferring
            and len(self.received) == 1
            and time.monotonic() - self.first_at < IMPORT_GRACE_S
            and inside_a_deferred_region(frame)
        ):
            _signal.setitimer(_signal.ITIMER_REAL, IMPORT_RECHECK_S)
            return
        _signal.setitimer(_signal.ITIMER_REAL, 0)  # no deferred look may fire once the stop is raised
        self.stop(self.received[0])

    def swallowed(self, unraisable) -> None:
        """``sys.unraisablehook``: a stop that Python could not raise (a ``__del__``) is raised again
        shortly; anything else goes to the hook from before."""
        if self.deferring and self.received and isinstance(unraisable.exc_value, KeyboardInterrupt):
            _signal.setitimer(_signal.ITIMER_REAL, IMPORT_RECHECK_S)
            return
        self.unraisable(unraisable)

    def end(self) -> None:
        """No deferral any more: a pending look cancelled, SIGALRM's handler and the unraisable hook
        from before restored."""
        if self.deferring:
            self.deferring = False
            _signal.setitimer(_signal.ITIMER_REAL, 0)
            _signal.signal(_signal.SIGALRM, self.alarm)
            if sys.unraisablehook == self.swallowed:
                sys.unraisablehook = self.unraisable


class LoopGuard:
    """A block that runs an event loop, guarded against a stop raised inside it (module docstring). A stop
    that lands in the block is kept (``stop``, the first one) and raised by the owner after it. While
    the loop is watched (``watch``, until ``disarm``), the stop also cancels the task at the loop's next
    turn, and the loop is stopped ``grace_s`` later if the task has not ended by then. Duck-typed
    (a loop's ``is_closed``, ``call_soon_threadsafe``, ``call_later``, ``stop``; a task's ``done``,
    ``cancel``): this module imports no asyncio."""

    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self.stop: BaseException | None = None  # the first stop that landed in the block
        self.loop = self.task = self.timer = None  # the loop and task watched; the loop's stop after grace_s

    def __enter__(self) -> "LoopGuard":
        _GUARDS.append(self)
        return self

    def __exit__(self, *_exc) -> None:
        try:
            self.disarm()
        finally:
            _GUARDS.remove(self)

    def watch(self, loop, task) -> None:
        """From now on a stop cancels ``task``; one that came already, at the loop's first turn: the task
        runs to its first ``await`` (a coroutine handed to it is then awaited, not left unawaited) and
        is cancelled there."""
        self.loop, self.task = loop, task
        if self.stop is not None:
            loop.call_soon_threadsafe(self._cancel)

    def divert(self, exc: BaseException) -> None:
        """Keep ``exc`` (the first only: the unwind is bounded already) and cancel the watched task."""
        if self.stop is None:
            self.stop = exc
            loop = self.loop
            if loop is not None and not loop.is_closed():
                loop.call_soon_threadsafe(self._cancel)

    def _cancel(self) -> None:
        if self.loop is None or self.timer is not None or self.task.done():
            return
        self.task.cancel()
        self.timer = self.loop.call_later(self.grace_s, self.loop.stop)

    def disarm(self) -> None:
        """The task's run is over: nothing cancelled or stopped any more; a later stop is only kept."""
        self.loop = None
        if self.timer is not None:
            self.timer.cancel()


_GUARDS: list[LoopGuard] = []  # the guards open now, innermost last


def raise_stop(exc: BaseException) -> None:
    """A stop handler's end: raise ``exc`` here, or, inside a ``LoopGuard``'s block, hand it to the guard,
    whose owner raises it after the block (module docstring)."""
    if _GUARDS:
        _GUARDS[-1].divert(exc)
        return
    raise exc
