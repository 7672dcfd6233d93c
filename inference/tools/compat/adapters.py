"""Output adapters (FlagPerf spec §4.2.3): let an engine written for FlagPerf serve InferPerf's cases.

InferPerf's engine contract: ``engine(inputs) -> (outputs, foo_time)`` with
``outputs`` a list of CPU tensors, one per ONNX output, batch first, exactly
as many rows as the inputs. FlagPerf's engines meet it loosely; the adapter
fixes up, per call and without touching ``foo_time``:

  stacked     ``outputs`` is one tensor holding every output along dimension 0
              (or is the single output itself): unstacked into a list;
  flat        an output is a 1-D buffer sized for the engine's maximum batch
              (TensorRT-8 style host buffers): reshaped to the ONNX output's
              per-sample shape (or, with no ONNX file, ``numel / batch_size``
              per sample) and trimmed to the call's batch;
  max batch   an output shaped like the ONNX output but with more rows than the
              inputs: trimmed to the call's batch;
  placement   NumPy arrays become tensors; device tensors are copied to the CPU.

Selection (config key ``output_adapter``): ``flagperf`` always adapts,
``none`` never does, ``auto`` (the default) adapts when the engine follows
FlagPerf's conventions: its ``InferModel`` does not derive from
``contract.engine_base.EngineBase``, or the config sets FlagPerf's
``has_dynamic_axis``. InferPerf's own engines derive from EngineBase, so their
contract stays strict (a bare tensor is still an error).

Every engine the framework holds is an ``EngineBase`` (``as_engine``): one that does not
derive from it is wrapped once, in a ``ForeignEngine`` (or the ``OutputAdapter``, which is
one), whose declared members answer from what the engine has, and the base's defaults
("not supported") for what it lacks. This module is the one place that probes an engine's
optional members by name; the rest of the framework calls the declared API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from common.errors import ConfigError, EngineError
from contract.config.case import origin_of
from contract.engine_base import EngineBase, OptionalMethod

if TYPE_CHECKING:
    from contract.config import CaseConfig

ADAPTER_MODES = ("auto", "flagperf", "none")


def onnx_output_shapes(path: str | None) -> list[tuple] | None:
    """Each ONNX output's shape: ints for fixed axes, None for symbolic ones; None if unreadable."""
    if not path:
        return None
    try:
        import onnx

        model = onnx.load(str(path), load_external_data=False)
    except Exception:
        return None
    shapes = []
    for output in model.graph.output:
        dims = output.type.tensor_type.shape.dim
        shapes.append(tuple(int(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0 else None for d in dims))
    return shapes


def wants_adapter(engine: Any, config: CaseConfig) -> bool:
    """Whether ``config`` (key ``output_adapter``) or the engine's conventions select the adapter."""
    mode = config.get("output_adapter", "auto")
    if mode not in ADAPTER_MODES:
        origin = origin_of(config, "output_adapter")
        raise ConfigError(f"{origin}: key 'output_adapter' must be one of {', '.join(ADAPTER_MODES)}, got {mode!r}")
    if mode != "auto":
        return mode == "flagperf"
    return not isinstance(engine, EngineBase) or "has_dynamic_axis" in config.as_dict()


def engine_suffix(engine_class: Any) -> str | None:
    """The class's ``engine_suffix`` (EngineBase's declared default for a class that lacks it),
    read before the engine is built."""
    if isinstance(engine_class, type) and issubclass(engine_class, EngineBase):
        return engine_class.engine_suffix
    return getattr(engine_class, "engine_suffix", None)


def as_engine(engine: Any) -> EngineBase:
    """``engine`` itself when it is an EngineBase, else wrapped in a ForeignEngine."""
    return engine if isinstance(engine, EngineBase) else ForeignEngine(engine)


class ForeignEngine(EngineBase):
    """An engine seen through EngineBase's declared API: the members the wrapped engine has
    are its own, the rest are the base's defaults. Attributes are read once, when it is
    wrapped (after the engine's construction); any other attribute is the engine's own."""

    def __init__(self, engine: Any) -> None:  # the wrapped engine was constructed already
        self.engine = engine
        self.precision = getattr(engine, "precision", None)
        self.compiled = getattr(engine, "compiled", None)
        self.rebuild_per_batch_size = bool(getattr(engine, "rebuild_per_batch_size", False))

    def __getattr__(self, name: str) -> Any:
        # config, onnx_path and whatever else the engine keeps stay the engine's own.
        return getattr(self.__dict__["engine"], name)

    def __call__(self, inputs: list) -> Any:
        return self.engine(inputs)

    def implements(self, method: OptionalMethod) -> bool:
        inner = self.engine
        return inner.implements(method) if isinstance(inner, EngineBase) else callable(getattr(inner, method, None))

    def _own(self, method: OptionalMethod, *args: Any) -> Any:
        """The wrapped engine's ``method(*args)``; None when it has none."""
        return getattr(self.engine, method)(*args) if self.implements(method) else None

    def version(self) -> str | None:
        return self._own("version")

    def compile_report(self) -> dict | None:
        return self._own("compile_report")

    def is_supported(self, op_type: str) -> bool:
        return bool(self._own("is_supported", op_type))

    def supported_ops(self) -> set[str] | None:
        return self._own("supported_ops")

    def get_performance_data(self, inputs: list) -> list[dict] | None:
        return self._own("get_performance_data", inputs)

    def best_batch_sizes(self) -> list[int] | None:
        return self._own("best_batch_sizes")

    def call_numpy(self, arrays: list) -> tuple[list, float]:
        return self._own("call_numpy", arrays)

    def prepare_batch_size(self, batch_size: int) -> None:
        self._own("prepare_batch_size", batch_size)

    def own_benchmark(self, batch_sizes: list[int], dataloader: Any) -> dict | None:
        return self._own("own_benchmark", batch_sizes, dataloader)

    @property
    def vendor_engine(self) -> object:
        inner = self.engine
        return inner.vendor_engine if isinstance(inner, EngineBase) else inner


class OutputAdapter(ForeignEngine):
    """Wraps an engine; calls it and returns outputs in InferPerf's shape (module docstring)."""

    def __init__(self, engine: Any, output_shapes: Sequence[tuple] | None, batch_size: int) -> None:
        super().__init__(engine)
        self.output_shapes = list(output_shapes) if output_shapes else None
        self.batch_size = batch_size

    def __call__(self, inputs: list) -> Any:
        result = self.engine(inputs)
        if not (isinstance(result, tuple) and len(result) == 2):
            return result  # not (outputs, foo_time): timed_forward reports the broken contract
        outputs, foo_time = result
        rows = len(inputs[0]) if inputs else self.batch_size
        return self.adapt(outputs, rows), foo_time

    def implements(self, method: OptionalMethod) -> bool:
        # call_numpy would hand back the engine's outputs unadapted: the pass calls __call__ instead
        return method != "call_numpy" and super().implements(method)

    def adapt(self, outputs: Any, rows: int) -> list:
        import numpy as np
        import torch

        if isinstance(outputs, np.ndarray):
            outputs = torch.from_numpy(outputs)
        if isinstance(outputs, torch.Tensor):
            outputs = self._unstack(outputs)
        elif isinstance(outputs, (list, tuple)):
            outputs = list(outputs)
        else:
            raise EngineError(f"engine outputs must be tensors, got {type(outputs).__name__}")
        adapted = []
        for index, output in enumerate(outputs):
            if isinstance(output, np.ndarray):
                output = torch.from_numpy(output)
            if not isinstance(output, torch.Tensor):
                raise EngineError(f"engine output {index} must be a tensor, got {type(output).__name__}")
            adapted.append(self._fit(output.cpu() if output.device.type != "cpu" else output, index, rows))
        return adapted

    def _unstack(self, tensor: Any) -> list:
        """One tensor: the single output itself, or every output stacked along dimension 0."""
        shapes = self.output_shapes
        count = len(shapes) if shapes else 1
        if count == 1 and not (shapes and tensor.dim() == len(shapes[0]) + 1 and tensor.shape[0] == 1):
            return [tensor]
        if tensor.shape[0] != count:
            raise EngineError(f"engine returned one tensor of shape {tuple(tensor.shape)} for {count} ONNX outputs")
        return list(tensor.unbind(0))

    def _fit(self, output: Any, index: int, rows: int) -> Any:
        shape = self.output_shapes[index] if self.output_shapes and index < len(self.output_shapes) else None
        if shape is not None and len(shape) > 1 and output.dim() == 1:
            per_sample = shape[1:]
            if any(d is None for d in per_sample):
                raise EngineError(f"engine output {index} is flat, but ONNX output shape {shape} has symbolic axes")
            output = output.reshape(-1, *per_sample)
        elif shape is None and output.dim() == 1 and output.numel() > rows and output.numel() % self.batch_size == 0:
            output = output.reshape(self.batch_size, -1)  # no ONNX file: assume a max-batch buffer of batch_size
        if output.dim() >= 1 and output.shape[0] > rows and (shape is None or len(shape) == output.dim()):
            output = output[:rows]
        if output.dim() >= 1 and output.shape[0] < rows:
            raise EngineError(
                f"engine output {index} has {output.shape[0]} rows for a batch of {rows}"
                + (f" (ONNX output shape {shape})" if shape else "")
            )
        return output


def adapt_engine(engine: Any, config: CaseConfig, onnx_path: str | None) -> EngineBase:
    """The engine wrapped in an OutputAdapter when ``wants_adapter`` says so, else as an
    EngineBase (``as_engine``)."""
    if not wants_adapter(engine, config):
        return as_engine(engine)
    shapes = onnx_output_shapes(onnx_path)
    from loguru import logger

    logger.info(
        "engine outputs adapted the FlagPerf way (stacked/flat/max-batch -> list of per-batch tensors), "
        + (f"ONNX output shapes {shapes}" if shapes else "no ONNX shapes: flat buffers split by batch_size")
    )
    return OutputAdapter(engine, shapes, int(config.batch_size))
