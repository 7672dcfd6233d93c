"""Container options: ACCE_CONTAINER_OPT mapped onto Docker SDK arguments, names, labels and their owner.

Privilege comes only from the vendor: ``docker_images/<vendor>/container.yaml``
may set ``privileged: true`` (and ``cap_add``/``devices``); host.yaml cannot.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
from pathlib import Path
from typing import Any

from docker.types import DeviceRequest, Ulimit

from common.errors import ConfigError
from common.yamlio import load_yaml_mapping
from utils.executors.base import slug

LABEL_RUN = "inferperf.run"
LABEL_ROLE = "inferperf.role"
LABEL_CONTROLLER = "inferperf.controller"  # "<hostname>:<pid>" of the run.py that started it
VENDOR_CONTAINER_KEYS = {"privileged", "cap_add", "devices", "environment", "ipc_mode"}


def _gpus(value: str, key: str) -> DeviceRequest:
    value = value.strip("\"'")
    if value == "all":
        return DeviceRequest(count=-1, capabilities=[["gpu"]])
    if value.isdigit():
        return DeviceRequest(count=int(value), capabilities=[["gpu"]])
    match = re.fullmatch(r"device=([\w,.-]+)", value)
    if match:
        return DeviceRequest(device_ids=match.group(1).split(","), capabilities=[["gpu"]])
    raise ConfigError(f"{key}: --gpus {value!r} must be all, a count, or device=ID[,ID]")


def parse_container_options(text: str, source: str) -> dict[str, Any]:
    """Translate docker-run style options into ``containers.run`` keyword arguments."""
    key = f"{source}: key 'ACCE_CONTAINER_OPT'"
    try:
        tokens = shlex.split(text or "")
    except ValueError as exc:
        raise ConfigError(f"{key}: {exc}") from None
    kwargs: dict[str, Any] = {}
    i = 0

    def value_of(option: str) -> str:
        nonlocal i
        if "=" in tokens[i] and tokens[i].startswith("--"):
            return tokens[i].split("=", 1)[1]
        if i + 1 >= len(tokens):
            raise ConfigError(f"{key}: option {option} needs a value")
        i += 1
        return tokens[i]

    while i < len(tokens):
        token = tokens[i]
        name = token.split("=", 1)[0] if token.startswith("--") else token
        if name == "--gpus":
            kwargs.setdefault("device_requests", []).append(_gpus(value_of(name), key))
        elif name == "--device":
            kwargs.setdefault("devices", []).append(value_of(name))
        elif name in ("-e", "--env"):
            env = value_of(name)
            if "=" not in env:
                raise ConfigError(f"{key}: {name} {env!r} must be NAME=VALUE")
            k, v = env.split("=", 1)
            kwargs.setdefault("environment", {})[k] = v
        elif name == "--ipc":
            kwargs["ipc_mode"] = value_of(name)
        elif name == "--cap-add":
            kwargs.setdefault("cap_add", []).append(value_of(name))
        elif name == "--group-add":
            kwargs.setdefault("group_add", []).append(value_of(name))
        elif name == "--runtime":
            kwargs["runtime"] = value_of(name)
        elif name == "--ulimit":
            spec = value_of(name)
            match = re.fullmatch(r"(\w+)=(-?\d+)(?::(-?\d+))?", spec)
            if not match:
                raise ConfigError(f"{key}: --ulimit {spec!r} must be NAME=SOFT[:HARD]")
            soft = int(match.group(2))
            kwargs.setdefault("ulimits", []).append(
                Ulimit(name=match.group(1), soft=soft, hard=int(match.group(3) or soft))
            )
        elif name == "--privileged":
            raise ConfigError(
                f"{key}: --privileged is not allowed from host.yaml; a vendor that needs it sets privileged: true in "
                "docker_images/<vendor>/container.yaml"
            )
        else:
            raise ConfigError(f"{key}: option {token!r} cannot be mapped to a Docker SDK argument")
        i += 1
    return kwargs


def vendor_container_options(perf_dir: Path, vendor: str) -> dict[str, Any]:
    path = perf_dir / "docker_images" / vendor / "container.yaml"
    data = load_yaml_mapping(path, required=False)
    for key in data:
        if key not in VENDOR_CONTAINER_KEYS:
            raise ConfigError(f"{path}: unknown key '{key}' (allowed: {', '.join(sorted(VENDOR_CONTAINER_KEYS))})")
    if "privileged" in data and not isinstance(data["privileged"], bool):
        raise ConfigError(f"{path}: key 'privileged' must be true or false")
    return data


def merge_options(host_opts: dict[str, Any], vendor_opts: dict[str, Any]) -> dict[str, Any]:
    merged = dict(host_opts)
    for key, value in vendor_opts.items():
        if isinstance(value, list):
            merged[key] = list(merged.get(key, [])) + value
        elif isinstance(value, dict):
            merged[key] = {**merged.get(key, {}), **value}
        else:
            merged[key] = value
    merged.setdefault("privileged", False)
    return merged


def controller_id() -> str:
    """Who started a container (its LABEL_CONTROLLER): this machine and run.py's pid."""
    return f"{socket.gethostname()}:{os.getpid()}"


def controller_gone(owner: str) -> bool:
    """A LABEL_CONTROLLER value naming a run.py on this machine that is no longer running."""
    name, _, pid = owner.rpartition(":")
    if name != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def container_name(run_id: str, host_label: str, case_key: str, role: str) -> str:
    """Unique per run, host, case and role, so runs and co-located 'hosts' never collide."""
    return f"inferperf-{slug(run_id)}-{slug(host_label)}-{slug(case_key)}-{role}"
