"""Executors: one module per way of reaching a host (local, Docker over SSH or the local engine, Slurm, Slurm+Docker),
with the transports beside them; ``base.py`` holds the case lifecycle they share.

``EXECUTORS`` is the registry: host.yaml's MODE names one line of it, and everything else
asks the line's class (its facts: ``base.py::HostSession.FACTS``), never the MODE's name.
A new executor is one module here plus one line in ``EXECUTORS`` (docs/architecture.md).
This module imports no executor until one is asked for: MODE local never loads the Docker SDK.
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from utils.executors.base import HostSession
    from utils.host_config import HostConfig


@dataclass(frozen=True)
class Executor:
    """One line of the registry: where MODE's class is, and the host.yaml keys only that MODE accepts
    (each is also a key of common/host_keys.py; in another MODE it is refused unless left at its default)."""

    path: str  # "package.module:Class", imported when first asked for
    keys: tuple[str, ...] = ()


# MODE -> its executor; the order is the order error messages list the modes in.
EXECUTORS: dict[str, Executor] = {
    "local": Executor("utils.executors.local:LocalSession"),
    "docker": Executor("utils.executors.docker:DockerSession", keys=("DOCKER_LOCAL",)),
    "slurm": Executor(
        "utils.executors.slurm:SlurmSession",
        keys=(
            "SLURM_SHARED_DIR",
            "SLURM_PARTITION",
            "SLURM_ACCOUNT",
            "SLURM_GPUS_PER_NODE",
            "SLURM_PENDING_TIMEOUT",
            "SLURM_PYTHON",
            "SLURM_CONTAINER",
        ),
    ),
}


def modes() -> tuple[str, ...]:
    """The valid values of host.yaml's MODE."""
    return tuple(EXECUTORS)


def key_owner(key: str) -> str | None:
    """The MODE whose executor alone accepts this host.yaml key; None for a key of every MODE."""
    return next((mode for mode, executor in EXECUTORS.items() if key in executor.keys), None)


def executor_class(mode: str) -> type[HostSession]:
    """MODE's executor class, imported now, with its facts checked (``checked``). Raises KeyError for
    a MODE not in EXECUTORS (host.yaml's check of MODE comes first), TypeError for a broken line."""
    module_name, _, class_name = EXECUTORS[mode].path.partition(":")
    found = vars(importlib.import_module(module_name)).get(class_name)
    if found is None:
        raise TypeError(f"EXECUTORS[{mode!r}]: {module_name} has no class {class_name}")
    return checked(found)


def session_class(config: HostConfig) -> type[HostSession]:
    """The class that runs this config: MODE's, or the subclass it picks for the config
    (``HostSession.for_config``: MODE slurm with SLURM_CONTAINER: docker)."""
    return checked(executor_class(config.mode).for_config(config))


def create(config: HostConfig, host_index: int, run_id: str, abort: threading.Event, run_dir: Path) -> HostSession:
    """The session that runs this run's cases on host ``host_index`` (``run_dir``: the run's folder here)."""
    return session_class(config).create(config, host_index, run_id, abort, run_dir)


def checked(cls: object) -> type[HostSession]:
    """``cls`` if it is an executor that declares every fact in its own class body (a fact inherited
    from another executor would silently be that executor's: Slurm's sessions are local and Docker
    ones underneath); else TypeError naming the class and what it lacks."""
    from utils.executors.base import HostSession

    if not isinstance(cls, type) or not issubclass(cls, HostSession):
        raise TypeError(f"{cls!r} is not a HostSession subclass (utils/executors/base.py)")
    missing = [fact for fact in HostSession.FACTS if fact not in vars(cls)]
    if missing:
        raise TypeError(f"executor {cls.__module__}.{cls.__qualname__} does not declare {', '.join(missing)} (HostSession.FACTS)")
    return cls
