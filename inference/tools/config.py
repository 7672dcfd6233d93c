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

from tools.errors import ConfigError
from tools.expr import parse_number
from tools.yamlio import load_yaml_mapping

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
REQUIRED_KEYS = (
    "batch_size", "input_size", "fp16", "compiler", "num_workers", "log_freq", "repeat",
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


def _device(value: Any) -> str:
    if not isinstance(value, str) or not (value == "cpu" or value.startswith("cuda")):
        raise ValueError(f"must be 'cpu' or 'cuda[:N]', got {value!r}")
    return value


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
}


@dataclass
class CaseConfig:
    """Everything a case and an engine may read, as attributes.

    Typed fields are validated; parameters.yaml keys and vendor-only keys
    live in ``extra`` and are reachable as attributes too.
    """

    vendor: str
    case: str
    framework: str
    perf_dir: str
    data_dir: str
    log_dir: str
    batch_size: int
    input_size: int | None
    fp16: bool
    compiler: str | None
    num_workers: int
    log_freq: int
    repeat: int
    no_validation: bool
    exist_onnx_path: str | None
    exist_compiler_path: str | None
    warmup: int = 2
    flops: float | None = None
    seed: int = 0
    onnx_opset: int = 17
    device: str = "cpu"
    extra: dict[str, Any] = field(default_factory=dict)
    origin: dict[str, str] = field(default_factory=dict, repr=False)
    # Set by the pipeline as it goes.
    cache_dir: str = ""
    export_onnx_path: str | None = None
    engine_path: str | None = None

    def __post_init__(self) -> None:
        for name, check in _CHECKS.items():
            try:
                setattr(self, name, check(getattr(self, name)))
            except ValueError as exc:
                raise ConfigError(f"{self.origin.get(name, 'config')}: key '{name}' {exc}") from None
        if self.no_validation and self.exist_onnx_path is None:
            raise ConfigError(
                f"{self.origin.get('no_validation', 'config')}: key 'no_validation' is true, so key "
                "'exist_onnx_path' must name an ONNX file (validation and export are both skipped)"
            )

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


def load_case_config(
    perf_dir: str, case: str, framework: str, vendor: str, data_dir: str, log_dir: str
) -> CaseConfig:
    base_path, params_path, vendor_path = case_config_paths(perf_dir, case, vendor)
    if not base_path.parent.is_dir():
        raise ConfigError(f"unknown case '{case}': {base_path.parent} does not exist")
    base = load_yaml_mapping(base_path)
    params = load_yaml_mapping(params_path, required=False)
    vendor_data = load_yaml_mapping(vendor_path, required=False)
    merged, origin = merge_case_config(base, base_path, params, params_path, vendor_data, vendor_path)

    typed_names = {f.name for f in fields(CaseConfig)} - {"extra", "origin"}
    runtime_only = {"cache_dir", "export_onnx_path", "engine_path"}
    for key in merged:
        if key in runtime_only:
            raise ConfigError(f"{origin[key]}: key '{key}' is set by the framework and may not be configured")
    typed = {key: value for key, value in merged.items() if key in typed_names}
    extra = {key: value for key, value in merged.items() if key not in typed_names}
    return CaseConfig(
        vendor=vendor,
        case=case,
        framework=framework,
        perf_dir=str(perf_dir),
        data_dir=str(data_dir),
        log_dir=str(log_dir),
        extra=extra,
        origin=origin,
        **typed,
    )
