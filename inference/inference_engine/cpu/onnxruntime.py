"""ONNX Runtime on the CPU execution provider: the default vendor's compiler.

"Compiling" is ONNX Runtime's graph optimisation, serialised to
``config.engine_path`` so a later run loads the optimised graph directly.
The optimised file may contain CPU-specific layouts, which is why the
framework keys the engine cache on the CPU model as well.

Config keys (vendor_config/cpu_configurations.yaml):
  intra_op_num_threads   0 = ONNX Runtime's default (one per physical core)
  inter_op_num_threads   0 = default
  execution_mode         sequential | parallel
  graph_optimization_level   all | extended | basic | disable
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from loguru import logger

from common.errors import ConfigError, EngineError, reraise_interrupt
from common.files import atomic_path
from common.onnx_files import onnx_external_locations
from contract.config import CaseConfig, check_choice, origin_of
from contract.engine_base import EngineBase

_LEVELS = {
    "all": "ORT_ENABLE_ALL",
    "extended": "ORT_ENABLE_EXTENDED",
    "basic": "ORT_ENABLE_BASIC",
    "disable": "ORT_DISABLE_ALL",
}
_MODES = {"sequential": "ORT_SEQUENTIAL", "parallel": "ORT_PARALLEL"}
_PROVIDER = "CPUExecutionProvider"
_PROTOBUF_LIMIT = 2 * 1024**3 - 64 * 1024**2


def preflight(config: CaseConfig) -> None:
    try:
        import onnxruntime  # noqa: F401
    except ImportError as exc:
        reraise_interrupt(exc)
        raise ConfigError(
            "vendor 'cpu' compiler 'onnxruntime' needs the onnxruntime package (pip install onnxruntime)"
        ) from None
    # null in configurations.yaml: the default
    check_choice(config, "graph_optimization_level", config.get("graph_optimization_level") or "all", _LEVELS)
    check_choice(config, "execution_mode", config.get("execution_mode", "sequential"), _MODES)
    for key in ("intra_op_num_threads", "inter_op_num_threads"):
        value = config.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"{origin_of(config, key)}: key '{key}' must be a non-negative integer, got {value!r}")


class InferModel(EngineBase):
    engine_suffix = ".ort.onnx"

    def __init__(self, config: CaseConfig, onnx_path: str | None, model: Any) -> None:
        super().__init__(config, onnx_path, model)
        import onnxruntime as ort

        self._ort = ort
        if config.fp16:
            # MLAS on x86 has no fp16 Conv/Gemm kernels; a converted model would run
            # through inserted casts and report a precision it did not compute in.
            logger.warning(
                "fp16 requested, but ONNX Runtime's CPU provider has no fp16 Conv/MatMul kernels on x86: running fp32"
            )
        self.precision = "fp32"
        self.optimization_level = config.get("graph_optimization_level") or "all"
        engine_path = Path(config.engine_path) if config.engine_path else None

        start = time.perf_counter()
        if engine_path is not None and engine_path.is_file():
            self.session = self._load(engine_path)
            self.compiled = False
            self.model_file = engine_path
        else:
            if onnx_path is None or not Path(onnx_path).is_file():
                raise EngineError(f"ONNX file not found: {onnx_path}")
            self.session = self._compile(Path(onnx_path), engine_path)
            self.compiled = True
            self.model_file = engine_path or Path(onnx_path)
        self.compile_duration = time.perf_counter() - start
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        import torch

        self._from_numpy = torch.from_numpy  # the outputs as the contract's tensors, bound once (__call__)

    def _options(self, level: str) -> Any:
        ort = self._ort
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(self.config.get("intra_op_num_threads", 0))
        options.inter_op_num_threads = int(self.config.get("inter_op_num_threads", 0))
        options.execution_mode = getattr(ort.ExecutionMode, _MODES[self.config.get("execution_mode", "sequential")])
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _LEVELS[level])
        options.log_severity_level = 3
        return options

    def _compile(self, onnx_path: Path, engine_path: Path | None) -> Any:
        options = self._options(self.optimization_level)
        source: str | bytes = str(onnx_path)
        if onnx_external_locations(onnx_path):
            # ONNX Runtime writes an optimised model that still points at the source's
            # external-data file, by a path relative to the source, so the cached engine
            # would load nothing (or the wrong weights). Under protobuf's 2 GB limit the
            # weights go in the model and the engine is one file; beyond it they go to
            # <engine>.data beside the engine (sealed with it by the framework).
            source = self._inline_external_data(onnx_path, options, engine_path)
        with contextlib.ExitStack() as stack:
            if engine_path is not None:
                tmp = stack.enter_context(atomic_path(engine_path))
                options.optimized_model_filepath = str(tmp)
            try:
                session = self._ort.InferenceSession(source, options, providers=[_PROVIDER])
            except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph types
                raise EngineError(
                    f"{onnx_path}: onnxruntime could not compile the model: {str(exc).splitlines()[0]}"
                ) from None
        return session

    @staticmethod
    def _inline_external_data(onnx_path: Path, options: Any, engine_path: Path | None) -> str | bytes:
        import onnx

        try:
            model = onnx.load(str(onnx_path), load_external_data=True)
        except Exception as exc:  # noqa: BLE001 - a missing or short data file
            raise EngineError(
                f"{onnx_path}: cannot read the model's external data: {' '.join(str(exc).split())[:200]}"
            ) from None
        if model.ByteSize() < _PROTOBUF_LIMIT:
            return model.SerializeToString()
        if engine_path is not None:
            options.add_session_config_entry(
                "session.optimized_model_external_initializers_file_name", engine_path.name + ".data"
            )
        return str(onnx_path)

    def _load(self, engine_path: Path) -> Any:
        try:
            # Already optimised at compile time: loading must not optimise again.
            return self._ort.InferenceSession(str(engine_path), self._options("disable"), providers=[_PROVIDER])
        except Exception as exc:
            raise EngineError(
                f"{engine_path}: onnxruntime could not load the engine: {str(exc).splitlines()[0]}"
            ) from None

    def __call__(self, inputs: list) -> tuple[list, float]:
        # The timed call (tools/measure/loop.py's core): what the torch-tensor contract needs
        # around session.run and nothing else, no import or attribute chain per call
        # (bench/harness_overhead.py; tests/test_engine_hot_path.py counts it).
        names = self.input_names
        if len(inputs) != len(names):
            raise EngineError(f"engine expects {len(names)} inputs {names}, got {len(inputs)}")
        outputs = self.session.run(self.output_names, dict(zip(names, [tensor.numpy() for tensor in inputs])))
        return list(map(self._from_numpy, outputs)), 0.0

    def call_numpy(self, arrays: list) -> tuple[list, float]:
        # ONNX Runtime's own numpy arrays in and out: session.run returns fresh arrays every call.
        names = self.input_names
        if len(arrays) != len(names):
            raise EngineError(f"engine expects {len(names)} inputs {names}, got {len(arrays)}")
        return self.session.run(self.output_names, dict(zip(names, arrays))), 0.0

    # ---- optional richer API -------------------------------------------------
    def version(self) -> str:
        return f"onnxruntime {self._ort.__version__} ({_PROVIDER})"

    def supported_ops(self) -> set[str]:
        from onnxruntime.capi import _pybind_state

        return {
            kernel.op_name
            for kernel in _pybind_state.get_all_opkernel_def()
            if kernel.provider == _PROVIDER and kernel.domain in ("", "ai.onnx")
        }

    def compile_report(self) -> dict:
        return {
            "compile_precision": self.precision.upper(),
            "compile_status": "success",
            "compile_duration": self.compile_duration,
            "compiled": self.compiled,
            "optimizations": {"graph_optimization_level": self.optimization_level},
            "providers": self.session.get_providers(),
        }

    def best_batch_sizes(self) -> list[int]:
        # CPU throughput saturates once a batch keeps every core busy; beyond that
        # larger batches only add latency.
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return sorted({1, max(1, cores), max(1, 2 * cores), int(self.config.batch_size)})

    def get_performance_data(self, inputs: list, iterations: int = 5) -> list[dict]:
        """Per-op time from ONNX Runtime's profiler, on a separate session so the
        measured run carries no profiling overhead."""
        options = self._options("disable")
        with tempfile.TemporaryDirectory(prefix="ort_profile_") as tmp:
            options.enable_profiling = True
            options.profile_file_prefix = os.path.join(tmp, "profile")
            session = self._ort.InferenceSession(str(self.model_file), options, providers=[_PROVIDER])
            feeds = {name: tensor.numpy() for name, tensor in zip(self.input_names, inputs)}
            for _ in range(iterations):
                session.run(self.output_names, feeds)
            trace_path = session.end_profiling()
            events = json.loads(Path(trace_path).read_text())
        totals: dict[tuple[str, str], list[float]] = defaultdict(list)
        for event in events:
            if event.get("cat") != "Node" or not str(event.get("name", "")).endswith("_kernel_time"):
                continue
            node = event["name"][: -len("_kernel_time")]
            op = event.get("args", {}).get("op_name", "")
            totals[(node, op)].append(event.get("dur", 0) / 1000.0)
        rows = [
            {
                "node": node,
                "op_type": op,
                "calls": len(durations),
                "mean_ms": sum(durations) / len(durations),
                "total_ms": sum(durations),
            }
            for (node, op), durations in totals.items()
        ]
        return sorted(rows, key=lambda row: row["total_ms"], reverse=True)
