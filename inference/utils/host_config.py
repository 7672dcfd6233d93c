"""configs/host.yaml: FlagPerf's keys plus InferPerf's, validated before anything starts.

``HostConfig`` validates itself, as tools/config.py's ``CaseConfig`` does: every
field has one check in ``_CHECKS`` (run by ``__post_init__``, in order, so a
check may rely on the fields checked before it), and ``HostConfig.from_yaml``
(``load_host_config``) only maps host.yaml's keys onto the fields. Every value
that reaches a resource is bounded: lengths of names and paths before the file
system sees them, counts of hosts and cases, the timeout, the monitor interval,
the shared-memory size. A failure is one ConfigError naming the file and key.
"""

from __future__ import annotations

import getpass
import ipaddress
import json
import math
import os
import re
import sys
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import Any, Callable

from common.errors import ConfigError, shown
from common.host_keys import KEY_FIELDS
from common.yamlio import load_yaml_mapping

# Run modes; a new mode is one more entry here (and its session in run.py).
MODES = ("local", "docker", "slurm")
LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR")
# FlagPerf keys that InferPerf accepts but has no use for.
IGNORED_KEYS = ("LOG_CALL_INFORMATION", "HOSTS_PORTS", "MASTER_PORT")
# Keys only FlagPerf's host.yaml carries (all about containers on remote hosts).
FLAGPERF_DOCKER_KEYS = ("ACCE_CONTAINER_OPT", "HOSTS_PORTS", "MASTER_PORT", "PIP_SOURCE", "ACCE_VISIBLE_DEVICE_ENV_NAME")


# Bounds on what reaches a resource.
MAX_NAME = 64  # a vendor, case or framework name (also a directory name)
MAX_PATH = 4096  # PATH_MAX
MAX_PATH_PART = 255  # NAME_MAX
MAX_TEXT = 4096  # any other string
MAX_HOSTS = 256
MAX_CASES = 256
CASE_TIMEOUT_S = (1.0, 7 * 86400.0)
MONITOR_INTERVAL_S = (0.05, 60.0)  # shorter: the monitors busy-loop; longer: too few samples
SHM_BYTES = (1 << 20, 1 << 40)  # 1m .. 1024g

_HOSTNAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})$")
_CASE_KEY = re.compile(rf"^([A-Za-z0-9_-]{{1,{MAX_NAME}}}):([A-Za-z0-9_.-]{{1,{MAX_NAME}}})$")
_SHM = re.compile(r"^(\d{1,15})(\.\d{1,9})?([bkmgBKMG]?)$")
_SHM_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


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
    # A model file in data_dir, run by the generic case MODEL_CASE (docs/onnx_models.md); None for a case.
    model: str | None = None
    # A ByteMLPerf workload file's keys as --set items (utils/bytemlperf_workload.py); () for a case.
    workload_overrides: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """How results name it: the case, or the model file's name."""
        return self.model or self.case

    @property
    def key(self) -> str:
        return f"{self.label}:{self.framework}"

    @property
    def overrides(self) -> tuple[str, ...]:
        """``--set`` items for this case alone: a model entry's file, a workload's keys."""
        return (() if self.model is None else (f"model_path={json.dumps(self.model)}",)) + self.workload_overrides


# A CASES key or run.py --model naming a model file: "path/to/model.onnx": <framework> (docs/onnx_models.md).
MODEL_CASE = "onnx_model"
MODEL_SUFFIXES = (".onnx", ".json")


def model_case(path: Any, framework: Any, base: Path, mode: str) -> CaseSpec:
    """An ONNX file, or a ByteMLPerf model-zoo JSON describing one, as a case of MODEL_CASE run in
    ``framework``'s image; its folder is the case's data dir. Relative paths are relative to ``base``;
    outside MODE local the path is on the hosts and must be absolute. Raises ValueError(reason)."""
    text = _path_text(path)
    if not text.lower().endswith(MODEL_SUFFIXES):
        raise ValueError(f"{shown(text)} is not a model file (.onnx, or a ByteMLPerf model-zoo .json)")
    if not isinstance(framework, str) or not re.fullmatch(rf"[A-Za-z0-9_.-]{{1,{MAX_NAME}}}", framework):
        raise ValueError(f"must map the model file to a framework name such as pytorch, got {shown(framework)}")
    file = Path(text)
    if not file.is_absolute():
        if mode != "local":
            raise ValueError(f"model file {shown(text)} must be an absolute path on the hosts")
        file = (base / file).resolve()
    if mode == "local" and not _on_disk(file.is_file, file):
        raise ValueError(f"model file {file}: no such file")
    return CaseSpec(MODEL_CASE, framework, str(file.parent), file.name)


@dataclass
class HostConfig:
    """host.yaml, checked: construct it (or call ``from_yaml``) and every field is valid.

    Fields may be given as host.yaml writes them (``hosts`` as strings,
    ``cases`` as a mapping, paths relative to ``inference_dir``); the checks
    normalise them (``Host``, ``CaseSpec``, absolute ``Path``).
    """

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
    ssh_port: int = 22
    # MODE docker: drive this machine's Docker engine directly, without SSH (HOSTS: ["localhost"]).
    docker_local: bool = False
    # MODE slurm (docs/scaling.md).
    slurm_shared_dir: str | None = None
    slurm_partition: str | None = None
    slurm_account: str | None = None
    slurm_gpus_per_node: int = 0
    slurm_pending_timeout: float = 600.0
    slurm_python: str = ""
    slurm_container: str = "none"
    # Relative paths in host.yaml are relative to this directory (inference/).
    inference_dir: InitVar[Path | None] = None

    def __post_init__(self, inference_dir: Path | None) -> None:
        self.path = Path(self.path)
        self._base = Path(inference_dir) if inference_dir is not None else Path(__file__).resolve().parents[1]
        for name, check in _CHECKS.items():
            key = _FIELD_KEYS[name]
            try:
                setattr(self, name, check(self, getattr(self, name)))
            except ValueError as exc:
                raise ConfigError(f"{self.path}: key '{key}' {exc}") from None
        del self._base

    @property
    def in_container(self) -> bool:
        """The pipeline runs in the vendor's image: MODE docker, or MODE slurm with
        SLURM_CONTAINER: docker (the image's requirements are the image's business)."""
        return self.mode == "docker" or (self.mode == "slurm" and self.slurm_container == "docker")

    @classmethod
    def from_yaml(cls, path: str | Path, inference_dir: Path) -> "HostConfig":
        """Parse and validate host.yaml; relative paths are relative to ``inference_dir``."""
        path = Path(path)
        data = load_yaml_mapping(path)
        for key in data:
            if key not in KEY_FIELDS:
                raise ConfigError(f"{path}: unknown key {shown(key)}")
            if "PASSWORD" in key.upper() or "SECRET" in key.upper():
                raise ConfigError(f"{path}: key '{key}': secrets do not belong in host.yaml; use SSH keys or an agent")
        values = {name: data[key] for key, name in KEY_FIELDS.items() if name is not None and key in data}
        values.setdefault("mode", _default_mode(data))
        return cls(path=path, inference_dir=inference_dir, **{**_DEFAULTS, **values})


def load_host_config(path: str | Path, inference_dir: Path) -> HostConfig:
    """Parse and validate host.yaml; relative paths are relative to inference/."""
    return HostConfig.from_yaml(path, inference_dir)


def _default_mode(data: dict) -> str:
    """MODE when host.yaml omits it. FlagPerf has no MODE and always runs containers over SSH:
    a file with any of FlagPerf's container keys means "docker"; otherwise "local"."""
    return "docker" if any(key in data for key in FLAGPERF_DOCKER_KEYS) else "local"


# ---- value checks: each returns the normalised value or raises ValueError(reason) ----


def _text(value: Any, limit: int = MAX_TEXT) -> str:
    """A non-empty one-line string (an int is taken as its digits, as FlagPerf writes ports)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)) or (isinstance(value, int) and value.bit_length() > 64):
        raise ValueError(f"must be a non-empty string, got {shown(value)}")
    if str(value).strip() == "":
        raise ValueError(f"must be a non-empty string, got {shown(value)}")
    text = str(value).strip()
    if len(text) > limit:
        raise ValueError(f"must be at most {limit} characters, got {shown(value)}")
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise ValueError(f"must be one line without control characters, got {shown(value)}")
    return text


def _optional_text(limit: int = MAX_TEXT) -> Callable[[Any], str | None]:
    return lambda value: None if value is None else _text(value, limit)


def _path_text(value: Any, *, expand: bool = False) -> str:
    """A path of bounded length, checked before the file system sees it; ``expand``: ``~`` is this user's home."""
    text = _text(os.fspath(value) if isinstance(value, os.PathLike) else value, MAX_PATH)
    text = os.path.expanduser(text) if expand else text
    if len(text) > MAX_PATH or any(len(part) > MAX_PATH_PART for part in text.split("/")):
        raise ValueError(f"must be a path of at most {MAX_PATH} characters and {MAX_PATH_PART} per name, got {shown(value)}")
    return text


def _on_disk(check: Callable[[], bool], path: object) -> bool:
    """``check()`` (is_file, is_dir, ...), with an OS error as a one-line reason."""
    try:
        return check()
    except OSError as exc:
        raise ValueError(f"{path}: cannot be checked: {exc.strerror or exc}") from None


def _name(value: Any, what: str) -> str:
    text = _text(value, len(value) if isinstance(value, str) else MAX_TEXT)
    if len(text) > MAX_NAME or not re.fullmatch(r"[A-Za-z0-9_-]+", text):
        raise ValueError(f"must be {what} of at most {MAX_NAME} letters, digits, '_' or '-', got {shown(value)}")
    return text


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, got {shown(value)}")
    return value


def _seconds(low: float, high: float, why: str = "") -> Callable[[Any], float]:
    def check(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"must be a positive number of seconds >= {low:g} and <= {high:g}{why}, got {shown(value)}")
        if not low <= value <= high:
            raise ValueError(f"must be a positive number of seconds >= {low:g} and <= {high:g}{why}, got {shown(value)}")
        return float(value)

    return check


def _port(value: Any) -> int:
    try:
        port = int(_text(value, 8))
    except ValueError:
        raise ValueError(f"must be a TCP port number, got {shown(value)}") from None
    if not 0 < port < 65536:
        raise ValueError(f"must be a TCP port number between 1 and 65535, got {shown(value)}")
    return port


def _writable_dir(path: Path) -> None:
    """``path`` is a writable directory, or can be created as one (its nearest existing parent is)."""
    existing = path
    while not _on_disk(existing.exists, existing) and existing != existing.parent:
        existing = existing.parent
    if not _on_disk(existing.is_dir, existing):
        if existing == path:
            raise ValueError(f"{path} exists and is not a directory")
        raise ValueError(f"{path} cannot be created: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{path} is not writable" if existing == path else f"{path} cannot be created: {existing} is not writable")


# Checks of the fields, in this order; each is (host.yaml key, check(config, value)).
def _check_mode(cfg: HostConfig, value: Any) -> str:
    mode = _text(value, MAX_NAME) if value is not None else None
    if mode not in MODES:
        raise ValueError(f"must be one of {', '.join(MODES)}, got {shown(value)}")
    return mode


def _check_flagperf_path(cfg: HostConfig, value: Any) -> Path:
    path = Path(_path_text(str(cfg._base) if value is None else value))
    if not path.is_absolute():
        path = (cfg._base / path).resolve()
    if not _on_disk((path / "run_inference.py").is_file, path):
        raise ValueError(f"{path} is not an inference/ directory (no run_inference.py)")
    return path


def _check_log_path(cfg: HostConfig, value: Any) -> Path:
    path = Path(_path_text("result" if value is None else value))
    if not path.is_absolute():
        path = cfg.flagperf_path / path
    _writable_dir(path)
    return path


def _check_vendor(cfg: HostConfig, value: Any) -> str:
    if value is None:
        raise ValueError("is required")
    vendor = _name(value, "a vendor name")
    if not _on_disk((cfg.flagperf_path / "inference_engine" / vendor).is_dir, vendor):
        raise ValueError(f"unknown vendor {vendor!r}: no inference_engine/{vendor}/")
    if cfg.mode == "docker" and not _on_disk((cfg.flagperf_path / "docker_images" / vendor).is_dir, vendor):
        raise ValueError(f"unknown vendor {vendor!r}: no docker_images/{vendor}/")
    return vendor


def _check_log_level(cfg: HostConfig, value: Any) -> str:
    level = _text(value, MAX_NAME).upper()
    if level not in LOG_LEVELS:
        raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}, got {shown(value)}")
    return level


def _check_hosts(cfg: HostConfig, value: Any) -> list[Host]:
    if value is None and cfg.mode == "local":
        value = ["127.0.0.1"]
    if not isinstance(value, list) or not value:
        raise ValueError("must be a non-empty list of host names or IP addresses")
    if len(value) > MAX_HOSTS:
        raise ValueError(f"lists {len(value)} hosts, more than {MAX_HOSTS}")
    hosts: list[Host] = []
    for entry in value:
        if isinstance(entry, Host):
            host = entry
        else:
            if not isinstance(entry, str):
                raise ValueError(f"entry {shown(entry)} must be a string")
            text = entry.strip()
            if len(text) > 260:
                raise ValueError(f"entry {shown(entry)} is not a host name or IP address")
            address, _, port_text = text.rpartition(":") if text.count(":") == 1 else (text, "", "")
            try:
                port = _port(port_text) if port_text else cfg.ssh_port
            except ValueError as exc:
                raise ValueError(f"entry {shown(entry)}: port {exc}") from None
            try:
                ipaddress.ip_address(address)
            except ValueError:
                if not _HOSTNAME.match(address):
                    raise ValueError(f"entry {shown(entry)} is not a host name or IP address") from None
            host = Host(address, port)
        if host in hosts:
            raise ValueError(f"lists {shown(entry)} twice")
        hosts.append(host)
    if cfg.mode == "local" and len(hosts) != 1:
        raise ValueError("must list exactly one host in MODE local (the pipeline runs on this machine)")
    return hosts


def _check_cases(cfg: HostConfig, value: Any) -> list[CaseSpec]:
    if isinstance(value, list) and value and all(isinstance(spec, CaseSpec) for spec in value):
        return value
    if not isinstance(value, dict) or not value:
        raise ValueError('must map "<case>:<framework>" to a data directory')
    if len(value) > MAX_CASES:
        raise ValueError(f"lists {len(value)} cases, more than {MAX_CASES}")
    from utils.bytemlperf_workload import workload_entry

    cases = []
    for key, data_dir in value.items():
        workload = workload_entry(cfg.path, cfg.flagperf_path, key, data_dir)  # "<workload>.json[:framework]": data dir
        if isinstance(key, str) and key.lower().endswith(MODEL_SUFFIXES) and workload is None:
            try:
                cases.append(model_case(key, data_dir, cfg.flagperf_path, cfg.mode))
            except ValueError as exc:
                raise ConfigError(f"{cfg.path}: key CASES entry {shown(key)}: {exc}") from None
            continue
        match = _CASE_KEY.match(str(key)) if isinstance(key, str) and workload is None else None
        if not match and workload is None:
            raise ConfigError(
                f'{cfg.path}: key CASES entry {shown(key)} must look like "<case>:<framework>" '
                f'(names of at most {MAX_NAME} characters), e.g. "resnet50:pytorch"'
            )
        try:
            data_dir = _path_text(data_dir)
        except ValueError as exc:
            raise ConfigError(f"{cfg.path}: key CASES entry {key!r} must map to a data directory path: {exc}") from None
        if not data_dir.startswith("/"):
            if cfg.mode != "local":
                raise ConfigError(f"{cfg.path}: key CASES entry {key!r}: data dir {shown(data_dir)} must be an absolute path on the hosts")
            data_dir = str((cfg.flagperf_path / data_dir).resolve())
        if workload is not None:
            cases.append(CaseSpec(workload.case, workload.framework, data_dir, workload_overrides=workload.overrides))
            continue
        cases.append(CaseSpec(match.group(1), match.group(2), data_dir))
    check_unique_cases(cases, f"{cfg.path}: key CASES")
    return cases


def check_unique_cases(cases: list[CaseSpec], where: str) -> None:
    """Two entries with one key would share a result folder (two model files of one name)."""
    keys = [spec.key for spec in cases]
    twice = next((key for key in keys if keys.count(key) > 1), None)
    if twice is not None:
        raise ConfigError(f"{where}: two entries run as {twice!r} (model files of one name): rename one")


def _check_shm_size(cfg: HostConfig, value: Any) -> str:
    try:
        text = _text(value, 32)
    except ValueError:
        text = ""
    match = _SHM.match(text)
    size = float(match.group(1) + (match.group(2) or "")) * _SHM_UNITS[match.group(3).lower()] if match else 0
    if not SHM_BYTES[0] <= size <= SHM_BYTES[1]:
        raise ValueError(f"must be a size like 32G or 512m, from 1m to 1024g, got {shown(value)}")
    return text


def _check_container_opt(cfg: HostConfig, value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"must be a string of docker run options, got {shown(value)}")
    if len(value) > MAX_TEXT:
        raise ValueError(f"must be at most {MAX_TEXT} characters, got {shown(value)}")
    return value.strip()


def _check_env_name(cfg: HostConfig, value: Any) -> str | None:
    if value is None:
        return None
    name = _text(value, MAX_TEXT)
    if len(name) > MAX_NAME or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"must be an environment variable name, got {shown(value)}")
    return name


def _check_ssh_user(cfg: HostConfig, value: Any) -> str:
    if value is None:
        try:
            return getpass.getuser()
        except (KeyError, OSError):  # no login name and no passwd entry for this uid
            if cfg.mode == "local":
                return ""
            raise ValueError("is required: the current user has no name") from None
    user = _text(value, 256)
    if any(c.isspace() for c in user):
        raise ValueError(f"must be a user name without spaces, got {shown(value)}")
    return user


def is_local_engine(config: "HostConfig", host: Host) -> bool:
    """``HOSTS: ["localhost"]`` (no port, or SSH_PORT) or DOCKER_LOCAL: true: this machine's
    Docker engine, driven through the SDK without SSH. ``127.0.0.x:PORT`` stays an SSH host."""
    if getattr(config, "docker_local", False) is True:
        return True
    return host.address == "localhost" and host.port == config.ssh_port


def _uses_ssh(cfg: HostConfig) -> bool:
    """MODE docker with at least one host reached over SSH (keys and known_hosts matter)."""
    return cfg.mode == "docker" and not all(is_local_engine(cfg, host) for host in cfg.hosts)


def _check_ssh_key_file(cfg: HostConfig, value: Any) -> str | None:
    if value is None:
        return None
    key_file = _path_text(value, expand=True)
    if _uses_ssh(cfg) and not _on_disk(Path(key_file).is_file, key_file):
        raise ValueError(f"{key_file} does not exist")
    return key_file


def _check_known_hosts(cfg: HostConfig, value: Any) -> str:
    known_hosts = _path_text("~/.ssh/known_hosts" if value is None else value, expand=True)
    if _uses_ssh(cfg) and not cfg.trust_on_first_use and not _on_disk(Path(known_hosts).is_file, known_hosts):
        raise ValueError(f"{known_hosts} does not exist: add the hosts' keys (ssh-keyscan, checked) or set TRUST_ON_FIRST_USE: true")
    return known_hosts


def _check_wheels(cfg: HostConfig, value: Any) -> str | None:
    if value is None:
        return None
    wheels = _path_text(value)
    if not _on_disk(Path(wheels).is_dir, wheels):
        raise ValueError(f"{wheels} is not a directory")
    return wheels


def _check_ca_bundle(cfg: HostConfig, value: Any) -> str | None:
    if value is None:
        return None
    bundle = _path_text(value)
    if not _on_disk(Path(bundle).is_file, bundle):
        raise ValueError(f"{bundle} is not a file")
    return bundle


def _check_remote_workdir(cfg: HostConfig, value: Any) -> str:
    workdir = _path_text(value)
    if not workdir.startswith("/"):
        raise ValueError(f"must be an absolute path, got {shown(value)}")
    return workdir.rstrip("/") or "/"


def _check_base_image(cfg: HostConfig, value: Any) -> str | None:
    if value is None:
        return None
    image = _text(value, 255)
    if any(c.isspace() for c in image):
        raise ValueError(f"must be an image reference such as debian:bookworm, got {shown(value)}")
    return image


def _check_docker_local(cfg: HostConfig, value: Any) -> bool:
    local = _bool(value)
    if local and cfg.mode != "docker":
        raise ValueError("applies to MODE docker only")
    return local


def _slurm_only(cfg: HostConfig, value: Any, default: Any) -> bool:
    """True when the value must be checked (MODE slurm); a slurm key in another mode is an error."""
    if cfg.mode != "slurm":
        if value is not None and value != default:
            raise ValueError("applies to MODE slurm only")
        return False
    return True


def _check_slurm_shared_dir(cfg: HostConfig, value: Any) -> str | None:
    if not _slurm_only(cfg, value, None):
        return None
    if value is None:
        raise ValueError("is required in MODE slurm: a directory this machine and every node mount")
    path = _path_text(value, expand=True)
    if not path.startswith("/"):
        raise ValueError(f"must be an absolute path, got {shown(value)}")
    if not _on_disk(Path(path).is_dir, path):
        raise ValueError(f"{path} is not a directory here")
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"{path} is not writable")
    return path


def _check_slurm_name(cfg: HostConfig, value: Any) -> str | None:
    if not _slurm_only(cfg, value, None) or value is None:
        return None
    return _name(value, "a Slurm name")


def _check_slurm_gpus(cfg: HostConfig, value: Any) -> int:
    if not _slurm_only(cfg, value, 0):
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 64:
        raise ValueError(f"must be a whole number of GPUs from 0 to 64, got {shown(value)}")
    return value


def _check_slurm_pending(cfg: HostConfig, value: Any) -> float:
    if not _slurm_only(cfg, value, 600.0):
        return 600.0
    return _seconds(1.0, 7 * 86400.0, " (7 days)")(value)


def _check_slurm_python(cfg: HostConfig, value: Any) -> str:
    if not _slurm_only(cfg, value or None, None) or not value:
        return sys.executable
    return _path_text(value, expand=True)


def _check_slurm_container(cfg: HostConfig, value: Any) -> str:
    if not _slurm_only(cfg, value, "none"):
        return "none"
    if value not in ("none", "docker"):
        raise ValueError(f"must be none (natively on the node) or docker (the vendor container through the node's Docker engine), got {shown(value)}")
    return value


def _plain(check: Callable[[Any], Any]) -> Callable[[HostConfig, Any], Any]:
    return lambda cfg, value: check(value)


# field -> check(config, value); the host.yaml key is KEY_FIELDS's (common/host_keys.py).
_CHECKS: dict[str, Callable[[HostConfig, Any], Any]] = {
    "mode": _check_mode,
    "flagperf_path": _check_flagperf_path,
    "vendor": _check_vendor,
    "log_path": _check_log_path,
    "log_level": _check_log_level,
    "ssh_port": _plain(_port),
    "hosts": _check_hosts,
    "cases": _check_cases,
    "shm_size": _check_shm_size,
    "container_opt": _check_container_opt,
    "pip_source": _plain(_optional_text(2048)),
    "clear_caches": _plain(_bool),
    "visible_device_env": _check_env_name,
    "ssh_user": _check_ssh_user,
    "ssh_key_file": _check_ssh_key_file,
    "trust_on_first_use": _plain(_bool),
    "known_hosts": _check_known_hosts,
    "case_timeout": _plain(_seconds(*CASE_TIMEOUT_S, " (7 days)")),
    "monitor_interval": _plain(_seconds(*MONITOR_INTERVAL_S, "; shorter intervals make the monitors busy-loop")),
    "base_image": _check_base_image,
    "pip_wheels_dir": _check_wheels,
    "ca_bundle": _check_ca_bundle,
    "remote_workdir": _check_remote_workdir,
    "log_call_information": _plain(_bool),
    "docker_local": _check_docker_local,
    "slurm_shared_dir": _check_slurm_shared_dir,
    "slurm_partition": _check_slurm_name,
    "slurm_account": _check_slurm_name,
    "slurm_gpus_per_node": _check_slurm_gpus,
    "slurm_pending_timeout": _check_slurm_pending,
    "slurm_python": _check_slurm_python,
    "slurm_container": _check_slurm_container,
}
assert {name for name in KEY_FIELDS.values() if name} == set(_CHECKS), "every host.yaml field has one check"
_FIELD_KEYS = {name: key for key, name in KEY_FIELDS.items() if name is not None}

# What a host.yaml that omits a key means (VENDOR and, in MODE docker, HOSTS have none).
_DEFAULTS: dict[str, Any] = {
    "flagperf_path": None,
    "log_path": None,
    "vendor": None,
    "log_level": "INFO",
    "ssh_port": 22,
    "hosts": None,
    "cases": None,
    "shm_size": "1G",
    "container_opt": "",
    "pip_source": None,
    "clear_caches": False,
    "visible_device_env": None,
    "ssh_user": None,
    "ssh_key_file": None,
    "trust_on_first_use": False,
    "known_hosts": None,
    "case_timeout": 3600,
    "monitor_interval": 1.0,
    "base_image": None,
    "pip_wheels_dir": None,
    "ca_bundle": None,
    "remote_workdir": "/var/tmp/inferperf",
    "log_call_information": False,
    "docker_local": False,
    "slurm_shared_dir": None,
    "slurm_partition": None,
    "slurm_account": None,
    "slurm_gpus_per_node": 0,
    "slurm_pending_timeout": 600.0,
    "slurm_python": "",
    "slurm_container": "none",
}
