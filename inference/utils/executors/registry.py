"""The executor registry: host.yaml's MODE names one line of ``EXECUTORS``, and everything else
asks that line's class its facts (``ExecutorFacts``), never the MODE's name.

A new executor is one module in utils/executors/ plus one line here (docs/architecture.md, "An
executor"). This module imports nothing of the project's and loads no executor: utils/host_config.py
checks host.yaml with the facts read from an executor's source (``executor_facts``), and an
executor's module is imported only when a session is made (utils/executors/__init__.py; MODE local
never loads the Docker SDK).
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
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

    path: str  # "module:Class", a module of utils/executors/ (DYNAMIC_IMPORTS), imported when first asked for
    keys: tuple[str, ...] = ()
    picks: tuple[tuple[str, object, str], ...] = ()


# Where an executor's module is: loaded by name from this pattern only (utils/executors/__init__.py),
# so the import-circle test (tests/infra/imports.py) follows the load to every module here.
DYNAMIC_IMPORTS = {"executor": "utils.executors.{module}"}

# MODE -> its executor; error messages list the modes in this order.
EXECUTORS: dict[str, Executor] = {
    "local": Executor("local:LocalSession"),
    "docker": Executor("docker:DockerSession", keys=("DOCKER_LOCAL",)),
    "slurm": Executor(
        "slurm:SlurmSession",
        keys=(
            "SLURM_SHARED_DIR",
            "SLURM_PARTITION",
            "SLURM_ACCOUNT",
            "SLURM_GPUS_PER_NODE",
            "SLURM_PENDING_TIMEOUT",
            "SLURM_PYTHON",
            "SLURM_CONTAINER",
        ),
        picks=(("SLURM_CONTAINER", "docker", "slurm_docker:SlurmDockerSession"),),
    ),
}


def modes() -> tuple[str, ...]:
    """The valid values of host.yaml's MODE."""
    return tuple(EXECUTORS)


def key_owner(key: str) -> str | None:
    """The MODE whose executor alone accepts this host.yaml key; None for a key of every MODE."""
    return next((mode for mode, executor in EXECUTORS.items() if key in executor.keys), None)


def executor_path(mode: str, values: Mapping[str, object] | None = None) -> str:
    """MODE's ``"module:Class"``, or the one its keys' ``values`` (host.yaml key -> checked value)
    pick. KeyError for a MODE not in EXECUTORS (host.yaml checks MODE first)."""
    executor = EXECUTORS[mode]
    given = values or {}
    return next((path for key, value, path in executor.picks if key in given and given[key] == value), executor.path)


@dataclass(frozen=True)
class DeclaredFacts:
    """An executor's facts as its class body declares them, read from its module's source without
    importing it: the host side checks host.yaml with these, and the executor's module, which
    imports the host config, is loaded only when a session is made (utils/executors/__init__.py),
    so no load by name comes back to the host config in a circle."""

    path: str  # "module:Class", a module of utils/executors/ (DYNAMIC_IMPORTS)
    in_container: bool
    uses_ssh: bool
    runs_here: bool

    @property
    def class_name(self) -> str:
        return self.path.partition(":")[2]


def undeclared_facts(executor: str, missing: list[str]) -> str:
    """The one line for an executor class whose own body lacks ``missing`` facts."""
    return f"executor {executor} does not declare {', '.join(missing)} (ExecutorFacts.FACTS)"


def module_name(path: str) -> str:
    """The importable name of ``path``'s module (``"module:Class"``)."""
    return DYNAMIC_IMPORTS["executor"].format(module=path.partition(":")[0])


def executor_facts(mode: str, values: Mapping[str, object] | None = None) -> DeclaredFacts:
    """The facts of MODE's executor class (or the one its keys pick), read from the class body in its
    module's source. TypeError naming the class for a line that names no executor or a fact the
    class body does not declare as True or False (one inherited from another executor would
    silently be that executor's)."""
    path = executor_path(mode, values)
    name, _, class_name = path.partition(":")
    spec = importlib.util.find_spec(module_name(path))
    if spec is None or spec.origin is None:
        raise TypeError(f"EXECUTORS[{mode!r}]: no module {name}")
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    body = next((n.body for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
    if body is None:
        raise TypeError(f"EXECUTORS[{mode!r}]: {name} has no class {class_name}")
    facts = {
        target.id: statement.value.value
        for statement in body
        if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Constant)
        for target in statement.targets
        if isinstance(target, ast.Name) and isinstance(statement.value.value, bool)
    }
    missing = [fact for fact in ExecutorFacts.FACTS if fact not in facts]
    if missing:
        raise TypeError(undeclared_facts(f"{name}.{class_name}", missing))
    return DeclaredFacts(path, **{fact: facts[fact] for fact in ExecutorFacts.FACTS})
