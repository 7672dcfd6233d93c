"""From the config's ``model_path`` to everything the generic case runs: the ONNX file, its
description (a ByteMLPerf model-zoo JSON, when ``model_path`` names one) and the input plans.

``describe(config)`` only reads and checks (run.py calls it on the host before any case
starts, so a file that is not a model is one line and exit 2 with nothing written);
``configure(config)``, the case's configure hook (tools/pipeline.py, init step), applies it:
the ONNX file becomes the case's ``exist_onnx_path`` (compiled as it is, never
exported), the plans go into the config as ``model_inputs`` (so result.json keeps
them), and the accuracy is ``n/a (synthetic inputs)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from loguru import logger

from common.errors import ConfigError, shown
from contract.config import CaseConfig, origin_of

from .inputs import InputPlan, parse_input_shapes, plan_inputs
from .model_file import ModelSignature, read_signature
from .model_zoo import ZooEntry, load_zoo_entry

ACCURACY_NOTE = "synthetic inputs"


@dataclass
class ModelDescription:
    signature: ModelSignature
    zoo: ZooEntry | None
    plans: list[InputPlan]
    warnings: list[str]


def model_file(config: CaseConfig) -> Path:
    """The config's ``model_path``: absolute, or relative to ``data_dir`` (the folder run.py gives the case).
    A ``.json`` file is a model-zoo entry; any other is read as an ONNX model."""
    value = config.get("model_path")
    if value is None:
        raise ConfigError(
            f"{origin_of(config, 'model_path')}: key 'model_path' is required: the ONNX file or model-zoo JSON to run "
            "(run.py --model FILE)"
        )
    if not isinstance(value, str) or not value.strip() or "\0" in value or len(value) > 4096:
        raise ConfigError(f"{origin_of(config, 'model_path')}: key 'model_path' must be a path, got {shown(value)}")
    path = Path(value)
    return path if path.is_absolute() else Path(config.data_dir) / path


def describe(config: CaseConfig) -> ModelDescription:
    """Read and check the model the config names; raises ConfigError with one line naming the file, key or input."""
    for key in ("model_inputs", "exist_onnx_path"):
        if config.get(key) is not None:
            raise ConfigError(
                f"{origin_of(config, key)}: key {key!r} is set by the onnx_model case from key 'model_path'; remove it"
            )
    where = f"{origin_of(config, 'model_path')}: key 'model_path'"
    path = model_file(config)
    zoo = load_zoo_entry(path, where) if path.suffix.lower() == ".json" else None
    signature = read_signature(zoo.onnx_path if zoo else path, f"{zoo.path}: key 'onnx_model_path'" if zoo else where)
    given = parse_input_shapes(config.get("input_shapes"), origin_of(config, "input_shapes"))
    plans, warnings = plan_inputs(signature, zoo, given, f"{origin_of(config, 'input_shapes')}: key 'input_shapes'")
    _check_batch_sizes(config, plans, zoo)
    return ModelDescription(signature, zoo, plans, warnings)


def _check_batch_sizes(config: CaseConfig, plans: list[InputPlan], zoo: ZooEntry | None) -> None:
    sweep = config.batch_sizes if isinstance(config.batch_sizes, list) else []
    sizes = sorted({config.batch_size, *sweep})
    for plan in plans:
        wrong = [size for size in sizes if plan.static_batch is not None and size != plan.static_batch]
        if wrong:
            key = "batch_size" if wrong[0] == config.batch_size else "batch_sizes"
            raise ConfigError(
                f"{origin_of(config, key)}: key {key!r} asks for batch size {wrong[0]}, but input '{plan.name}' has "
                "its batch axis "
                f"fixed at {plan.static_batch} in the model: run with --set batch_size={plan.static_batch}"
            )
    if zoo is not None and zoo.max_batch_size is not None and sizes[-1] > zoo.max_batch_size:
        key = "batch_size" if sizes[-1] == config.batch_size else "batch_sizes"
        raise ConfigError(
            f"{origin_of(config, key)}: key {key!r} asks for batch size {sizes[-1]}, above {zoo.path.name}'s "
            f"max_batch_size {zoo.max_batch_size}"
        )


def configure(config: CaseConfig) -> ModelDescription:
    """The case's configure hook: describe the model, log what will be fed, and set the config up for the run."""
    description = describe(config)
    signature = description.signature
    config.exist_onnx_path = str(signature.path.resolve())
    config.accuracy_note = ACCURACY_NOTE
    config.extra["model_inputs"] = [plan.to_dict() for plan in description.plans]
    config.origin["model_inputs"] = "benchmarks/onnx_model (from the model's signature)"
    source = f" described by {description.zoo.path}" if description.zoo else ""
    external = f", weights in {', '.join(signature.external_data)}" if signature.external_data else ""
    logger.info(
        f"onnx_model: {signature.path}{source} ({_size(signature.size_bytes)}, opset {signature.opset}{external}); "
        f"{len(signature.inputs)} input(s), outputs {', '.join(signature.outputs)}; the reference is ONNX Runtime on "
        "CPU"
    )
    for plan in description.plans:
        logger.info(plan.describe())
    for warning in description.warnings:
        logger.warning(warning)
    return description


def _size(count: int) -> str:
    return f"{count / 2**20:.1f} MiB" if count >= 2**20 else f"{count / 2**10:.1f} KiB"
