"""The executor registry: host.yaml's MODE names one line of ``EXECUTORS``, and everything else
asks that line's class its facts (``ExecutorFacts``), never the MODE's name.

A new executor is one module in utils/executors/ plus one line here (docs/architecture.md, "An
executor"). This module imports nothing of the project's: utils/host_config.py checks host.yaml
with it, and an executor's module is imported only when its MODE is asked for (MODE local never
loads the Docker SDK).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar


class ExecutorFacts:
    """What run.py and utils/host_config.py ask of an executor instead of its MODE's name: the
    base of ``utils/executors/base.py::HostSession``. Every class the registry hands out declares
    each fact in its own class body (``checked``): one inherited from another executor would
    silently be that executor's (Slurm's sessions are a local and a Docker one underneath)."""

    FACTS: ClassVar[tuple[str, ...]] = ("in_container", "uses_ssh", "runs_here")
    # The pipeline runs in the vendor's image (docker_images/<vendor>/<framework>/Dockerfile, which
    # must exist): the image installs the cases' and backends' packages, so they are not checked here.
    in_container: ClassVar[bool]
    # Hosts are reached over SSH (SSH_KEY_FILE and KNOWN_HOSTS must exist), except one that is this
    # machine's Docker engine (utils/host_config.py::is_local_engine: data paths are then this machine's).
    uses_ssh: ClassVar[bool]
    # The pipeline runs on this machine in run.py's own Python: exactly one host (HOSTS defaults to
    # 127.0.0.1), relative paths are inference/'s, no login name is needed, and the device, the base
    # cases' memory and the engine's own preflight are checked here before the run.
    runs_here: ClassVar[bool]


@dataclass(frozen=True)
class Executor:
    """One line of the registry: where MODE's class is, the host.yaml keys only that MODE accepts
    (each also a key of common/host_keys.py; another MODE refuses it unless left at its default),
    and the values of those keys that pick another class: ``(key, value, "module:Class")``."""

    path: str  # "package.module:Class", imported when first asked for
    keys: tuple[str, ...] = ()
    picks: tuple[tuple[str, object, str], ...] = ()


# MODE -> its executor; error messages list the modes in this order.
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
        picks=(("SLURM_CONTAINER", "docker", "utils.executors.slurm_docker:SlurmDockerSession"),),
    ),
}


def modes() -> tuple[str, ...]:
    """The valid values of host.yaml's MODE."""
    return tuple(EXECUTORS)


def key_owner(key: str) -> str | None:
    """The MODE whose executor alone accepts this host.yaml key; None for a key of every MODE."""
    return next((mode for mode, executor in EXECUTORS.items() if key in executor.keys), None)


def executor_class(mode: str, values: Mapping[str, object] | None = None) -> type[ExecutorFacts]:
    """MODE's executor class, or the one its keys' ``values`` (host.yaml key -> checked value) pick;
    imported now, its facts checked. KeyError for a MODE not in EXECUTORS (host.yaml checks MODE
    first), TypeError for a line that names no executor."""
    executor = EXECUTORS[mode]
    given = values or {}
    path = next((path for key, value, path in executor.picks if key in given and given[key] == value), executor.path)
    module_name, _, class_name = path.partition(":")
    found = vars(importlib.import_module(module_name)).get(class_name)
    if found is None:
        raise TypeError(f"EXECUTORS[{mode!r}]: {module_name} has no class {class_name}")
    return checked(found)


def checked(cls: object) -> type[ExecutorFacts]:
    """``cls`` if it is an executor that declares every fact in its own class body; else TypeError
    naming the class and what it lacks."""
    if not isinstance(cls, type) or not issubclass(cls, ExecutorFacts):
        raise TypeError(f"{cls!r} is not an executor (a subclass of utils/executors/base.py::HostSession)")
    missing = [fact for fact in ExecutorFacts.FACTS if fact not in vars(cls)]
    if missing:
        raise TypeError(
            f"executor {cls.__module__}.{cls.__qualname__} does not declare {', '.join(missing)} (ExecutorFacts.FACTS)"
        )
    return cls
