"""The cases a run.py command line picks from host.yaml's CASES: ``--cases`` (with ``base``, the base
tier) and ``--model`` (ONNX files run by the generic onnx_model case)."""

from __future__ import annotations

from pathlib import Path

from common.errors import ConfigError
from common.layout import BASE_PREFIX, framework_dir, is_base_case
from utils.case_specs import CaseSpec, check_unique_cases, model_case
from utils.host_config import HostConfig


def select_cases(config: HostConfig, selection: str | None) -> list[CaseSpec]:
    if not selection:
        return config.cases
    wanted = [s.strip() for s in selection.split(",") if s.strip()]
    chosen = [
        c for c in config.cases if c.case in wanted or c.key in wanted or (BASE_TIER in wanted and is_base_case(c.case))
    ]
    if BASE_TIER in wanted and not any(is_base_case(c.case) for c in chosen):
        chosen += base_tier(config)
    unknown = [w for w in wanted if w != BASE_TIER and not any(w in (c.case, c.key) for c in config.cases)]
    if unknown:
        raise ConfigError(f"--cases: {unknown[0]!r} is not in CASES of {config.path}")
    return chosen


BASE_TIER = "base"  # run.py --cases base: the base-tier cases (benchmarks/base_common.py)


def base_tier(config: HostConfig) -> list[CaseSpec]:
    """The shipped base-tier cases (benchmarks/base_*/), for --cases base when CASES lists none. They
    read no data: their data directory is only checked to exist on the hosts (/tmp)."""
    frameworks = {spec.framework for spec in config.cases}
    framework = frameworks.pop() if len(frameworks) == 1 else "pytorch"
    found = sorted(
        p.name
        for p in (config.flagperf_path / "benchmarks").glob(f"{BASE_PREFIX}*")
        if (p / framework_dir(framework)).is_dir()
    )
    if len(config.hosts) < 2:  # the interconnect needs two hosts or more
        found = [case for case in found if case != "base_allreduce"]
    return [CaseSpec(case, framework, "/tmp") for case in found]


def model_cases(config: HostConfig, paths: list[str], selection: str | None) -> list[CaseSpec]:
    """run.py --model FILE: the files replace CASES, each run by the generic onnx_model case in the
    framework host.yaml's CASES use (when they agree; else pytorch). Relative paths are the shell's."""
    if selection:
        raise ConfigError("--model and --cases cannot be combined: --model replaces CASES")
    frameworks = {spec.framework for spec in config.cases}
    framework = frameworks.pop() if len(frameworks) == 1 else "pytorch"
    specs = []
    for path in paths:
        try:
            specs.append(
                model_case(Path(path).expanduser().absolute(), framework, Path.cwd(), config.executor.runs_here)
            )
        except ValueError as exc:
            raise ConfigError(f"--model {path}: {exc}") from None
    check_unique_cases(specs, "--model")
    return specs
