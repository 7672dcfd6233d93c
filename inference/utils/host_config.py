"""configs/host.yaml: FlagPerf's keys plus InferPerf's, validated before anything starts.

``HostConfig`` validates itself, as contract/config/'s ``CaseConfig`` does: every
field has one check in ``_CHECKS`` (run by ``__post_init__``, in order, so a
check may rely on the fields checked before it), and ``HostConfig.from_yaml``
(``load_host_config``) only maps host.yaml's keys onto the fields. Every value
that reaches a resource is bounded: lengths of names and paths before the file
system sees them, counts of hosts and cases, the timeout, the monitor interval,
the shared-memory size. A failure is one ConfigError naming the file and key.

``ENDPOINT`` (a running OpenAI-compatible server to benchmark instead of CASES) is checked here
as a mapping only: its entries are ``run.py --endpoint``'s options, parsed and checked by that
command's own parser (``tools/serving/options.py::config_argv``, called by ``run.py``).

The checks of single values are ``common/values.py``'s; CASES is read by
``utils/case_specs.py``. What a check needs to know of MODE it asks the facts MODE's executor class
declares, read from its source (``utils/executors/registry.py``: ``EXECUTORS``, ``executor_facts``): the valid
MODEs, and which keys belong to one MODE only, are the registry's.
"""

from __future__ import annotations

import getpass
import ipaddress
import os
import re
import sys
from dataclasses import MISSING, InitVar, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

from common.errors import ConfigError, shown
from common.host_keys import KEY_FIELDS
from common.layout import unknown_vendor
from common.values import (
    MAX_NAME,
    MAX_TEXT,
    bounded_path,
    on_disk,
    one_line_text,
    optional_text,
    plain_name,
    seconds_between,
    tcp_port,
    true_or_false,
    writable_dir,
)
from common.yamlio import load_yaml_mapping
from utils.case_specs import CaseSpec, parse_cases
from utils.executors import registry

LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR")
# FlagPerf keys that InferPerf accepts but has no use for.
IGNORED_KEYS = ("LOG_CALL_INFORMATION", "HOSTS_PORTS", "MASTER_PORT")
# Keys only FlagPerf's host.yaml carries (all about containers on remote hosts).
FLAGPERF_DOCKER_KEYS = (
    "ACCE_CONTAINER_OPT",
    "HOSTS_PORTS",
    "MASTER_PORT",
    "PIP_SOURCE",
    "ACCE_VISIBLE_DEVICE_ENV_NAME",
)

# Bounds on what reaches a resource.
MAX_HOSTS = 256
CASE_TIMEOUT_S = (1.0, 7 * 86400.0)
MONITOR_INTERVAL_S = (0.05, 60.0)  # shorter: the monitors busy-loop; longer: too few samples
SHM_BYTES = (1 << 20, 1 << 40)  # 1m .. 1024g

_HOSTNAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})$")
_SHM = re.compile(r"^(\d{1,15})(\.\d{1,9})?([bkmgBKMG]?)$")
_SHM_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


@dataclass(frozen=True)
class Host:
    address: str
    port: int

    @property
    def label(self) -> str:
        return self.address if self.port == 22 else f"{self.address}:{self.port}"


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
    # Repetitions of each case by its key (run.py --repeat, or the case config's repetitions; utils/run_plan.py).
    repetitions: dict[str, int] = field(default_factory=dict)
    ssh_port: int = 22
    # MODE docker: drive this machine's Docker engine directly, without SSH (HOSTS: ["localhost"]).
    docker_local: bool = False
    # A ByteMLPerf backend folder's requirements.txt: check (unmet = error), warn (name each, go on), skip.
    backend_requirements: str = "check"
    # MODE docker: the image build inherits this machine's pip configuration (index URLs, find-links, cert).
    host_pip_config: bool = True
    # MODE slurm (docs/scaling.md).
    slurm_shared_dir: str | None = None
    slurm_partition: str | None = None
    slurm_account: str | None = None
    slurm_gpus_per_node: int = 0
    slurm_pending_timeout: float = 600.0
    slurm_python: str = ""
    slurm_container: str = "none"
    # A running server to benchmark instead of CASES: run.py --endpoint's options as a mapping (docs/serving.md).
    endpoint: dict[str, Any] | None = None
    # The results history (docs/history.md): its SQLAlchemy URL, resolved by utils/history/store.py::resolve_url
    # (absent: <FLAGPERF_LOG_PATH>/history.sqlite); None: HISTORY: off.
    history: str | None = None
    # Relative paths in host.yaml are relative to this directory (inference/).
    inference_dir: InitVar[Path | None] = None

    def __post_init__(self, inference_dir: Path | None) -> None:
        self.path = Path(self.path)
        self._base = Path(inference_dir) if inference_dir is not None else Path(__file__).resolve().parents[1]
        for name, check in _CHECKS.items():
            key = _FIELD_KEYS[name]
            owner = registry.key_owner(key)  # None for MODE itself: it is checked first
            try:
                if owner is not None and owner != self.mode:
                    setattr(self, name, _other_modes_key(owner, getattr(self, name), _FIELD_DEFAULTS[name]))
                else:
                    setattr(self, name, check(self, getattr(self, name)))
            except ValueError as exc:
                raise ConfigError(f"{self.path}: key '{key}' {exc}") from None
        del self._base

    @property
    def executor(self) -> registry.DeclaredFacts:
        """The facts of the executor class that runs this config: MODE's in ``EXECUTORS``, or the one
        its keys pick (MODE slurm, SLURM_CONTAINER: docker). run.py asks its facts instead of MODE's
        name; ``utils/executors/__init__.py::session_class`` loads the class."""
        keys = registry.EXECUTORS[self.mode].keys
        return registry.executor_facts(self.mode, {key: getattr(self, _KEY_NAMES[key]) for key in keys})

    @property
    def in_container(self) -> bool:
        """The pipeline runs in the vendor's image (the executor's fact: MODE docker, or MODE
        slurm with SLURM_CONTAINER: docker)."""
        return self.executor.in_container

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


def _other_modes_key(owner: str, value: Any, default: Any) -> Any:
    """A key of another MODE's executor (``EXECUTORS``' keys): absent or at its default, else an error."""
    if value is not None and value != default:
        raise ValueError(f"applies to MODE {owner} only")
    return default


def _mode_executor(cfg: HostConfig) -> registry.DeclaredFacts:
    """MODE's executor class while the fields are checked (MODE is checked first); the one a later
    key may pick (``HostConfig.executor``) is not known yet."""
    return registry.executor_facts(cfg.mode)


# Checks of the fields, in this order; each is (host.yaml key, check(config, value)).
def _check_mode(cfg: HostConfig, value: Any) -> str:
    mode = one_line_text(value, MAX_NAME) if value is not None else None
    if mode is None or mode not in registry.modes():
        raise ValueError(f"must be one of {', '.join(registry.modes())}, got {shown(value)}")
    return mode


def _check_flagperf_path(cfg: HostConfig, value: Any) -> Path:
    path = Path(bounded_path(str(cfg._base) if value is None else value))
    if not path.is_absolute():
        path = (cfg._base / path).resolve()
    if not on_disk((path / "run_inference.py").is_file, path):
        raise ValueError(f"{path} is not an inference/ directory (no run_inference.py)")
    return path


def _check_log_path(cfg: HostConfig, value: Any) -> Path:
    path = Path(bounded_path("result" if value is None else value))
    if not path.is_absolute():
        path = cfg.flagperf_path / path
    writable_dir(path)
    return path


def _check_vendor(cfg: HostConfig, value: Any) -> str:
    if cfg.endpoint is not None and not value:
        return ""  # an ENDPOINT run runs no engine
    if value is None:
        raise ValueError("is required")
    vendor = plain_name(value, "a vendor name")
    if not on_disk((cfg.flagperf_path / "inference_engine" / vendor).is_dir, vendor):
        raise ValueError(unknown_vendor(vendor))
    if _mode_executor(cfg).in_container and not on_disk((cfg.flagperf_path / "docker_images" / vendor).is_dir, vendor):
        raise ValueError(unknown_vendor(vendor, "docker_images"))
    return vendor


def _check_log_level(cfg: HostConfig, value: Any) -> str:
    level = one_line_text(value, MAX_NAME).upper()
    if level not in LOG_LEVELS:
        raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}, got {shown(value)}")
    return level


def _check_hosts(cfg: HostConfig, value: Any) -> list[Host]:
    runs_here = _mode_executor(cfg).runs_here
    if value is None and runs_here:
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
                port = tcp_port(port_text) if port_text else cfg.ssh_port
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
    if runs_here and len(hosts) != 1:
        raise ValueError(f"must list exactly one host in MODE {cfg.mode} (the pipeline runs on this machine)")
    return hosts


def _check_cases(cfg: HostConfig, value: Any) -> list[CaseSpec]:
    if cfg.endpoint is not None:
        if value:
            raise ValueError("cannot be combined with ENDPOINT: a run benchmarks either its cases or a running server")
        return []
    # Where the pipeline runs here, or on this machine's own Docker engine (HOSTS: ["localhost"]),
    # the data is here: a relative path means what it means in MODE local, so switching MODE is the only edit.
    executor = _mode_executor(cfg)
    here = executor.runs_here or (executor.uses_ssh and not _uses_ssh(cfg))
    return parse_cases(value, cfg.path, cfg.flagperf_path, here)


def _check_shm_size(cfg: HostConfig, value: Any) -> str:
    try:
        text = one_line_text(value, 32)
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
    name = one_line_text(value, MAX_TEXT)
    if len(name) > MAX_NAME or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"must be an environment variable name, got {shown(value)}")
    return name


def _check_ssh_user(cfg: HostConfig, value: Any) -> str:
    if value is None:
        try:
            return getpass.getuser()
        except (KeyError, OSError):  # no login name and no passwd entry for this uid
            if _mode_executor(cfg).runs_here:
                return ""
            raise ValueError("is required: the current user has no name") from None
    user = one_line_text(value, 256)
    if any(c.isspace() for c in user):
        raise ValueError(f"must be a user name without spaces, got {shown(value)}")
    return user


def is_local_engine(config: "HostConfig", host: Host) -> bool:
    """``HOSTS: ["localhost"]`` (no port, or SSH_PORT) or DOCKER_LOCAL: true: this machine's
    Docker engine, driven through the SDK without SSH. ``127.0.0.x:PORT`` stays an SSH host."""
    if config.docker_local is True:  # True only once checked: an unchecked value may be anything
        return True
    return host.address == "localhost" and host.port == config.ssh_port


def _uses_ssh(cfg: HostConfig) -> bool:
    """An executor that uses SSH, with at least one host reached over it (keys and known_hosts matter)."""
    return _mode_executor(cfg).uses_ssh and not all(is_local_engine(cfg, host) for host in cfg.hosts)


def _check_ssh_key_file(cfg: HostConfig, value: Any) -> str | None:
    if value is None:
        return None
    key_file = bounded_path(value, expand=True)
    if _uses_ssh(cfg) and not on_disk(Path(key_file).is_file, key_file):
        raise ValueError(f"{key_file} does not exist")
    return key_file


def _check_known_hosts(cfg: HostConfig, value: Any) -> str:
    known_hosts = bounded_path("~/.ssh/known_hosts" if value is None else value, expand=True)
    if _uses_ssh(cfg) and not cfg.trust_on_first_use and not on_disk(Path(known_hosts).is_file, known_hosts):
        loopback = [
            host.label for host in cfg.hosts if _is_loopback(host.address) and host.port == 22
        ]  # not an sshd on its own port
        hint = (
            f'; {loopback[0]} is this machine: HOSTS: ["localhost"] drives its Docker engine without SSH'
            if loopback and len(cfg.hosts) == 1
            else ""
        )
        raise ValueError(
            f"{known_hosts} does not exist: add the hosts' keys (ssh-keyscan, checked) or set TRUST_ON_FIRST_USE: "
            f"true{hint}"
        )
    return known_hosts


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _optional_existing(is_kind: Callable[[Path], bool], kind: str) -> Callable[[Any], str | None]:
    """A check of an optional path that must exist as ``kind`` (``is_kind``: ``Path.is_dir``, ``Path.is_file``)."""

    def check(value: Any) -> str | None:
        if value is None:
            return None
        path = bounded_path(value)
        if not on_disk(lambda: is_kind(Path(path)), path):
            raise ValueError(f"{path} is not a {kind}")
        return path

    return check


def _check_remote_workdir(cfg: HostConfig, value: Any) -> str:
    workdir = bounded_path(value)
    if not workdir.startswith("/"):
        raise ValueError(f"must be an absolute path, got {shown(value)}")
    return workdir.rstrip("/") or "/"


def _check_base_image(cfg: HostConfig, value: Any) -> str | None:
    if value is None:
        return None
    image = one_line_text(value, 255)
    if any(c.isspace() for c in image):
        raise ValueError(f"must be an image reference such as debian:bookworm, got {shown(value)}")
    return image


def _check_backend_requirements(cfg: HostConfig, value: Any) -> str:
    from utils.requirements import BACKEND_REQUIREMENTS

    if value not in BACKEND_REQUIREMENTS:
        raise ValueError(f"must be one of {', '.join(BACKEND_REQUIREMENTS)}, got {shown(value)}")
    return value


# The keys below are MODE slurm's (EXECUTORS): their checks run in MODE slurm only.
def _check_slurm_shared_dir(cfg: HostConfig, value: Any) -> str:
    if value is None:
        raise ValueError("is required in MODE slurm: a directory this machine and every node mount")
    path = bounded_path(value, expand=True)
    if not path.startswith("/"):
        raise ValueError(f"must be an absolute path, got {shown(value)}")
    if not on_disk(Path(path).is_dir, path):
        raise ValueError(f"{path} is not a directory here")
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"{path} is not writable")
    return path


def _check_slurm_name(cfg: HostConfig, value: Any) -> str | None:
    if value is None:
        return None
    return plain_name(value, "a Slurm name")


def _check_slurm_gpus(cfg: HostConfig, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 64:
        raise ValueError(f"must be a whole number of GPUs from 0 to 64, got {shown(value)}")
    return value


def _check_slurm_pending(cfg: HostConfig, value: Any) -> float:
    return seconds_between(1.0, 7 * 86400.0, " (7 days)")(value)


def _check_slurm_python(cfg: HostConfig, value: Any) -> str:
    if not value:
        return sys.executable
    return bounded_path(value, expand=True)


def _check_slurm_container(cfg: HostConfig, value: Any) -> str:
    if value not in ("none", "docker"):
        raise ValueError(
            "must be none (natively on the node) or docker (the vendor container through the node's Docker engine), "
            f"got {shown(value)}"
        )
    return value


def _check_endpoint(cfg: HostConfig, value: Any) -> dict[str, Any] | None:
    """A mapping of run.py --endpoint's options (their values are checked by its parser)."""
    if value is None:
        return None
    if not isinstance(value, dict) or not value or not all(isinstance(key, str) for key in value):
        raise ValueError(f"must map run.py --endpoint's options to values (url, served_model, ...), got {shown(value)}")
    return value


def _check_history(cfg: HostConfig, value: Any) -> str | None:
    from utils.history.store import resolve_url

    return resolve_url(value, cfg.log_path)


def _plain(check: Callable[[Any], Any]) -> Callable[[HostConfig, Any], Any]:
    return lambda cfg, value: check(value)


# field -> check(config, value); the host.yaml key is KEY_FIELDS's (common/host_keys.py).
_CHECKS: dict[str, Callable[[HostConfig, Any], Any]] = {
    "mode": _check_mode,
    "endpoint": _check_endpoint,
    "flagperf_path": _check_flagperf_path,
    "vendor": _check_vendor,
    "log_path": _check_log_path,
    "log_level": _check_log_level,
    "history": _check_history,
    "ssh_port": _plain(tcp_port),
    "hosts": _check_hosts,
    "cases": _check_cases,
    "shm_size": _check_shm_size,
    "container_opt": _check_container_opt,
    "pip_source": _plain(optional_text(2048)),
    "clear_caches": _plain(true_or_false),
    "visible_device_env": _check_env_name,
    "ssh_user": _check_ssh_user,
    "ssh_key_file": _check_ssh_key_file,
    "trust_on_first_use": _plain(true_or_false),
    "known_hosts": _check_known_hosts,
    "case_timeout": _plain(seconds_between(*CASE_TIMEOUT_S, " (7 days)")),
    "monitor_interval": _plain(seconds_between(*MONITOR_INTERVAL_S, "; shorter intervals make the monitors busy-loop")),
    "base_image": _check_base_image,
    "pip_wheels_dir": _plain(_optional_existing(Path.is_dir, "directory")),
    "ca_bundle": _plain(_optional_existing(Path.is_file, "file")),
    "remote_workdir": _check_remote_workdir,
    "log_call_information": _plain(true_or_false),
    "docker_local": _plain(true_or_false),
    "backend_requirements": _check_backend_requirements,
    "host_pip_config": _plain(true_or_false),
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
_KEY_NAMES = {key: name for name, key in _FIELD_KEYS.items()}
# A field's value when host.yaml leaves its key out (HostConfig's own default; None where it has none).
_FIELD_DEFAULTS = {f.name: None if f.default is MISSING else f.default for f in fields(HostConfig)}

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
    "backend_requirements": "check",
    "host_pip_config": True,
    "slurm_shared_dir": None,
    "slurm_partition": None,
    "slurm_account": None,
    "slurm_gpus_per_node": 0,
    "slurm_pending_timeout": 600.0,
    "slurm_python": "",
    "slurm_container": "none",
    "endpoint": None,
    "history": None,
}
