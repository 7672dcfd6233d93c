"""Bounded lifetimes for what run.py starts: nothing it starts may outlive it for long.

run.py passes two environment variables to every process and container it starts
(``utils/executors/base.py::HostSession.child_env``):

- ``INFERPERF_PARENT_PID``: the pid of the process that started this one, where
  that is run.py on the same machine (MODE local). When that parent dies, even by
  SIGKILL, the child is re-parented and ``getppid()`` changes: the child then
  stops itself and its process group.
- ``INFERPERF_MAX_SECONDS``: an upper bound on the child's whole life (the case
  timeout plus a grace period). Containers on remote hosts have no parent to
  watch; this bounds how long one can survive a controller killed by SIGKILL
  (the next run on that host also removes them: ``utils/executors/docker.py``).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Callable

PARENT_ENV = "INFERPERF_PARENT_PID"
MAX_SECONDS_ENV = "INFERPERF_MAX_SECONDS"
CHECK_INTERVAL_S = 0.5
# A lifetime bound outside this range is ignored (a typo must not kill a run at once).
_MIN_LIFETIME_S, _MAX_LIFETIME_S = 1.0, 30 * 24 * 3600.0


def _parent_pid() -> int | None:
    text = os.environ.get(PARENT_ENV, "")
    return int(text) if text.isdigit() and int(text) > 1 else None


def _max_seconds() -> float | None:
    try:
        value = float(os.environ.get(MAX_SECONDS_ENV, ""))
    except ValueError:
        return None
    return value if _MIN_LIFETIME_S <= value <= _MAX_LIFETIME_S else None


def expired_reason(started: float, parent: int | None, limit: float | None) -> str | None:
    """Why this process should stop now, or None."""
    if parent is not None and os.getppid() != parent:
        return f"its parent (pid {parent}) is gone"
    if limit is not None and time.monotonic() - started > limit:
        return f"it outlived {MAX_SECONDS_ENV}={limit:.0f}"
    return None


def watch(on_expiry: Callable[[str], None] | None = None) -> threading.Event | None:
    """Start a daemon thread that ends this process when its parent dies or its time is up.

    ``on_expiry(reason)`` runs first (for a last log line); then SIGTERM goes to
    this process's group when the process leads it (so DataLoader workers and
    compiler children stop too), else to this process alone. Returns None when
    neither variable is set (nothing to watch)."""
    parent, limit = _parent_pid(), _max_seconds()
    if parent is None and limit is None:
        return None
    started = time.monotonic()
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(CHECK_INTERVAL_S):
            reason = expired_reason(started, parent, limit)
            if reason is None:
                continue
            if on_expiry is not None:
                try:
                    on_expiry(reason)
                except Exception:
                    pass
            if os.getpgrp() == os.getpid():
                os.killpg(os.getpgrp(), signal.SIGTERM)
            else:
                os.kill(os.getpid(), signal.SIGTERM)
            return

    threading.Thread(target=loop, name="lifetime", daemon=True).start()
    return stop
