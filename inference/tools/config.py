"""The case configuration: FlagPerf's three-file merge (spec §3.2.1) into one typed object.

Sources, lowest precedence first:
  configs/<case>/configurations.yaml                   the benchmark settings
  configs/<case>/parameters.yaml                       case parameters, hardware-independent
  configs/<case>/vendor_config/<vendor>_configurations.yaml   vendor overrides
plus the command-line keys of run_inference.py. Rules:
  - a key in both configurations and parameters is an error;
  - a vendor key may not touch parameters, host.yaml or command-line keys;
  - a vendor key new to configurations logs a warning, one that changes a
    value logs info, and one that repeats the base value is an error.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

from loguru import logger

from common.errors import ConfigError
from tools.expr import parse_number
from tools.scenarios import SCENARIOS
from common.yamlio import load_yaml_mapping

CLI_KEYS = ("perf_dir", "data_dir", "log_dir", "vendor", "case", "framework")
# host.yaml's keys (FlagPerf's, plus InferPerf's); a case file may not reuse them.
HOST_KEYS = (
    "FLAGPERF_PATH", "FLAGPERF_LOG_PATH", "VENDOR", "FLAGPERF_LOG_LEVEL", "LOG_CALL_INFORMATION",
    "HOSTS", "SSH_PORT", "HOSTS_PORTS", "MASTER_PORT", "SHM_SIZE", "ACCE_CONTAINER_OPT", "PIP_SOURCE",
    "CLEAR_CACHES", "ACCE_VISIBLE_DEVICE_ENV_NAME", "CASES", "MODE", "SSH_USER", "SSH_KEY_FILE",
    "KNOWN_HOSTS", "TRUST_ON_FIRST_USE", "CASE_TIMEOUT", "MONITOR_INTERVAL", "BASE_IMAGE",
    "PIP_WHEELS_DIR", "CA_BUNDLE", "REMOTE_WORKDIR",
)
# Keys that configurations.yaml must define, as in FlagPerf's standard case.
# input_size (elements per input sample) is optional: FlagPerf's spec lists it,
# but its published configs lack it and neither framework reads it.
REQUIRED_KEYS = (
    "batch_size", "fp16", "compiler", "num_workers", "log_freq", "repeat",
    "no_validation", "exist_onnx_path", "exist_compiler_path",
)


def _positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"must be a positive integer, got {value!r}")
    return value


def _non_negative_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"must be a non-negative integer, got {value!r}")
    return value


def _optional_positive_int(value: Any) -> int | None:
    return None if value is None else _positive_int(value)


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, got {value!r}")
    return value


def _optional_name(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or not value.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"must be a name of letters, digits, '_' or '-', or null, got {value!r}")
    return value


def _optional_path(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"must be a path or null, got {value!r}")
    return value


def _optional_flops(value: Any) -> float | None:
    if value is None:
        return None
    number = parse_number(value)
    if not number > 0:
        raise ValueError(f"must be a positive number of FLOPs per sample, got {value!r}")
    return number


def _bounded(kind: str, low: float, high: float, *, low_inclusive: bool = False, integer: bool = False):
    def check(value: Any):
        number = value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
            raise ValueError(f"must be {kind}, got {value!r}")
        if not (low <= number if low_inclusive else low < number) or number > high:
            bound = f"{'>=' if low_inclusive else '>'} {low:g} and <= {high:g}"
            raise ValueError(f"must be {kind} {bound}, got {value!r}")
        return int(number) if integer else float(number)

    return check


def _one_or_list(check: Callable[[Any], Any], *, unique: bool = True):
    """A single value or a non-empty list of them; always returns a list."""

    def check_list(value: Any) -> list:
        values = value if isinstance(value, list) else [value]
        if not values:
            raise ValueError("must not be an empty list")
        checked = []
        for item in values:
            try:
                checked.append(check(item))
            except ValueError as exc:
                raise ValueError(f"entry {item!r} {exc}" if isinstance(value, list) else str(exc)) from None
        if unique and len(set(checked)) != len(checked):
            raise ValueError(f"has repeated entries: {value!r}")
        return checked

    return check_list


def _scenario(value: Any) -> str:
    if value not in SCENARIOS:
        raise ValueError(f"must be one of {', '.join(SCENARIOS)}, got {value!r}")
    return value


def _optional(check: Callable[[Any], Any]):
    return lambda value: None if value is None else check(value)


def _device(value: Any) -> str:
    if not isinstance(value, str) or not (value == "cpu" or value.startswith("cuda")):
        raise ValueError(f"must be 'cpu' or 'cuda[:N]', got {value!r}")
    return value


# The measurement keys' framework defaults: configs that lack them keep
# working, and FlagPerf-style configs without these attributes get the same.
MEASUREMENT_DEFAULTS: dict[str, Any] = {
    "min_query_count": 64,     # enough queries for a measured p90 (LoadGen's floor)
    "min_duration_s": 2.0,     # of measured wall time, per phase and per performance row
    "max_duration_s": 600.0,   # wall-clock cap per phase or row: hitting it first makes the result invalid
    "contention_limit": 0.10,  # share of the benchmark's CPUs other processes may use
}
# Bounds on everything that sizes a resource.
MAX_BATCH_SIZE = 1 << 16
MAX_CLIENTS_PER_CORE = 4

# Typed keys and their checks; everything else is passed through untyped.
_CHECKS: dict[str, Callable[[Any], Any]] = {
    "batch_size": _positive_int,
    "input_size": _optional_positive_int,
    "fp16": _bool,
    "compiler": _optional_name,
    "num_workers": _non_negative_int,
    "log_freq": _non_negative_int,
    "repeat": _positive_int,
    "no_validation": _bool,
    "exist_onnx_path": _optional_path,
    "exist_compiler_path": _optional_path,
    "warmup": _non_negative_int,
    "flops": _optional_flops,
    "seed": _non_negative_int,
    "onnx_opset": _positive_int,
    "device": _device,
    "min_query_count": _bounded("a positive integer", 0, 1e8, integer=True),
    "min_duration_s": _bounded("a number of seconds", 0, 86400, low_inclusive=True),
    "max_duration_s": _bounded("a number of seconds", 0, 86400),
    "contention_limit": _bounded("a fraction", 0, 1),
    "batch_sizes": _optional(_one_or_list(_bounded("a positive integer", 0, MAX_BATCH_SIZE, integer=True))),
    "scenario": _one_or_list(_scenario),
    "clients": _one_or_list(_bounded("a positive integer", 0, 4096, integer=True)),
    "target_qps": _optional(_bounded("a positive number of samples per second", 0, 1e9)),
    "latency_bound_ms": _optional(_bounded("a positive number of milliseconds", 0, 3.6e6)),
    "server_search": _bool,
    "compile_only": _bool,
    "numeric_check": _bool,
    "numeric_batches": _bounded("a positive integer", 0, 64, integer=True),
    "audits": _bool,
    "allow_many_clients": _bool,
    "pool_max_mb": _bounded("a positive number of MiB", 0, 65536),
}


@dataclass
class CaseConfig:
    """Everything a case and an engine may read, as attributes.

    Typed fields are validated; parameters.yaml keys and vendor-only keys
    live in ``extra`` and are reachable as attributes too.
    """

    vendor: str
    case: str
    framework: str            # the case-code name, FlagPerf's: "pytorch" for --framework pytorch_2.1
    perf_dir: str
    data_dir: str
    log_dir: str
    batch_size: int
    fp16: bool
    compiler: str | None
    num_workers: int
    log_freq: int
    repeat: int
    no_validation: bool
    exist_onnx_path: str | None
    exist_compiler_path: str | None
    input_size: int | None = None
    warmup: int = 2
    flops: float | None = None
    seed: int = 0
    onnx_opset: int = 17
    device: str = "cpu"
    # Measurement and workload keys (ByteMLPerf's names where it has them).
    min_query_count: int = MEASUREMENT_DEFAULTS["min_query_count"]
    min_duration_s: float = MEASUREMENT_DEFAULTS["min_duration_s"]
    max_duration_s: float = MEASUREMENT_DEFAULTS["max_duration_s"]
    contention_limit: float = MEASUREMENT_DEFAULTS["contention_limit"]
    batch_sizes: list[int] | None = None        # null: [batch_size]
    scenario: Any = "offline"                   # one of SCENARIOS or a list; a list after validation
    clients: Any = 1                            # issuing threads, or a list to sweep; a list after validation
    target_qps: float | None = None             # server: Poisson arrival rate, samples per second
    latency_bound_ms: float | None = None       # server: the p99 bound
    server_search: bool = False                 # server: find the highest target_qps meeting the bound
    compile_only: bool = False                  # stop after the vendor compile
    numeric_check: bool = True                  # compare engine outputs with the framework model's
    numeric_batches: int = 2
    numeric_tolerance: Any = None               # overrides of tools.numeric.DEFAULT_TOLERANCES
    audits: bool = True                         # anti-caching and accuracy-in-performance-mode audits
    allow_many_clients: bool = False            # permit clients > 4 x cores
    pool_max_mb: float = 256.0                  # memory for the preloaded query pool of one batch size
    extra: dict[str, Any] = field(default_factory=dict)
    origin: dict[str, str] = field(default_factory=dict, repr=False)
    # Set by the pipeline as it goes.
    cache_dir: str = ""
    export_onnx_path: str | None = None
    engine_path: str | None = None
    # Set by a case when its accuracy means nothing (e.g. "random weights"):
    # accuracy is then reported as null with this reason, never as a number.
    accuracy_note: str | None = None
    # --framework as given (e.g. "pytorch_2.1", which names the docker image); set by load_case_config.
    framework_full: str = ""

    def __post_init__(self) -> None:
        for name, check in _CHECKS.items():
            try:
                setattr(self, name, check(getattr(self, name)))
            except ValueError as exc:
                raise ConfigError(f"{self.origin.get(name, 'config')}: key '{name}' {exc}") from None
        self._check_workload()
        if self.no_validation and self.exist_onnx_path is None:
            raise ConfigError(
                f"{self.origin.get('no_validation', 'config')}: key 'no_validation' is true, so key "
                "'exist_onnx_path' must name an ONNX file (validation and export are both skipped)"
            )

    def _fail(self, key: str, message: str) -> None:
        raise ConfigError(f"{self.origin.get(key, 'config')}: key '{key}' {message}")

    def _check_workload(self) -> None:
        if self.max_duration_s < self.min_duration_s:
            self._fail("max_duration_s", f"is {self.max_duration_s:g}, less than min_duration_s {self.min_duration_s:g}")
        if self.batch_sizes is None:
            self.batch_sizes = [self.batch_size]
        if "server" in self.scenario:
            # Named where scenario was set: that is what asks for the bound.
            if self.latency_bound_ms is None:
                self._fail("scenario", "includes server, so key 'latency_bound_ms' is required (the p99 bound in ms)")
            if self.target_qps is None and not self.server_search:
                self._fail("scenario", "includes server, so key 'target_qps' is required (or server_search: true)")
        import os

        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        if not self.allow_many_clients and max(self.clients) > MAX_CLIENTS_PER_CORE * cores:
            self._fail(
                "clients",
                f"is {max(self.clients)}, more than {MAX_CLIENTS_PER_CORE} x the {cores} cores here; "
                "set allow_many_clients: true if that is intended",
            )
        if self.numeric_tolerance is not None:
            from tools.numeric import tolerances_for

            try:
                tolerances_for("fp32", self.numeric_tolerance)
            except ValueError as exc:
                self._fail("numeric_tolerance", str(exc))

    def __getattr__(self, name: str) -> Any:
        # Only reached for names that are not fields: parameters and vendor keys.
        extra = self.__dict__.get("extra", {})
        if name in extra:
            return extra[name]
        raise AttributeError(f"config has no key '{name}'")

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return getattr(self, name)
        except AttributeError:
            return default

    def as_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("extra", "origin")}
        data.update(self.extra)
        return data

    # FlagPerf passes its config as a namedtuple; engines written for it read these.
    @property
    def _fields(self) -> tuple[str, ...]:
        return tuple(self.as_dict())

    def _asdict(self) -> dict[str, Any]:
        return self.as_dict()


def case_config_paths(perf_dir: str | Path, case: str, vendor: str) -> tuple[Path, Path, Path]:
    root = Path(perf_dir) / "configs" / case
    return (
        root / "configurations.yaml",
        root / "parameters.yaml",
        root / "vendor_config" / f"{vendor}_configurations.yaml",
    )


def _reject_reserved(path: Path, data: dict) -> None:
    for key in data:
        if key in CLI_KEYS:
            raise ConfigError(f"{path}: key '{key}' collides with the command-line option --{key}")
        if key in HOST_KEYS:
            raise ConfigError(f"{path}: key '{key}' is a host.yaml key and may not appear in case configs")


def merge_case_config(
    base: dict, base_path: Path, params: dict, params_path: Path, vendor: dict, vendor_path: Path
) -> tuple[dict, dict]:
    """Apply the spec's merge rules; return the merged mapping and key -> origin file."""
    for path, data in ((base_path, base), (params_path, params), (vendor_path, vendor)):
        _reject_reserved(path, data)
    for key in base:
        if key in params:
            raise ConfigError(f"{params_path}: key '{key}' is also defined in {base_path}")
    missing = [key for key in REQUIRED_KEYS if key not in base]
    if missing:
        raise ConfigError(f"{base_path}: required key '{missing[0]}' is missing")

    merged = {**base, **params}
    origin = {key: str(base_path) for key in base}
    origin.update({key: str(params_path) for key in params})
    for key, value in vendor.items():
        if key in params:
            raise ConfigError(
                f"{vendor_path}: key '{key}' overrides {params_path}, which vendors may not change"
            )
        if key not in base:
            logger.warning(f"{vendor_path}: adds key '{key}' = {value!r}, which {base_path.name} does not define")
        elif base[key] == value and type(base[key]) is type(value):
            raise ConfigError(
                f"{vendor_path}: key '{key}' repeats the value {value!r} of {base_path.name}; remove the no-op override"
            )
        else:
            logger.info(f"{vendor_path}: overrides '{key}': {base[key]!r} -> {value!r}")
        merged[key] = value
        origin[key] = str(vendor_path)
    return merged, origin


OVERRIDE_ORIGIN = "command line (--set)"


def parse_overrides(items: list[str] | None) -> dict[str, Any]:
    """``["batch_sizes=[1,8]", "scenario=server"]`` -> a mapping; values are YAML."""
    import yaml

    overrides: dict[str, Any] = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise ConfigError(f"{OVERRIDE_ORIGIN}: {item!r} is not KEY=VALUE")
        if key in overrides:
            raise ConfigError(f"{OVERRIDE_ORIGIN}: key '{key}' is given twice")
        try:
            overrides[key] = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError:
            raise ConfigError(f"{OVERRIDE_ORIGIN}: key '{key}': value {text!r} is not valid YAML") from None
    return overrides


def load_case_config(
    perf_dir: str,
    case: str,
    framework: str,
    vendor: str,
    data_dir: str,
    log_dir: str,
    overrides: dict[str, Any] | None = None,
) -> CaseConfig:
    base_path, params_path, vendor_path = case_config_paths(perf_dir, case, vendor)
    if not base_path.parent.is_dir():
        raise ConfigError(f"unknown case '{case}': {base_path.parent} does not exist")
    base = load_yaml_mapping(base_path)
    params = load_yaml_mapping(params_path, required=False)
    vendor_data = load_yaml_mapping(vendor_path, required=False)
    merged, origin = merge_case_config(base, base_path, params, params_path, vendor_data, vendor_path)
    if overrides:
        # A quick experiment from the command line; the case files stay as they are.
        _reject_reserved(Path(OVERRIDE_ORIGIN), overrides)
        for key, value in overrides.items():
            if key in params:
                raise ConfigError(f"{OVERRIDE_ORIGIN}: key '{key}' is a case parameter ({params_path}) and may not be overridden")
            merged[key] = value
            origin[key] = OVERRIDE_ORIGIN

    typed_names = {f.name for f in fields(CaseConfig)} - {"extra", "origin"}
    runtime_only = {"cache_dir", "export_onnx_path", "engine_path", "accuracy_note", "framework_full"}
    shadowed = {"extra", "origin", "get", "as_dict", "_fields", "_asdict"}   # names of CaseConfig's own machinery
    for key in merged:
        if key in shadowed:
            raise ConfigError(f"{origin[key]}: key '{key}' is a reserved name and cannot be read as config.{key}; rename it")
        if key in runtime_only:
            raise ConfigError(f"{origin[key]}: key '{key}' is set by the framework and may not be configured")
    typed = {key: value for key, value in merged.items() if key in typed_names}
    extra = {key: value for key, value in merged.items() if key not in typed_names}
    return CaseConfig(
        vendor=vendor,
        case=case,
        framework=framework.split("_", 1)[0],
        framework_full=framework,
        perf_dir=str(perf_dir),
        data_dir=str(data_dir),
        log_dir=str(log_dir),
        extra=extra,
        origin=origin,
        **typed,
    )
