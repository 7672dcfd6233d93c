"""torch.compile with the Inductor backend: NVIDIA's vendor compiler for when
TensorRT is not installed (Triton kernels on CUDA, C++/OpenMP kernels on CPU).

Inductor compiles the framework's PyTorch model, not the ONNX file, so it
needs ``no_validation: false``. The ONNX file is only read for the input
shapes of the warm-up batch. Nothing is serialized (``engine_suffix = None``);
Inductor keeps its own kernel cache on disk (TORCHINDUCTOR_CACHE_DIR), which
makes a second compile faster but never changes steady-state speed.

Config keys (vendor_config/nvidia_configurations.yaml):
  device            cuda | cuda:N | cpu      where the model runs
  inductor_mode     default | reduce-overhead | max-autotune | max-autotune-no-cudagraphs
  inductor_dynamic  false (default): one specialised graph per batch shape
                    true: one graph with a symbolic batch dimension

Timing (see tools/measure/loop.py): core is one compiled call including the
host->device copy of the inputs and the device->host copy of the outputs.
Compilation for the configured batch shape happens in __init__ and is not
timed. A shape first seen during inference (the last, partial batch) is
compiled in that call; the call then runs again for its result, and the
compile-and-first-run time is returned as ``foo_time`` so it is excluded
from core and whole.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from loguru import logger

from common.errors import ConfigError, EngineError
from contract.config import CaseConfig, check_choice, check_flag
from contract.engine_base import EngineBase

_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
_SOURCE = "inference_engine/nvidia/inductor.py"


def preflight(config: CaseConfig) -> None:
    check_choice(config, "inductor_mode", config.get("inductor_mode", "default"), _MODES)
    check_flag(config, "inductor_dynamic", config.get("inductor_dynamic", False))
    import torch

    if str(config.device).startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(
                f"vendor 'nvidia' compiler 'inductor' with device {config.device!r} needs a CUDA GPU, but "
                "torch.cuda.is_available() is False (no driver, no GPU passed to the container, or a CPU-only torch)"
            )
    else:
        import shutil

        # Inductor's CPU backend writes C++ and builds it at run time; without a
        # compiler the failure would come mid-benchmark as a long traceback.
        if not any(shutil.which(cxx) for cxx in ("g++", "c++", "clang++")):
            raise ConfigError("vendor 'nvidia' compiler 'inductor' on device 'cpu' needs a C++ compiler (g++) on PATH")


def _onnx_example_shapes(onnx_path: str | None, batch_size: int) -> list[tuple[tuple[int, ...], Any]] | None:
    """(shape, numpy dtype) of each graph input, the symbolic batch axis set to
    ``batch_size``; None when the file is absent or a non-batch axis is symbolic."""
    if not onnx_path or not Path(onnx_path).is_file():
        return None
    import onnx
    from onnx import helper

    graph = onnx.load(onnx_path, load_external_data=False).graph
    initializers = {init.name for init in graph.initializer}
    examples = []
    for value in graph.input:
        if value.name in initializers:  # old exporters list weights as inputs too
            continue
        tensor_type = value.type.tensor_type
        shape = []
        for axis, dim in enumerate(tensor_type.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value > 0:
                shape.append(dim.dim_value)
            elif axis == 0:
                shape.append(batch_size)
            else:
                return None
        examples.append((tuple(shape), helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)))
    return examples or None


class InferModel(EngineBase):
    engine_suffix = None

    def __init__(self, config: CaseConfig, onnx_path: str | None, model: Any) -> None:
        super().__init__(config, onnx_path, model)
        if model is None:
            raise EngineError(
                f"{_SOURCE}: Inductor compiles the framework model, but there is none (no_validation: true); set "
                "no_validation: false or use compiler: tensorrt"
            )
        import torch

        if not isinstance(model, torch.nn.Module):  # benchmarks/onnx_model's is ONNX Runtime running the file
            raise EngineError(
                f"{_SOURCE}: Inductor compiles a PyTorch model; this case's framework model is a "
                f"{type(model).__name__}: use compiler: tensorrt"
            )

        self._torch = torch
        self.device = torch.device(config.device)
        self.mode = config.get("inductor_mode", "default")
        self.dynamic = bool(config.get("inductor_dynamic", False))
        on_cuda = self.device.type == "cuda"
        if config.fp16 and not on_cuda:
            # CPU fp16 convolution/matmul kernels are missing or emulated; a
            # "fp16" CPU number would measure conversions, not fp16 compute.
            logger.warning(
                "fp16 requested, but Inductor runs on device 'cpu' where fp16 conv/matmul kernels are slow or missing: "
                "running fp32"
            )
        self.half = bool(config.fp16) and on_cuda
        self.precision = "fp16" if self.half else self._fp32_precision(torch) if on_cuda else "fp32"
        # The framework already placed the model (benchmarks/common.place_model);
        # repeating it is a no-op then and makes the engine correct on its own.
        model = model.eval().to(self.device)
        if self.half:
            model = model.half()
        self.compiled_model = torch.compile(model, mode=self.mode, dynamic=self.dynamic, backend="inductor")
        # reduce-overhead records a CUDA graph on the second call of a shape, so
        # a new shape needs two untimed calls before it runs at steady state.
        self._pre_runs = 2 if self.mode == "reduce-overhead" and on_cuda else 1
        self._seen: set[tuple] = set()
        self.lazy_compiles: list[dict] = []

        examples = _onnx_example_shapes(onnx_path, int(config.batch_size))
        self.compile_duration = 0.0
        if examples is None:
            logger.warning(
                f"{_SOURCE}: no readable ONNX input shapes ({onnx_path}); compiling on the first batch instead, "
                "reported as foo_time"
            )
        else:
            import numpy as np

            inputs = [torch.from_numpy(np.zeros(shape, dtype=dtype)) for shape, dtype in examples]
            start = time.perf_counter()
            self._run_untimed(inputs)
            self.compile_duration = time.perf_counter() - start
            logger.info(
                f"Inductor ({self.mode}, dynamic={self.dynamic}) compiled for {[s for s, _ in examples]} in "
                f"{self.compile_duration:.2f} s"
            )

    def _fp32_precision(self, torch: Any) -> str:
        """PyTorch lets cuDNN convolutions use TF32 by default on Ampere and later;
        an "fp32" run there is a TF32 run, and MFU must use the TF32 peak."""
        tf32_allowed = torch.backends.cudnn.allow_tf32 or torch.backends.cuda.matmul.allow_tf32
        return "tf32" if tf32_allowed and torch.cuda.get_device_capability(self.device) >= (8, 0) else "fp32"

    # ---- calls ---------------------------------------------------------------
    def _signature(self, inputs: list) -> tuple:
        return tuple((tuple(t.shape), t.dtype) for t in inputs)

    def _to_device(self, inputs: list) -> list:
        torch = self._torch
        return [
            t.to(self.device, dtype=torch.float16) if self.half and t.is_floating_point() else t.to(self.device)
            for t in inputs
        ]

    def _forward(self, inputs: list) -> list:
        torch = self._torch
        with torch.inference_mode():
            result = self.compiled_model(*self._to_device(inputs))
        outputs = list(result) if isinstance(result, (list, tuple)) else [result]
        # .cpu() copies, which also detaches from CUDA-graph output memory that
        # the next replay would overwrite.
        host = [o.float().cpu() if o.is_floating_point() else o.cpu() for o in outputs]
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return host

    def _run_untimed(self, inputs: list) -> None:
        for _ in range(self._pre_runs):
            self._forward(inputs)
        self._seen.add(self._signature(inputs))

    def __call__(self, inputs: list) -> tuple[list, float]:
        foo_time = 0.0
        signature = self._signature(inputs)
        if signature not in self._seen:
            start = time.perf_counter()
            self._run_untimed(inputs)
            foo_time = time.perf_counter() - start
            self.lazy_compiles.append({"shapes": [list(s) for s, _ in signature], "duration_s": foo_time})
            logger.info(
                f"Inductor compiled for new input shapes {[list(s) for s, _ in signature]} in {foo_time:.2f} s "
                "(foo_time)"
            )
        return self._forward(inputs), foo_time

    # ---- optional richer API -------------------------------------------------
    def version(self) -> str:
        torch = self._torch
        text = f"torch {torch.__version__} inductor on {self.device}"
        if self.device.type == "cuda":
            text += f" ({torch.cuda.get_device_name(self.device)})"
            try:
                import triton

                text += f", triton {triton.__version__}"
            except ImportError:
                pass
        return text

    def compile_report(self) -> dict:
        report = {
            "compile_precision": self.precision.upper(),
            "compile_status": "success",
            "compile_duration": self.compile_duration,
            "backend": "inductor",
            "device": str(self.device),
            "optimizations": {"mode": self.mode, "dynamic": self.dynamic},
            "core_includes_copies": True,
        }
        try:
            from torch._dynamo.utils import counters

            # Graph breaks are Inductor's fallback: code between graphs runs eagerly.
            report["unique_graphs"] = int(counters["stats"].get("unique_graphs", 0))
            report["graph_breaks"] = int(sum(counters["graph_break"].values()))
        except Exception as exc:  # private API; informative only
            logger.debug(f"dynamo counters unavailable: {exc}")
        return report
