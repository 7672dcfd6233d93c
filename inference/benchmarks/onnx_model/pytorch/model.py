"""The framework model of the onnx_model case: ONNX Runtime on CPU running the file as it is.

It is the reference of the numeric check (the vendor engine's outputs against
its own, on the same inputs) and what framework validation times. Graph
optimisation is ONNX Runtime's basic level (constant folding and redundant-node
removal, no fused kernels), so a vendor's fusions are checked against unfused
arithmetic. It is already engine-shaped (a list of CPU tensors in, ``(outputs,
foo_time)`` out), so ``framework_step`` hands it over as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from loguru import logger

from common.errors import ConfigError, EngineError

if TYPE_CHECKING:
    from contract.config import CaseConfig

PROVIDER = "CPUExecutionProvider"


class OnnxRuntimeReference:
    def __init__(self, path: str, threads: int = 0) -> None:
        try:
            import onnxruntime as ort
        except ImportError:
            raise ConfigError(
                "the onnx_model case needs the onnxruntime package as its reference (pip install onnxruntime)"
            ) from None
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.intra_op_num_threads = threads
        options.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(path, options, providers=[PROVIDER])
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph/NotImplemented types
            raise EngineError(
                f"{path}: ONNX Runtime (CPU) cannot load it as the reference: {str(exc).splitlines()[0]}"
            ) from None
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.version = f"onnxruntime {ort.__version__} ({PROVIDER}, basic graph optimisation)"

    def __call__(self, inputs: list) -> tuple[list, float]:
        if len(inputs) != len(self.input_names):
            raise EngineError(f"reference expects {len(self.input_names)} inputs {self.input_names}, got {len(inputs)}")
        feeds = {name: tensor.numpy() for name, tensor in zip(self.input_names, inputs)}
        return [torch.from_numpy(output) for output in self.session.run(None, feeds)], 0.0


def create_model(config: CaseConfig) -> OnnxRuntimeReference:
    model = OnnxRuntimeReference(config.exist_onnx_path, int(config.get("intra_op_num_threads", 0)))
    logger.info(f"onnx_model: reference model is {model.version}")
    return model


def framework_step(model: OnnxRuntimeReference, config: CaseConfig) -> OnnxRuntimeReference:
    """The reference as the numeric check calls it (the case API's optional hook)."""
    return model
