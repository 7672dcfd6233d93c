"""Executors: one module per way of reaching a host (local, Docker over SSH or the local engine, Slurm, Slurm+Docker),
with the transports beside them; ``base.py`` holds the case lifecycle they share, ``registry.py``
the table from host.yaml's MODE to an executor class (and its facts).

``create`` is how run.py gets a session; it imports the executor's module only then.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from utils.executors.base import HostSession
    from utils.host_config import HostConfig


def session_class(config: HostConfig) -> type[HostSession]:
    """The executor class that runs ``config`` (``HostConfig.executor``), as a ``HostSession``."""
    from utils.executors.base import HostSession

    cls = config.executor
    if not issubclass(cls, HostSession):
        raise TypeError(f"executor {cls.__module__}.{cls.__qualname__} is not a HostSession (utils/executors/base.py)")
    return cls


def create(config: HostConfig, host_index: int, run_id: str, abort: threading.Event, run_dir: Path) -> HostSession:
    """The session that runs this run's cases on host ``host_index`` (``run_dir``: the run's folder here)."""
    return session_class(config).create(config, host_index, run_id, abort, run_dir)
