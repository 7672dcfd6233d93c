"""ByteMLPerf's ``configs`` argument and ``dataloader`` object, built from InferPerf's.

``configs = {"workload": ..., "model_info": ..., "interact_info": ...}`` has the
shape of ByteMLPerf's ``workloads/*.json``, ``model_zoo/*.json`` and the
profile's answers. The model is the ONNX file InferPerf exported (or was given):

  model_info  model "<case>-torch-<precision>" (ByteMLPerf's naming), model_path (the ONNX file),
              framework "Onnx", model_format "onnx", model_precision,
              inputs/outputs (comma-separated ONNX names), input_shape
              ({name: [1, *per-sample shape]}: ByteMLPerf multiplies axis 0 by the
              batch size), input_type (comma-separated, ByteMLPerf's type names),
              dataset_name (the case), max_batch_size, is_quantized
  workload    model, test_perf, test_accuracy, test_numeric, clients,
              iterations (min_query_count), batch_sizes, data_percent, compile_only

The data set is ``ByteMLPerfDataset``: ByteMLPerf's Dataset interface over the
case's data loader, read into memory (bounded) the first time it is used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from common.errors import DataError, EngineError
from common.layout import framework_dir

if TYPE_CHECKING:
    from contract.config import CaseConfig

# ONNX TensorProto element type -> ByteMLPerf's input_type name (int64 is "LONG", as its model zoo writes).
ONNX_TYPES = {
    1: "FLOAT32",
    2: "UINT8",
    3: "INT8",
    6: "INT32",
    7: "LONG",
    9: "BOOL",
    10: "FLOAT16",
    11: "FLOAT64",
    16: "BFLOAT16",
}
NUMPY_TYPES = {
    "FLOAT32": "float32",
    "FLOAT16": "float16",
    "FLOAT64": "float64",
    "UINT8": "uint8",
    "INT8": "int8",
    "INT32": "int32",
    "INT64": "int64",
    "LONG": "int64",
    "BOOL": "bool",
}
MAX_DATASET_SAMPLES = 1024
MAX_DATASET_BYTES = 256 * 2**20


@dataclass(frozen=True)
class OnnxSignature:
    """The graph inputs (initializers excluded) and outputs of an ONNX file."""

    input_names: tuple[str, ...]
    input_types: tuple[str, ...]
    input_dims: tuple[tuple[int | None, ...], ...]  # None for a symbolic axis
    output_names: tuple[str, ...]

    @classmethod
    def read(cls, path: str) -> "OnnxSignature":
        import onnx

        try:
            graph = onnx.load(str(path), load_external_data=False).graph
        except Exception as exc:  # noqa: BLE001 - onnx raises DecodeError, OSError, ...
            raise EngineError(f"{path}: cannot read the ONNX model for the ByteMLPerf backend: {exc}") from None
        initializers = {init.name for init in graph.initializer}
        inputs = [value for value in graph.input if value.name not in initializers]
        types, dims = [], []
        for value in inputs:
            tensor = value.type.tensor_type
            types.append(ONNX_TYPES.get(tensor.elem_type, f"ONNX_TYPE_{tensor.elem_type}"))
            dims.append(
                tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tensor.shape.dim)
            )
        return cls(tuple(v.name for v in inputs), tuple(types), tuple(dims), tuple(v.name for v in graph.output))


FRAMEWORK_WORDS = {"pytorch": "torch"}  # InferPerf's case framework -> ByteMLPerf's word in model names


def byte_precision(config: CaseConfig) -> str:
    return "fp16" if config.fp16 else "fp32"


def model_name(case: str, framework: str, precision: str) -> str:
    """ByteMLPerf's model naming, <name>-<framework>-<precision>, e.g. resnet50-torch-fp32: the
    source model's framework, as ByteMLPerf keeps it when a backend converts the model to ONNX."""
    base = framework_dir(framework)
    return f"{case}-{FRAMEWORK_WORDS.get(base, base)}-{precision}"


def model_info(
    config: CaseConfig, onnx_path: str, signature: OnnxSignature, sample_shapes: Callable[[], list[tuple[int, ...]]]
) -> dict[str, Any]:
    """``configs["model_info"]`` (module docstring). ``sample_shapes`` is asked only when the
    ONNX file leaves a non-batch axis symbolic (the data then says how long it is)."""
    if any(None in dims[1:] for dims in signature.input_dims):
        per_sample = [tuple(shape[1:]) for shape in sample_shapes()]
    else:  # every non-batch axis is fixed
        per_sample = [tuple(d for d in dims[1:] if d is not None) for dims in signature.input_dims]
    batch_sizes = config.batch_sizes if isinstance(config.batch_sizes, list) else []
    return {
        "model": model_name(config.case, config.framework, byte_precision(config)),
        "model_path": str(onnx_path),
        "framework": "Onnx",
        "framework_version": _onnx_version(),
        "model_format": "onnx",
        "model_precision": byte_precision(config).upper(),
        "inputs": ",".join(signature.input_names),
        "outputs": ",".join(signature.output_names),
        "input_shape": {name: [1, *map(int, dims)] for name, dims in zip(signature.input_names, per_sample)},
        "input_type": ",".join(signature.input_types),
        "dataset_name": config.case,
        "max_batch_size": max([config.batch_size, *batch_sizes]),
        "is_quantized": False,
    }


def _onnx_version() -> str:
    import onnx

    return onnx.__version__


def workload(config: CaseConfig, batch_sizes: list[int]) -> dict[str, Any]:
    """``configs["workload"]``: ByteMLPerf's workload keys, with InferPerf's values."""
    return {
        "model": model_name(config.case, config.framework, byte_precision(config)),
        "test_perf": config.get("test_perf", True) is not False,
        "test_accuracy": config.get("test_accuracy", True) is not False,
        "test_numeric": bool(config.numeric_check),
        "clients": max(config.clients),
        "iterations": int(config.min_query_count),
        "batch_sizes": list(batch_sizes),
        "data_percent": config.get("data_percent", 100) or 100,
        "compile_only": bool(config.compile_only),
    }


class ByteMLPerfDataset:
    """ByteMLPerf's Dataset interface (``name``, ``get_item_count``, ``get_batch_count``,
    ``preprocess``, ``get_samples``, ``rebatch``, ``get_fake_samples``) over the samples of
    an InferPerf data loader: at most MAX_DATASET_SAMPLES samples (and MAX_DATASET_BYTES),
    read the first time anything asks, as NumPy arrays keyed by the ONNX input names."""

    def __init__(self, source: Callable[[], Any], input_names: tuple[str, ...], batch_size: int, name: str) -> None:
        self._source = source
        self._names = input_names
        self._name = name
        self.cur_bs = batch_size
        self._samples: list | None = None  # one array per input, samples along axis 0
        self._labels: Any = None

    # -- ByteMLPerf's interface --------------------------------------------------
    def name(self) -> str:
        return self._name

    def preprocess(self) -> None:
        return None

    def get_item_count(self) -> int:
        return int(self._data()[0].shape[0])

    def get_batch_count(self) -> int:
        return math.ceil(self.get_item_count() / self.cur_bs)

    def rebatch(self, new_bs: int, skip: bool = True) -> None:
        self.cur_bs = int(new_bs)

    def get_samples(self, sample_id: int) -> tuple[dict, Any]:
        if not 0 <= sample_id < self.get_batch_count():
            raise ValueError("Your Input ID is out of range")
        window = slice(sample_id * self.cur_bs, (sample_id + 1) * self.cur_bs)
        labels = self._labels[window] if self._labels is not None else None
        return {name: array[window] for name, array in zip(self._names, self._data())}, labels

    def get_fake_samples(self, batch_size: int, shape: dict, input_type: list) -> dict:
        import numpy as np

        if not input_type:
            raise ValueError("Please provide input type")
        data = {}
        for (key, dims), kind in zip(shape.items(), input_type):
            dims = [dims[0] * batch_size, *dims[1:]]
            data[key] = np.random.random(size=dims).astype(NUMPY_TYPES.get(kind, "float32"))
        return data

    # -- for the adapter -----------------------------------------------------------
    def sample_shapes(self) -> list[tuple[int, ...]]:
        return [tuple(array.shape) for array in self._data()]

    def _data(self) -> list:
        if self._samples is None:
            self._samples, self._labels = _read(self._source(), len(self._names))
        return self._samples


def _read(loader: Any, inputs: int) -> tuple[list, Any]:
    """The first samples of ``loader``, bounded; one NumPy array per model input, and the labels."""
    import numpy as np
    import torch

    from tools.measure.loop import as_input_list

    parts: list[list] = []
    labels: list = []
    count = size = 0
    for x, y in loader:
        batch = [t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t) for t in as_input_list(x)]
        if len(batch) != inputs:
            raise DataError(f"the data loader yields {len(batch)} inputs; the ONNX model takes {inputs}")
        parts.append(batch)
        labels.append(y.detach().cpu().numpy() if isinstance(y, torch.Tensor) else y)
        count += batch[0].shape[0]
        size += sum(a.nbytes for a in batch)
        if count >= MAX_DATASET_SAMPLES or size >= MAX_DATASET_BYTES:
            break
    if not parts:
        raise DataError("the data loader yielded no batches for the ByteMLPerf backend")
    samples = [np.concatenate([p[i] for p in parts])[:MAX_DATASET_SAMPLES] for i in range(inputs)]
    joined = (
        np.concatenate(labels)[:MAX_DATASET_SAMPLES] if all(isinstance(label, np.ndarray) for label in labels) else None
    )
    return samples, joined
