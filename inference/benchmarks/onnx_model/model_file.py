"""An ONNX model file's signature, read without its weights.

What the generic case needs to synthesise inputs: each graph input's name,
element type and declared dimensions (a number, a symbol such as ``batch`` or
``sequence``, or unknown), the output names, and for an integer input the number
of rows of the embedding table it indexes, when the graph shows one (a
``Gather`` whose data is an initializer, reached from the input through
shape-only operators): token ids are then drawn below it.

Only onnx (and contract.cache's external-data scan) is imported: run.py reads the
signature on the host before any case starts, where torch would cost seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.errors import ConfigError, one_line

# ONNX element types InferPerf can synthesise: numpy and torch both have them, and an
# engine's ``tensor.numpy()`` works for each.
SUPPORTED_TYPES = {
    1: "float32",
    10: "float16",
    11: "float64",
    2: "uint8",
    3: "int8",
    5: "int16",
    6: "int32",
    7: "int64",
    9: "bool",
}
FLOATING = ("float16", "float32", "float64")
# Operators an index passes through unchanged on its way to a Gather (dtype or shape only).
_INDEX_PASSTHROUGH = {"Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity"}
# Operators between an embedding table and the Gather that reads it, keeping its rows.
_TABLE_PASSTHROUGH = {"Identity", "Cast", "DequantizeLinear"}

Dim = int | str | None  # a size, a symbol, or unknown


@dataclass
class GraphInput:
    name: str
    type_name: str  # "float32", "int64", ... or what onnx calls an unsupported type ("string", "sequence")
    dims: list[Dim] | None  # None: the model declares no shape
    vocabulary: int | None = None  # rows of the embedding table this input indexes
    vocabulary_source: str | None = None  # the Gather node that says so

    @property
    def supported(self) -> bool:
        return self.type_name in SUPPORTED_TYPES.values()

    def shape_text(self) -> str:
        if self.dims is None:
            return "[?]"
        return "[" + ", ".join("?" if d is None else str(d) for d in self.dims) + "]"


@dataclass
class ModelSignature:
    path: Path
    inputs: list[GraphInput]
    outputs: list[str]
    opset: int | None
    size_bytes: int
    external_data: list[str] = field(default_factory=list)  # file names, relative to the model's folder


def read_signature(path: Path, where: str) -> ModelSignature:
    """The signature of the ONNX file at ``path``; ``where`` names what gave the path in errors.
    A file that is not an ONNX model, or whose external-data files are missing, is a ConfigError."""
    import onnx

    if not path.is_file():
        raise ConfigError(f"{where}: {path}: no such file")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError, onnx's own, OSError
        raise ConfigError(f"{path} is not an ONNX model ({one_line(exc)})") from None
    graph = model.graph
    if model.ir_version <= 0 or not graph.node or not graph.output:
        raise ConfigError(f"{path} is not an ONNX model (no ir_version, nodes or outputs)")
    external = _external_data(path)
    missing = [name for name in external if not (path.parent / name).is_file()]
    if missing:
        raise ConfigError(f"{path} keeps its weights in {missing[0]!r}, which is not beside it in {path.parent}")
    not_tensors = [o for o in graph.output if o.type.WhichOneof("value") not in (None, "tensor_type")]
    if not_tensors:
        kind = not_tensors[0].type.WhichOneof("value").replace("_type", "")
        raise ConfigError(
            f"{path}: output '{not_tensors[0].name}' is a {kind}, not a tensor: engines' outputs are compared as "
            "tensors"
        )
    initializers = {t.name for t in graph.initializer}
    inputs = [_graph_input(value) for value in graph.input if value.name not in initializers]
    if not inputs:
        raise ConfigError(f"{path} has no inputs to feed")
    tables = _embedding_rows(graph)
    for item in inputs:
        if item.type_name.startswith("int") or item.type_name == "uint8":
            found = tables(item.name)
            if found:
                item.vocabulary, item.vocabulary_source = found
    opset = next((entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx")), None)
    return ModelSignature(path, inputs, [o.name for o in graph.output], opset, path.stat().st_size, external)


def _external_data(path: Path) -> list[str]:
    from common.onnx_files import onnx_external_locations

    return onnx_external_locations(path)


def _graph_input(value: Any) -> GraphInput:
    import onnx

    kind = value.type.WhichOneof("value")
    if kind != "tensor_type":
        return GraphInput(value.name, (kind or "unknown").replace("_type", ""), None)
    tensor = value.type.tensor_type
    elem = tensor.elem_type
    type_name = SUPPORTED_TYPES.get(elem) or onnx.TensorProto.DataType.Name(elem).lower()
    if not tensor.HasField("shape"):
        return GraphInput(value.name, type_name, None)
    dims: list[Dim] = []
    for dim in tensor.shape.dim:
        if dim.HasField("dim_value") and dim.dim_value > 0:
            dims.append(int(dim.dim_value))
        elif dim.HasField("dim_param") and dim.dim_param:
            dims.append(dim.dim_param)
        else:
            dims.append(None)
    return GraphInput(value.name, type_name, dims)


def _embedding_rows(graph: Any):
    """A function: input name -> (rows of the smallest table it indexes, "Gather 'node'"), or None."""
    import onnx

    tensor_dims: dict[str, list[int]] = {t.name: list(t.dims) for t in graph.initializer}
    producers: dict[str, Any] = {}
    consumers: dict[str, list[tuple[Any, int]]] = {}
    for node in graph.node:
        for out in node.output:
            producers[out] = node
        for index, name in enumerate(node.input):
            consumers.setdefault(name, []).append((node, index))
        if node.op_type == "Constant":
            for attribute in node.attribute:
                if attribute.name == "value" and attribute.type == onnx.AttributeProto.TENSOR:
                    tensor_dims[node.output[0]] = list(attribute.t.dims)

    def table_shape(name: str, depth: int = 0) -> list[int] | None:
        if name in tensor_dims:
            return tensor_dims[name]
        node = producers.get(name)
        if node is None or depth > 4 or node.op_type not in _TABLE_PASSTHROUGH or not node.input:
            return None
        return table_shape(node.input[0], depth + 1)

    def gather_axis(node: Any) -> int:
        return next((int(a.i) for a in node.attribute if a.name == "axis"), 0)

    def rows(input_name: str) -> tuple[int, str] | None:
        best: tuple[int, str] | None = None
        pending, seen = [input_name], set()
        while pending:
            name = pending.pop()
            if name in seen or len(seen) > 256:
                continue
            seen.add(name)
            for node, index in consumers.get(name, []):
                if node.op_type == "Gather" and index == 1:
                    shape = table_shape(node.input[0])
                    axis = gather_axis(node)
                    if shape and -len(shape) <= axis < len(shape) and shape[axis] > 0:
                        if best is None or shape[axis] < best[0]:
                            best = (int(shape[axis]), f"Gather '{node.name or node.output[0]}'")
                elif node.op_type in _INDEX_PASSTHROUGH and index == 0:
                    pending.extend(node.output[:1])
        return best

    return rows
