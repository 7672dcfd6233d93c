"""loguru's per-thread lock mark after a stop signal, for both entry points (run.py, run_inference.py)."""

from __future__ import annotations

from loguru import logger


def release_after_signal() -> None:
    """Clear a handler's lock mark that a stop signal left behind on this thread.

    loguru (0.7.3, ``Handler._protected_lock``) marks its lock as held on the thread before it enters
    the ``try`` that unmarks it. A stop signal raised in between (run_inference.py's and run.py's handlers raise)
    leaves the mark set, and every later line on that thread fails with "Could not acquire internal
    lock" (a Ctrl-C at start-up then exits 1 with that traceback instead of 130). Called where
    a stop is reported, on the main thread, with signals ignored and nothing logging on that thread, where
    a set mark can only be stale. The mark is per thread (a ``threading.local``): other threads' lines,
    run.py's host workers', are left alone. A loguru without the mark makes this a no-op."""
    core = getattr(logger, "_core", None)
    for handler in dict(getattr(core, "handlers", None) or {}).values():
        mark = getattr(handler, "_lock_acquired", None)
        if mark is not None and getattr(mark, "acquired", False):
            mark.acquired = False
