"""Loading a case config: FlagPerf's three-file merge (spec §3.2.1), ``--set`` overrides, and the typed result."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path
from typing import Any

from loguru import logger

from common.errors import ConfigError, shown
from common.host_keys import HOST_KEYS  # host.yaml's keys, defined once; a case file may not reuse them
from common.layout import framework_dir
from common.yamlio import YamlTooLarge, load_yaml_mapping, load_yaml_value
from contract.config.case import CaseConfig
from contract.config.values import CLI_KEYS, MAX_KEY, REQUIRED_KEYS, check_device_available, warn_oversubscribed


def case_config_paths(perf_dir: str | Path, case: str, vendor: str) -> tuple[Path, Path, Path]:
    root = Path(perf_dir) / "configs" / case
    return (
        root / "configurations.yaml",
        root / "parameters.yaml",
        root / "vendor_config" / f"{vendor}_configurations.yaml",
    )


def _reject_reserved(path: Path, data: dict) -> None:
    for key in data:
        if not (isinstance(key, str) and key.isidentifier() and len(key) <= MAX_KEY):
            raise ConfigError(
                f"{path}: key {shown(key)} must be a name of letters, digits and '_' of at most {MAX_KEY} characters "
                "(a case reads it as config.<key>)"
            )
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
            raise ConfigError(f"{vendor_path}: key '{key}' overrides {params_path}, which vendors may not change")
        if key not in base:
            logger.warning(f"{vendor_path}: adds key '{key}' = {shown(value)}, which {base_path.name} does not define")
        elif base[key] == value and type(base[key]) is type(value):
            raise ConfigError(
                f"{vendor_path}: key '{key}' repeats the value {shown(value)} of {base_path.name}; remove the no-op "
                "override"
            )
        else:
            logger.info(f"{vendor_path}: overrides '{key}': {shown(base[key])} -> {shown(value)}")
        merged[key] = value
        origin[key] = str(vendor_path)
    return merged, origin


OVERRIDE_ORIGIN = "command line (--set)"


def parse_overrides(items: list[str] | None) -> dict[str, Any]:
    """``["batch_sizes=[1,8]", "scenario=server"]`` -> a mapping; values are YAML."""
    overrides: dict[str, Any] = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise ConfigError(f"{OVERRIDE_ORIGIN}: {shown(item)} is not KEY=VALUE")
        if key in overrides:
            raise ConfigError(f"{OVERRIDE_ORIGIN}: key '{key}' is given twice")
        try:
            overrides[key] = load_yaml_value(text, f"{OVERRIDE_ORIGIN}: key '{key}'") if text.strip() else None
        except YamlTooLarge:
            raise
        except ConfigError:
            raise ConfigError(f"{OVERRIDE_ORIGIN}: key '{key}': value {shown(text)} is not valid YAML") from None
    return overrides


def _apply_overrides(
    merged: dict[str, Any], origin: dict[str, str], overrides: dict[str, Any], params: dict, params_path: Path
) -> None:
    """A quick experiment from the command line (``--set``); the case files stay as they are. A case
    parameter (parameters.yaml) is the case's own and is not overridden."""
    _reject_reserved(Path(OVERRIDE_ORIGIN), overrides)
    for key, value in overrides.items():
        if key in params:
            raise ConfigError(
                f"{OVERRIDE_ORIGIN}: key '{key}' is a case parameter ({params_path}) and may not be overridden"
            )
        merged[key] = value
        origin[key] = OVERRIDE_ORIGIN


def _refuse_framework_keys(merged: dict[str, Any], origin: dict[str, str]) -> None:
    """The names of CaseConfig's own machinery, and the keys the framework sets, are no config keys."""
    runtime_only = {"cache_dir", "export_onnx_path", "engine_path", "accuracy_note", "framework_full"}
    shadowed = {"extra", "origin", "get", "as_dict", "_fields", "_asdict"}  # names of CaseConfig's own machinery
    for key in merged:
        if key in shadowed:
            raise ConfigError(
                f"{origin[key]}: key '{key}' is a reserved name and cannot be read as config.{key}; rename it"
            )
        if key in runtime_only:
            raise ConfigError(f"{origin[key]}: key '{key}' is set by the framework and may not be configured")


def load_case_config(
    perf_dir: str,
    case: str,
    framework: str,
    vendor: str,
    data_dir: str,
    log_dir: str,
    overrides: dict[str, Any] | None = None,
    *,
    check_device: bool = True,
) -> CaseConfig:
    """The merged, checked case config. ``check_device``: the config's ``device``
    must be usable on this machine (False where the case runs elsewhere, as on
    the host that drives MODE docker)."""
    for what, name in (("case", case), ("vendor", vendor), ("framework", framework)):
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
            raise ConfigError(f"{what} {shown(name)} is not a name of at most 64 letters, digits, '_', '.' or '-'")
    base_path, params_path, vendor_path = case_config_paths(perf_dir, case, vendor)
    if not base_path.parent.is_dir():
        raise ConfigError(f"unknown case '{case}': {base_path.parent} does not exist")
    base = load_yaml_mapping(base_path)
    params = load_yaml_mapping(params_path, required=False)
    vendor_data = load_yaml_mapping(vendor_path, required=False)
    merged, origin = merge_case_config(base, base_path, params, params_path, vendor_data, vendor_path)
    if overrides:
        _apply_overrides(merged, origin, overrides, params, params_path)
    typed_names = {f.name for f in fields(CaseConfig)} - {"extra", "origin"}
    _refuse_framework_keys(merged, origin)
    typed = {key: value for key, value in merged.items() if key in typed_names}
    extra = {key: value for key, value in merged.items() if key not in typed_names}
    config = CaseConfig(
        vendor=vendor,
        case=case,
        framework=framework_dir(framework),
        framework_full=framework,
        perf_dir=str(perf_dir),
        data_dir=str(data_dir),
        log_dir=str(log_dir),
        extra=extra,
        origin=origin,
        **typed,
    )
    problem = check_device_available(config.device) if check_device else None
    if problem:
        config._fail("device", problem)
    warn_oversubscribed(config.as_dict(), origin)  # more threads than CPUs here: run as given, said once
    return config
