"""Everything about a run's cases that can be checked before any host is touched (``check_cases``),
and what ``run.py --list`` shows. Here the host side asks the container side: each case config as
the pipeline will merge it (contract/config/), its engine (contract/registry.py) and the
vendor's monitor."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from loguru import logger

from common.errors import ConfigError
from common.layout import framework_dir, is_base_case
from common.monitor_protocol import monitor_protocol
from utils.case_specs import CaseSpec
from utils.host_config import HostConfig
from utils.requirements import check_backend_requirements, check_case_requirements

if TYPE_CHECKING:
    from contract.config import CaseConfig


def list_available(perf_dir: Path) -> str:
    """Cases (with their frameworks), vendors (with their compilers and images), as found on disk."""
    from contract.registry import compilers, vendor_names
    from tools.compat.bytemlperf.backend import describe_backends

    lines = ["cases:"]
    for case in sorted(
        p for p in (perf_dir / "benchmarks").iterdir() if p.is_dir() and not p.name.startswith(("_", "."))
    ):
        frameworks = sorted(f.name for f in case.iterdir() if f.is_dir() and not f.name.startswith(("_", ".")))
        configured = (perf_dir / "configs" / case.name / "configurations.yaml").is_file()
        lines.append(f"  {case.name}: {', '.join(frameworks) or '-'}" + ("" if configured else "  (no configs/ entry)"))
    lines.append("vendors (compilers; images):")
    engines = perf_dir / "inference_engine"
    for vendor in vendor_names(engines):
        images_dir = perf_dir / "docker_images" / vendor
        images = (
            sorted(d.name for d in images_dir.iterdir() if (d / "Dockerfile").is_file()) if images_dir.is_dir() else []
        )
        lines.append(
            f"  {vendor}: {', '.join(compilers(vendor, engines)) or '-'}; images: {', '.join(images) or 'none'}"
        )
        lines.extend(describe_backends(engines / vendor))  # ByteMLPerf backend folders and their interact profiles
    return "\n".join(lines)


def check_cases(config: HostConfig) -> None:
    """Everything about the cases that can be checked before any host is touched: their
    folders and packages, each case config as the pipeline will merge it, its engine, and
    the vendor's monitor."""
    from contract.config import load_case_config, parse_overrides

    executor = config.executor
    logger.disable("contract.config")  # the container logs the merge; here only errors matter
    try:
        for index, spec in enumerate(config.cases):
            check_case_files(config, spec)
            case_config = load_case_config(
                str(config.flagperf_path),
                spec.case,
                spec.framework,
                config.vendor,
                spec.data_dir,
                "-",
                parse_overrides([*config.overrides, *spec.overrides]),
                check_device=executor.runs_here,  # elsewhere the device is on the hosts, not here
            )
            if (
                spec.model is not None and not executor.in_container
            ):  # the model file is here: read it before anything is written
                from benchmarks.onnx_model.describe import describe

                describe(case_config)
            if "repetitions" in case_config.origin:  # else the plan's default: 1, or run.py ab's
                config.repetitions[spec.key] = case_config.repetitions
            if case_config.compiler is not None:
                _check_engine(config, case_config, case_config.compiler)
                spec = config.cases[index] = _with_engine_image(config, spec, case_config.compiler)
            if executor.in_container:
                check_image(config, spec)
            if is_base_case(spec.case):  # its dtypes and sizes; its memory where it runs here
                from benchmarks.base_common import check_base_config

                check_base_config(
                    case_config, memory=executor.runs_here, hosts=len(config.hosts), hosts_origin=str(config.path)
                )
    finally:
        logger.enable("contract.config")
    folders = sorted({spec.image_folder for spec in config.cases})
    if executor.in_container and len(folders) > 1:  # utils/executors/docker.py::image_spec: one image a run
        raise ConfigError(
            f"{config.path}: key CASES: one run builds one image, and these cases need docker_images/{config.vendor}/ "
            f"{', '.join(folders)} (their frameworks', or their engines' own): run them separately"
        )
    check_monitor(config)


def check_case_files(config: HostConfig, spec: CaseSpec) -> None:
    """The case's code; natively, its packages (in a container, its image: ``check_image``)."""
    perf_dir, in_container = config.flagperf_path, config.executor.in_container
    if not (perf_dir / "benchmarks" / spec.case / framework_dir(spec.framework)).is_dir():
        raise ConfigError(
            f"{config.path}: key CASES entry '{spec.key}': no benchmarks/{spec.case}/{framework_dir(spec.framework)}/"
        )
    if not in_container:  # an image installs them (utils/executors/images.py)
        check_case_requirements(perf_dir, spec.case, spec.framework)


def _with_engine_image(config: HostConfig, spec: CaseSpec, compiler: str) -> CaseSpec:
    """The case with the image folder its engine declares (``IMAGE``: contract/registry.py), if any."""
    from contract import registry

    image = registry.engine_facts(config.vendor, compiler, config.flagperf_path / "inference_engine").image
    return spec if image is None else replace(spec, image=image)


def check_image(config: HostConfig, spec: CaseSpec) -> None:
    """The Dockerfile of the case's image: its framework's (FlagPerf's layout) or its engine's own."""
    folder = f"docker_images/{config.vendor}/{spec.image_folder}/"
    if not (config.flagperf_path / folder / "Dockerfile").is_file():
        whose = f" (the image its engine declares, IMAGE = {spec.image!r})" if spec.image else ""
        raise ConfigError(f"{config.path}: key CASES entry '{spec.key}': no {folder}Dockerfile{whose}")


def _check_engine(config: HostConfig, case_config: CaseConfig, compiler: str) -> None:
    """The case's engine, asked of the registry (contract/registry.py). Where the pipeline
    runs here (MODE local) the engine runs in this very Python, so its own preflight runs now;
    elsewhere it runs on the hosts, and the registry answers from the file layout without importing it."""
    from contract import registry

    perf_dir, vendor, executor = config.flagperf_path, config.vendor, config.executor
    if not executor.in_container:
        check_backend_requirements(
            perf_dir, vendor, compiler, config.backend_requirements
        )  # a ByteMLPerf backend folder's (check, warn or skip)
    if executor.runs_here:
        from tools.plugins import preflight_engine

        preflight_engine(vendor, compiler, case_config)
        return
    if registry.check_engine(vendor, compiler, perf_dir / "inference_engine").is_dir():
        from tools.compat.bytemlperf.engine import host_check

        host_check(case_config, perf_dir / "inference_engine")  # its profile and answers; the hosts have its packages


def check_monitor(config: HostConfig) -> None:
    """The vendor monitor's protocol declaration (common/monitor_protocol.py), once per run."""
    source = f"docker_images/{config.vendor}/{config.vendor}_monitor.py"
    monitor = config.flagperf_path / source
    if monitor.is_file():
        monitor_protocol(monitor, source)
