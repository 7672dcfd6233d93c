"""configs/host.yaml: FlagPerf's keys plus InferPerf's, validated before anything starts."""
from __future__ import annotations

import getpass
import ipaddress
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.errors import ConfigError
from common.yamlio import load_yaml_mapping

MODES = ("local", "docker")
LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR")
# FlagPerf keys that InferPerf accepts but has no use for.
IGNORED_KEYS = ("LOG_CALL_INFORMATION", "HOSTS_PORTS", "MASTER_PORT")
_HOSTNAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})$")
_CASE_KEY = re.compile(r"^([A-Za-z0-9_-]+):([A-Za-z0-9_.-]+)$")
_SHM = re.compile(r"^\d+(\.\d+)?[bkmgBKMG]?$")


@dataclass(frozen=True)
class Host:
    address: str
    port: int

    @property
    def label(self) -> str:
        return self.address if self.port == 22 else f"{self.address}:{self.port}"


@dataclass(frozen=True)
class CaseSpec:
    case: str
    framework: str
    data_dir: str

    @property
    def key(self) -> str:
        return f"{self.case}:{self.framework}"


@dataclass
class HostConfig:
    path: Path
    flagperf_path: Path
    log_path: Path
    vendor: str
    log_level: str
    mode: str
    hosts: list[Host]
    cases: list[CaseSpec]
    shm_size: str
    container_opt: str
    pip_source: str | None
    clear_caches: bool
    visible_device_env: str | None
    ssh_user: str
    ssh_key_file: str | None
    known_hosts: str
    trust_on_first_use: bool
    case_timeout: float
    monitor_interval: float
    base_image: str | None
    pip_wheels_dir: str | None
    ca_bundle: str | None
    remote_workdir: str
    log_call_information: bool = False
    extras: dict[str, Any] = field(default_factory=dict)
    # run.py --set KEY=VALUE: case config overrides passed to every case's pipeline.
    overrides: list[str] = field(default_factory=list)


def _err(path: Path, key: str, message: str) -> ConfigError:
    return ConfigError(f"{path}: key '{key}' {message}")


def _string(path: Path, data: dict, key: str, default: str | None = None, required: bool = False) -> str | None:
    value = data.get(key, default)
    if value is None:
        if required:
            raise _err(path, key, "is required")
        return None
    if not isinstance(value, (str, int)) or isinstance(value, bool) or str(value).strip() == "":
        raise _err(path, key, f"must be a non-empty string, got {value!r}")
    return str(value).strip()


def _bool(path: Path, data: dict, key: str, default: bool) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise _err(path, key, f"must be true or false, got {value!r}")
    return value


def _positive_number(path: Path, data: dict, key: str, default: float) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise _err(path, key, f"must be a positive number of seconds, got {value!r}")
    return float(value)


def _port(path: Path, key: str, value: Any) -> int:
    try:
        port = int(str(value))
    except ValueError:
        raise _err(path, key, f"must be a TCP port number, got {value!r}") from None
    if not 0 < port < 65536:
        raise _err(path, key, f"must be a TCP port number between 1 and 65535, got {value!r}")
    return port


def _hosts(path: Path, data: dict, default_port: int, mode: str) -> list[Host]:
    value = data.get("HOSTS", ["127.0.0.1"] if mode == "local" else None)
    if not isinstance(value, list) or not value:
        raise _err(path, "HOSTS", "must be a non-empty list of host names or IP addresses")
    hosts = []
    for entry in value:
        if not isinstance(entry, str):
            raise _err(path, "HOSTS", f"entry {entry!r} must be a string")
        address, _, port_text = entry.strip().rpartition(":") if entry.count(":") == 1 else (entry.strip(), "", "")
        port = _port(path, "HOSTS", port_text) if port_text else default_port
        try:
            ipaddress.ip_address(address)
        except ValueError:
            if not _HOSTNAME.match(address):
                raise _err(path, "HOSTS", f"entry {entry!r} is not a host name or IP address") from None
        host = Host(address, port)
        if host in hosts:
            raise _err(path, "HOSTS", f"lists {entry!r} twice")
        hosts.append(host)
    if mode == "local" and len(hosts) != 1:
        raise _err(path, "HOSTS", "must list exactly one host in MODE local (the pipeline runs on this machine)")
    return hosts


def _cases(path: Path, data: dict, mode: str, base: Path) -> list[CaseSpec]:
    value = data.get("CASES")
    if not isinstance(value, dict) or not value:
        raise _err(path, "CASES", 'must map "<case>:<framework>" to a data directory')
    cases = []
    for key, data_dir in value.items():
        match = _CASE_KEY.match(str(key))
        if not match:
            raise ConfigError(f'{path}: key CASES entry {key!r} must look like "<case>:<framework>", e.g. "resnet50:pytorch"')
        if not isinstance(data_dir, str) or not data_dir.strip():
            raise ConfigError(f"{path}: key CASES entry {key!r} must map to a data directory path, got {data_dir!r}")
        data_dir = data_dir.strip()
        if not data_dir.startswith("/"):
            if mode != "local":
                raise ConfigError(f"{path}: key CASES entry {key!r}: data dir {data_dir!r} must be an absolute path on the hosts")
            data_dir = str((base / data_dir).resolve())
        cases.append(CaseSpec(match.group(1), match.group(2), data_dir))
    return cases


def _container_opt(path: Path, data: dict) -> str:
    value = data.get("ACCE_CONTAINER_OPT", "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _err(path, "ACCE_CONTAINER_OPT", f"must be a string of docker run options, got {value!r}")
    return value.strip()


# Keys only FlagPerf's host.yaml carries (all about containers on remote hosts).
FLAGPERF_DOCKER_KEYS = ("ACCE_CONTAINER_OPT", "HOSTS_PORTS", "MASTER_PORT", "PIP_SOURCE", "ACCE_VISIBLE_DEVICE_ENV_NAME")


def _default_mode(data: dict) -> str:
    """MODE when host.yaml omits it. FlagPerf has no MODE and always runs containers over SSH:
    a file with any of FlagPerf's container keys means "docker"; otherwise "local"."""
    return "docker" if any(key in data for key in FLAGPERF_DOCKER_KEYS) else "local"


def load_host_config(path: str | Path, inference_dir: Path) -> HostConfig:
    """Parse and validate host.yaml; relative paths are relative to inference/."""
    path = Path(path)
    data = load_yaml_mapping(path)
    known = {
        "FLAGPERF_PATH", "FLAGPERF_LOG_PATH", "VENDOR", "FLAGPERF_LOG_LEVEL", "HOSTS", "SSH_PORT", "SHM_SIZE",
        "ACCE_CONTAINER_OPT", "PIP_SOURCE", "CLEAR_CACHES", "ACCE_VISIBLE_DEVICE_ENV_NAME", "CASES", "MODE",
        "SSH_USER", "SSH_KEY_FILE", "KNOWN_HOSTS", "TRUST_ON_FIRST_USE", "CASE_TIMEOUT", "MONITOR_INTERVAL",
        "BASE_IMAGE", "PIP_WHEELS_DIR", "CA_BUNDLE", "REMOTE_WORKDIR", *IGNORED_KEYS,
    }
    for key in data:
        if key not in known:
            raise ConfigError(f"{path}: unknown key '{key}'")
        if "PASSWORD" in key.upper() or "SECRET" in key.upper():
            raise ConfigError(f"{path}: key '{key}': secrets do not belong in host.yaml; use SSH keys or an agent")

    mode = _string(path, data, "MODE", _default_mode(data))
    if mode not in MODES:
        raise _err(path, "MODE", f"must be one of {', '.join(MODES)}, got {mode!r}")
    flagperf_path = Path(_string(path, data, "FLAGPERF_PATH", str(inference_dir)))
    if not flagperf_path.is_absolute():
        flagperf_path = (inference_dir / flagperf_path).resolve()
    if not (flagperf_path / "run_inference.py").is_file():
        raise _err(path, "FLAGPERF_PATH", f"{flagperf_path} is not an inference/ directory (no run_inference.py)")
    log_path = Path(_string(path, data, "FLAGPERF_LOG_PATH", "result"))
    if not log_path.is_absolute():
        log_path = flagperf_path / log_path
    vendor = _string(path, data, "VENDOR", required=True)
    if not re.fullmatch(r"[A-Za-z0-9_-]+", vendor):
        raise _err(path, "VENDOR", f"must be a vendor name, got {vendor!r}")
    if not (flagperf_path / "inference_engine" / vendor).is_dir():
        raise _err(path, "VENDOR", f"unknown vendor {vendor!r}: no inference_engine/{vendor}/")
    if mode == "docker" and not (flagperf_path / "docker_images" / vendor).is_dir():
        raise _err(path, "VENDOR", f"unknown vendor {vendor!r}: no docker_images/{vendor}/")
    level = _string(path, data, "FLAGPERF_LOG_LEVEL", "INFO").upper()
    if level not in LOG_LEVELS:
        raise _err(path, "FLAGPERF_LOG_LEVEL", f"must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    ssh_port = _port(path, "SSH_PORT", data.get("SSH_PORT", 22))
    shm = _string(path, data, "SHM_SIZE", "1G")
    if not _SHM.match(shm):
        raise _err(path, "SHM_SIZE", f"must be a size like 32G or 512m, got {shm!r}")
    key_file = _string(path, data, "SSH_KEY_FILE")
    if key_file is not None:
        key_file = os.path.expanduser(key_file)
        if mode == "docker" and not Path(key_file).is_file():
            raise _err(path, "SSH_KEY_FILE", f"{key_file} does not exist")
    known_hosts = os.path.expanduser(_string(path, data, "KNOWN_HOSTS", "~/.ssh/known_hosts"))
    trust = _bool(path, data, "TRUST_ON_FIRST_USE", False)
    if mode == "docker" and not trust and not Path(known_hosts).is_file():
        raise _err(
            path, "KNOWN_HOSTS",
            f"{known_hosts} does not exist: add the hosts' keys (ssh-keyscan, checked) or set TRUST_ON_FIRST_USE: true",
        )
    wheels = _string(path, data, "PIP_WHEELS_DIR")
    if wheels is not None and not Path(wheels).is_dir():
        raise _err(path, "PIP_WHEELS_DIR", f"{wheels} is not a directory")
    ca_bundle = _string(path, data, "CA_BUNDLE")
    if ca_bundle is not None and not Path(ca_bundle).is_file():
        raise _err(path, "CA_BUNDLE", f"{ca_bundle} is not a file")
    env_name = _string(path, data, "ACCE_VISIBLE_DEVICE_ENV_NAME")
    if env_name is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", env_name):
        raise _err(path, "ACCE_VISIBLE_DEVICE_ENV_NAME", f"must be an environment variable name, got {env_name!r}")
    remote_workdir = _string(path, data, "REMOTE_WORKDIR", "/var/tmp/inferperf")
    if not remote_workdir.startswith("/"):
        raise _err(path, "REMOTE_WORKDIR", f"must be an absolute path, got {remote_workdir!r}")
    log_call = data.get("LOG_CALL_INFORMATION", False)
    return HostConfig(
        path=path,
        flagperf_path=flagperf_path,
        log_path=log_path,
        vendor=vendor,
        log_level=level,
        mode=mode,
        hosts=_hosts(path, data, ssh_port, mode),
        cases=_cases(path, data, mode, flagperf_path),
        shm_size=shm,
        container_opt=_container_opt(path, data),
        pip_source=_string(path, data, "PIP_SOURCE"),
        clear_caches=_bool(path, data, "CLEAR_CACHES", False),
        visible_device_env=env_name,
        ssh_user=_string(path, data, "SSH_USER", getpass.getuser()),
        ssh_key_file=key_file,
        known_hosts=known_hosts,
        trust_on_first_use=trust,
        case_timeout=_positive_number(path, data, "CASE_TIMEOUT", 3600),
        monitor_interval=_positive_number(path, data, "MONITOR_INTERVAL", 1.0),
        base_image=_string(path, data, "BASE_IMAGE"),
        pip_wheels_dir=wheels,
        ca_bundle=ca_bundle,
        remote_workdir=remote_workdir.rstrip("/"),
        log_call_information=bool(log_call),
    )
