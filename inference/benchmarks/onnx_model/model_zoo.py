"""ByteMLPerf's model-zoo JSON (``general_perf/model_zoo/<model>.json``) as the description of an ONNX model.

The keys read (docs/onnx_models.md has the full mapping):

  onnx_model_path, else model_path   the ONNX file; relative paths are looked up
                                     beside the JSON, then by their file name beside it
                                     (a zoo entry copied next to its model works unchanged)
  inputs                             "a,b,c": the model's inputs, by name
  input_shape                        {name: [1, ...]}: shapes at batch 1; dimension 0 is the
                                     batch axis, replaced by each batch size (as ByteMLPerf does)
  input_type                         "FLOAT32,LONG,...", in input_shape's order (ByteMLPerf's);
                                     the model's declared type wins, with a warning when they differ
  outputs                            "x,y": checked against the model's outputs (a warning)
  max_batch_size                     the largest batch size a run may use
  layout                             NCHW or NHWC: which axes of an image input are spatial

Every other key (``model``, ``framework``, ``model_precision``, ``dataset_name``,
vendors' own) is ignored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.errors import ConfigError, shown

# ByteMLPerf's input_type words -> numpy type names ("STRING" is refused later, naming the input).
ZOO_TYPES = {
    "FLOAT32": "float32",
    "FLOAT16": "float16",
    "FLOAT64": "float64",
    "LONG": "int64",
    "INT64": "int64",
    "INT32": "int32",
    "INT8": "int8",
    "UINT8": "uint8",
    "BOOL": "bool",
    "STRING": "string",
}
LAYOUTS = ("NCHW", "NHWC", "NCDHW", "NDHWC")
MAX_ZOO_BYTES = 1 << 20  # a description, not a model


@dataclass
class ZooEntry:
    path: Path
    onnx_path: Path
    name: str | None = None
    inputs: list[str] | None = None
    input_shape: dict[str, list[int]] = field(default_factory=dict)
    input_type: dict[str, str] = field(default_factory=dict)  # name -> ZOO_TYPES value
    outputs: list[str] | None = None
    max_batch_size: int | None = None
    layout: str | None = None


def load_zoo_entry(path: Path, where: str) -> ZooEntry:
    """Read and check the model-zoo JSON at ``path``; ``where`` names what gave the path."""
    if not path.is_file():
        raise ConfigError(f"{where}: {path}: no such file")
    if path.stat().st_size > MAX_ZOO_BYTES:
        raise ConfigError(
            f"{path}: a model-zoo JSON of {path.stat().st_size} bytes; a description is at most {MAX_ZOO_BYTES}"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: a model-zoo JSON must be an object with ByteMLPerf's keys, got {type(data).__name__}"
        )
    entry = ZooEntry(path=path, onnx_path=_onnx_file(path, data), name=_text(path, data, "model"))
    entry.inputs = _names(path, data, "inputs")
    entry.outputs = _names(path, data, "outputs")
    entry.input_shape = _shapes(path, data.get("input_shape"))
    entry.input_type = _types(path, data.get("input_type"), list(entry.input_shape) or entry.inputs or [])
    if entry.inputs is not None and entry.input_shape and set(entry.inputs) != set(entry.input_shape):
        extra = sorted(set(entry.inputs) ^ set(entry.input_shape))[0]
        raise ConfigError(
            f"{path}: key 'inputs' and key 'input_shape' name different inputs ({extra!r} is in one only)"
        )
    max_batch = data.get("max_batch_size")
    if max_batch is not None and (isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch <= 0):
        raise ConfigError(f"{path}: key 'max_batch_size' must be a positive integer, got {shown(max_batch)}")
    entry.max_batch_size = max_batch
    layout = data.get("layout")
    if layout is not None and layout not in LAYOUTS:
        raise ConfigError(f"{path}: key 'layout' must be one of {', '.join(LAYOUTS)}, got {shown(layout)}")
    entry.layout = layout
    return entry


def _text(path: Path, data: dict, key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{path}: key {key!r} must be a string, got {shown(value)}")
    return value


def _onnx_file(path: Path, data: dict) -> Path:
    key = "onnx_model_path" if data.get("onnx_model_path") is not None else "model_path"
    value = _text(path, data, key)
    if not value:
        raise ConfigError(
            f"{path}: key 'onnx_model_path' (or 'model_path') must name the ONNX file this entry describes"
        )
    if not value.lower().endswith(".onnx"):
        raise ConfigError(
            f"{path}: key {key!r} names {value!r}, not an .onnx file: export the model to ONNX and name it with key "
            "'onnx_model_path'"
        )
    given = Path(value)
    candidates = [given] if given.is_absolute() else [path.parent / given, path.parent / given.name]
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    looked = " and ".join(str(c) for c in dict.fromkeys(candidates))
    raise ConfigError(f"{path}: key {key!r}: {value!r} not found (looked for {looked})")


def _names(path: Path, data: dict, key: str) -> list[str] | None:
    value = _text(path, data, key)
    if value is None:
        return None
    names = [name.strip() for name in value.split(",")]
    if not all(names) or len(set(names)) != len(names):
        raise ConfigError(f"{path}: key {key!r} must be comma-separated distinct names, got {shown(value)}")
    return names


def _shapes(path: Path, value: Any) -> dict[str, list[int]]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: key 'input_shape' must map input names to shapes, got {shown(value)}")
    shapes = {}
    for name, dims in value.items():
        if (
            not isinstance(dims, list)
            or not dims
            or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims)
        ):
            raise ConfigError(
                f"{path}: key 'input_shape': input {name!r} must have a list of positive sizes, got {shown(dims)}"
            )
        shapes[name] = dims
    return shapes


def _types(path: Path, value: Any, order: list[str]) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, str):
        raise ConfigError(f"{path}: key 'input_type' must be a string such as \"FLOAT32,LONG\", got {shown(value)}")
    words = [word.strip().upper() for word in value.split(",")]
    unknown = [w for w in words if w not in ZOO_TYPES]
    if unknown:
        raise ConfigError(f"{path}: key 'input_type': {unknown[0]!r} is not one of {', '.join(ZOO_TYPES)}")
    if len(words) != len(order):
        raise ConfigError(
            f"{path}: key 'input_type' lists {len(words)} types for {len(order)} inputs (key 'input_shape', else key "
            "'inputs')"
        )
    return {name: ZOO_TYPES[word] for name, word in zip(order, words)}
