"""Executors: one module per way of reaching a host (local, Docker over SSH or the local engine, Slurm, Slurm+Docker),
with the transports beside them; ``base.py`` holds the case lifecycle they share, ``registry.py``
the table from host.yaml's MODE to an executor class (and its facts).

``create`` is how run.py gets a session; it imports the executor's module only then.
"""

from __future__ import annotations

import importlib
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from utils.executors.registry import DYNAMIC_IMPORTS, ExecutorFacts, executor_path, undeclared_facts

if TYPE_CHECKING:
    from utils.executors.base import HostSession
    from utils.host_config import HostConfig


def executor_class(path: str) -> type[ExecutorFacts]:
    """The executor class ``path`` (``"module:Class"``, an ``EXECUTORS`` line) names, imported now
    and checked (``checked``); TypeError for a path that names no executor."""
    module_name, _, class_name = path.partition(":")
    found = vars(importlib.import_module(DYNAMIC_IMPORTS["executor"].format(module=module_name))).get(class_name)
    if found is None:
        raise TypeError(f"{module_name} has no class {class_name}")
    return checked(found)


def mode_class(mode: str, values: dict[str, object] | None = None) -> type[ExecutorFacts]:
    """MODE's executor class, or the one its keys' ``values`` pick (``registry.executor_path``)."""
    return executor_class(executor_path(mode, values))


def checked(cls: object) -> type[ExecutorFacts]:
    """``cls`` if it is an executor that declares every fact in its own class body; else TypeError
    naming the class and what it lacks."""
    if not isinstance(cls, type) or not issubclass(cls, ExecutorFacts):
        raise TypeError(f"{cls!r} is not an executor (a subclass of utils/executors/base.py::HostSession)")
    missing = [fact for fact in ExecutorFacts.FACTS if fact not in vars(cls)]
    if missing:
        raise TypeError(undeclared_facts(f"{cls.__module__}.{cls.__qualname__}", missing))
    return cls


def session_class(config: HostConfig) -> type[HostSession]:
    """The executor class that runs ``config`` (``HostConfig.executor``'s path), as a ``HostSession``."""
    from utils.executors.base import HostSession

    cls = executor_class(config.executor.path)
    if not issubclass(cls, HostSession):
        raise TypeError(f"executor {cls.__module__}.{cls.__qualname__} is not a HostSession (utils/executors/base.py)")
    return cls


def create(config: HostConfig, host_index: int, run_id: str, abort: threading.Event, run_dir: Path) -> HostSession:
    """The session that runs this run's cases on host ``host_index`` (``run_dir``: the run's folder here)."""
    return session_class(config).create(config, host_index, run_id, abort, run_dir)
