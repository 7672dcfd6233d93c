"""TensorRT (>= 10) from ONNX: NVIDIA's standard-case compiler (spec §1).

NOT YET RUN ON A GPU. The development machines have no GPU and no TensorRT;
this module is written against the TensorRT 10 Python API documentation
(name-based I/O: num_io_tensors / get_tensor_name / set_input_shape /
set_tensor_address / execute_async_v3). Only preflight() and the config
checks have been exercised. See docs/vendor_guide.md.

Build: trt.Builder + trt.OnnxParser (never trtexec), one optimisation profile
for a dynamic batch axis (min 1, opt batch_size, max trt_max_batch_size), a
timing cache in config.cache_dir, and the plan written atomically to
config.engine_path with a metadata sidecar (<plan>.json). A plan already at
config.engine_path (framework cache hit or exist_compiler_path) is loaded
instead of built.

Run: torch CUDA tensors are the device buffers, on one torch CUDA stream;
the call synchronises that stream before it returns CPU tensors.

Config keys (vendor_config/nvidia_configurations.yaml):
  fp16                       BuilderFlag.FP16: TensorRT may pick fp16 kernels per layer
  trt_tf32                   true (TensorRT's default): fp32 layers may run in TF32 on
                             Ampere and later, and precision is then reported as tf32
  trt_max_batch_size         profile max for the batch axis (default batch_size)
  trt_workspace_gib          workspace memory-pool limit in GiB (default: TensorRT's, all device memory)
  trt_core_includes_copies   true (default): core = H2D copy + execute + D2H copy,
                             like trtexec's "Latency".
                             false: the copies are timed with CUDA events and
                             returned as foo_time, so core = execute alone (plus
                             the host-side binding work), like trtexec's "GPU
                             Compute Time". The framework subtracts foo_time from
                             whole as well, so in this mode whole excludes the
                             copies too; result.json records which mode ran.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from loguru import logger

from common.errors import ConfigError, EngineError, reraise_interrupt
from common.files import atomic_path, fingerprint, json_text
from contract.config import CaseConfig, check_flag, origin_of
from contract.engine_base import EngineBase

_SOURCE = "inference_engine/nvidia/tensorrt.py"
_MIN_MAJOR = 10
# trt.DataType member name -> torch dtype name.
_TORCH_DTYPES = {
    "FLOAT": "float32",
    "HALF": "float16",
    "BF16": "bfloat16",
    "INT8": "int8",
    "INT32": "int32",
    "INT64": "int64",
    "BOOL": "bool",
    "UINT8": "uint8",
    "FP8": "float8_e4m3fn",
}


def _check_keys(config: CaseConfig) -> None:
    batch_size = int(config.batch_size)
    max_bs = config.get("trt_max_batch_size", None)
    if max_bs is not None and (isinstance(max_bs, bool) or not isinstance(max_bs, int) or max_bs < batch_size):
        raise ConfigError(
            f"{origin_of(config, 'trt_max_batch_size')}: key 'trt_max_batch_size' must be an integer >= batch_size "
            f"({batch_size}), got {max_bs!r}"
        )
    workspace = config.get("trt_workspace_gib", None)
    if workspace is not None and (
        isinstance(workspace, bool) or not isinstance(workspace, (int, float)) or workspace <= 0
    ):
        raise ConfigError(
            f"{origin_of(config, 'trt_workspace_gib')}: key 'trt_workspace_gib' must be a positive number of GiB or "
            f"null, got {workspace!r}"
        )
    for key in ("trt_core_includes_copies", "trt_tf32"):
        check_flag(config, key, config.get(key, True))


def preflight(config: CaseConfig) -> None:
    _check_keys(config)
    try:
        import tensorrt as trt
    except ImportError as exc:
        reraise_interrupt(exc)
        raise ConfigError(
            "vendor 'nvidia' compiler 'tensorrt' needs the TensorRT Python package, but 'import tensorrt' failed "
            f"({exc}); "
            "use the NGC image of docker_images/nvidia/pytorch, or compiler: inductor"
        ) from None
    major = int(str(trt.__version__).split(".")[0])
    if major < _MIN_MAJOR:
        raise ConfigError(
            f"vendor 'nvidia' compiler 'tensorrt' needs TensorRT >= {_MIN_MAJOR} (name-based I/O API), found "
            f"{trt.__version__}"
        )
    import torch

    if not torch.cuda.is_available():
        raise ConfigError(
            "vendor 'nvidia' compiler 'tensorrt' needs a CUDA GPU, but torch.cuda.is_available() is False "
            "(no driver, no GPU passed to the container, or a CPU-only torch)"
        )


def _make_logger(trt: Any) -> Any:
    """A TensorRT logger that forwards to loguru and remembers the last error,
    so a failed build is reported in one line with TensorRT's own reason."""

    class _Logger(trt.ILogger):
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.last_error: str | None = None

        def log(self, severity: Any, msg: str) -> None:
            if severity in (trt.ILogger.Severity.INTERNAL_ERROR, trt.ILogger.Severity.ERROR):
                self.last_error = " ".join(str(msg).split())
                logger.error(f"TensorRT: {msg}")
            elif severity == trt.ILogger.Severity.WARNING:
                logger.warning(f"TensorRT: {msg}")
            elif severity == trt.ILogger.Severity.INFO:
                logger.debug(f"TensorRT: {msg}")

    return _Logger()


def _write_atomic(path: Path, data: bytes | memoryview) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


class InferModel(EngineBase):
    engine_suffix = ".plan"
    # The optimisation profile is built for batch_size (up to trt_max_batch_size):
    # a batch-size sweep gets one plan per batch size, through the engine cache.
    rebuild_per_batch_size = True

    def __init__(self, config: CaseConfig, onnx_path: str | None, model: Any) -> None:
        super().__init__(config, onnx_path, model)
        import tensorrt as trt
        import torch

        _check_keys(config)
        self._trt, self._torch = trt, torch
        self.device = torch.device(config.device if str(config.device).startswith("cuda") else "cuda")
        if self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.core_includes_copies = bool(config.get("trt_core_includes_copies", True))
        self._logger = _make_logger(trt)
        self._support = None  # (builder, network, parser) kept alive for is_supported()
        self.network_layer_count: int | None = None
        self.timing_cache: dict | None = None
        self.gpu = {
            "name": torch.cuda.get_device_name(self.device),
            "compute_capability": list(torch.cuda.get_device_capability(self.device)),
        }

        engine_path = Path(config.engine_path) if config.engine_path else None
        start = time.perf_counter()
        blob, meta = self._load(engine_path) if engine_path is not None and engine_path.is_file() else (None, None)
        self.compiled = blob is None
        if blob is None:
            blob, meta = self._build(onnx_path, engine_path)
        self.runtime = trt.Runtime(self._logger)
        self.engine = self.runtime.deserialize_cuda_engine(blob)
        if self.engine is None:
            raise EngineError(
                f"{engine_path or 'built plan'}: TensorRT {trt.__version__} could not deserialize the engine "
                f"({self._logger.last_error or 'built by another TensorRT version or for another GPU?'})"
            )
        self.context = self.engine.create_execution_context()
        self.compile_duration = time.perf_counter() - start
        # Without a sidecar (a user's plan) only the config says what was built.
        self.precision = meta.get("precision") or ("fp16" if config.fp16 else "fp32")
        self.build_duration = meta.get("build_duration_s")
        self.network_layer_count = meta.get("network_layers", self.network_layer_count)

        self._bind_io()
        self.stream = torch.cuda.Stream(device=self.device)
        self._outputs_cache: dict[tuple, list] = {}
        self._events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        logger.info(
            f"TensorRT {trt.__version__} engine {'built' if self.compiled else 'loaded'} in "
            f"{self.compile_duration:.2f} s: "
            f"{self.engine.num_layers} layers, precision {self.precision}, inputs {self.input_names}, outputs "
            f"{self.output_names}"
        )

    def _bind_io(self) -> None:
        """The engine's input and output tensor names, in order, and each one's torch dtype."""
        trt, torch = self._trt, self._torch
        self.input_names, self.output_names, self._dtypes = [], [], {}
        for index in range(self.engine.num_io_tensors):
            name = self.engine.get_tensor_name(index)
            dtype = self.engine.get_tensor_dtype(name)
            torch_name = _TORCH_DTYPES.get(dtype.name)
            if torch_name is None:
                raise EngineError(
                    f"{_SOURCE}: I/O tensor '{name}' has TensorRT type {dtype.name}, which this engine cannot bind"
                )
            self._dtypes[name] = getattr(torch, torch_name)
            mode = self.engine.get_tensor_mode(name)
            (self.input_names if mode == trt.TensorIOMode.INPUT else self.output_names).append(name)

    # ---- build / load -----------------------------------------------------------
    def _meta_path(self, engine_path: Path) -> Path:
        return engine_path.with_name(engine_path.name + ".json")

    def _load(self, engine_path: Path) -> tuple[bytes | None, dict | None]:
        """The plan's bytes and metadata, or (None, None) when a framework-cached plan
        was made for another GPU or TensorRT and must be rebuilt."""
        trt = self._trt
        meta_path = self._meta_path(engine_path)
        meta: dict = {}
        if meta_path.is_file():
            try:
                meta = json.loads(meta_path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                logger.warning(f"{meta_path}: unreadable engine metadata ({exc}); ignored")
        stale = meta and (
            meta.get("tensorrt") != trt.__version__ or meta.get("compute_capability") != self.gpu["compute_capability"]
        )
        user_plan = self.config.exist_compiler_path is not None
        if stale:
            where = f"TensorRT {meta.get('tensorrt')} on compute capability {meta.get('compute_capability')}"
            here = f"TensorRT {trt.__version__} on {self.gpu['compute_capability']}"
            if user_plan:
                raise EngineError(f"{engine_path}: plan was built with {where}; this machine has {here}: rebuild it")
            # The framework's engine key has no GPU in it: a shared cache_dir can
            # hold a plan for another GPU under the same name.
            logger.warning(f"{engine_path}: cached plan was built with {where}, not {here}; rebuilding")
            return None, None
        if not meta:
            logger.warning(f"{engine_path}: no metadata sidecar; precision taken from config fp16={self.config.fp16}")
        return engine_path.read_bytes(), meta

    def _build(self, onnx_path: str | None, engine_path: Path | None) -> tuple[bytes, dict]:
        trt, config = self._trt, self.config
        if onnx_path is None or not Path(onnx_path).is_file():
            raise EngineError(f"{_SOURCE}: ONNX file not found: {onnx_path}")
        start = time.perf_counter()
        builder = trt.Builder(self._logger)
        network = builder.create_network(0)  # TensorRT 10: explicit batch is the only mode
        parser = trt.OnnxParser(network, self._logger)
        if not parser.parse_from_file(str(onnx_path)):
            errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
            first = " ".join(errors[0].split()) if errors else "unknown error"
            raise EngineError(f"{onnx_path}: TensorRT's ONNX parser failed ({len(errors)} errors), first: {first}")
        self._support = (builder, network, parser)
        self.network_layer_count = network.num_layers

        build_config = builder.create_builder_config()
        workspace = config.get("trt_workspace_gib", None)
        if workspace is not None:
            build_config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(float(workspace) * (1 << 30)))
        if config.fp16:
            if not getattr(builder, "platform_has_fast_fp16", True):
                logger.warning(f"{self.gpu['name']} has no fast fp16; building with the FP16 flag anyway")
            build_config.set_flag(trt.BuilderFlag.FP16)
        # TensorRT sets TF32 by default: on Ampere and later an "fp32" plan runs
        # its convolutions and matmuls in TF32, and must be reported (and given
        # a peak for MFU) as such.
        if not config.get("trt_tf32", True):
            build_config.clear_flag(trt.BuilderFlag.TF32)
        tf32 = build_config.get_flag(trt.BuilderFlag.TF32) and tuple(self.gpu["compute_capability"]) >= (8, 0)
        profile_shapes = self._add_profile(builder, network, build_config)
        cache_path = self._attach_timing_cache(build_config)

        serialized = builder.build_serialized_network(network, build_config)
        if serialized is None:
            raise EngineError(
                f"{onnx_path}: TensorRT could not build an engine: "
                f"{self._logger.last_error or 'see the TensorRT log above'}"
            )
        blob = bytes(memoryview(serialized))
        if cache_path is not None:
            _write_atomic(cache_path, memoryview(build_config.get_timing_cache().serialize()))
        meta = {
            "tensorrt": trt.__version__,
            "gpu": self.gpu["name"],
            "compute_capability": self.gpu["compute_capability"],
            "precision": "fp16" if config.fp16 else "tf32" if tf32 else "fp32",
            "build_duration_s": time.perf_counter() - start,
            "network_layers": self.network_layer_count,
            "profile": profile_shapes,
            "onnx": str(onnx_path),
        }
        if engine_path is not None:
            # Plan first, sidecar second: a plan without a sidecar still loads.
            _write_atomic(engine_path, blob)
            _write_atomic(self._meta_path(engine_path), json_text(meta).encode())
        return blob, meta

    def _add_profile(self, builder: Any, network: Any, build_config: CaseConfig) -> dict:
        """One optimisation profile over the batch axis; other axes must be static."""
        config = self.config
        opt = int(config.batch_size)
        high = int(config.get("trt_max_batch_size", None) or opt)
        profile = builder.create_optimization_profile()
        shapes = {}
        for index in range(network.num_inputs):
            tensor = network.get_input(index)
            shape = list(tensor.shape)
            if not shape or all(d >= 0 for d in shape):
                if shape and shape[0] != opt:
                    logger.warning(
                        f"ONNX input '{tensor.name}' has a static batch of {shape[0]}, not batch_size {opt}: other "
                        "batch sizes will fail"
                    )
                continue
            if shape[0] >= 0 or any(d < 0 for d in shape[1:]):
                raise EngineError(
                    f"{self.onnx_path}: input '{tensor.name}' has shape {shape}; {_SOURCE} supports a dynamic batch "
                    "axis (axis 0) only"
                )
            rest = shape[1:]
            low_shape, opt_shape, high_shape = (1, *rest), (opt, *rest), (high, *rest)
            profile.set_shape(tensor.name, low_shape, opt_shape, high_shape)
            shapes[tensor.name] = [list(low_shape), list(opt_shape), list(high_shape)]
        if shapes:
            build_config.add_optimization_profile(profile)
        return shapes

    def _attach_timing_cache(self, build_config: CaseConfig) -> Path | None:
        """Tactic timings are valid for one TensorRT version on one GPU model: the
        key in the file name keeps other machines' caches apart."""
        trt = self._trt
        if not self.config.cache_dir:
            return None
        key = fingerprint({"tensorrt": trt.__version__, "gpu": self.gpu["name"], "cc": self.gpu["compute_capability"]})
        path = Path(self.config.cache_dir) / f"trt_timing_{key}.cache"
        data = path.read_bytes() if path.is_file() else b""
        cache = build_config.create_timing_cache(data)
        if not build_config.set_timing_cache(cache, ignore_mismatch=False):
            logger.warning(f"{path}: TensorRT rejected the timing cache; building without it")
            cache = build_config.create_timing_cache(b"")
            build_config.set_timing_cache(cache, ignore_mismatch=False)
            data = b""
        self.timing_cache = {"path": str(path), "loaded_bytes": len(data)}
        return path

    # ---- calls --------------------------------------------------------------------
    def _upload(self, inputs: list) -> list:
        if len(inputs) != len(self.input_names):
            raise EngineError(f"engine expects {len(self.input_names)} inputs {self.input_names}, got {len(inputs)}")
        return [
            t.to(self.device, dtype=self._dtypes[name], non_blocking=True).contiguous()
            for name, t in zip(self.input_names, inputs)
        ]

    def _bind(self, context: Any, device_inputs: list, cache: dict) -> list:
        """Set input shapes and all tensor addresses; return the output buffers."""
        torch = self._torch
        for name, tensor in zip(self.input_names, device_inputs):
            shape = tuple(tensor.shape)
            if not context.set_input_shape(name, shape):
                raise EngineError(
                    f"input '{name}' shape {list(shape)} is outside the engine's profile "
                    f"{[list(s) for s in self.engine.get_tensor_profile_shape(name, 0)]} (see trt_max_batch_size)"
                )
            context.set_tensor_address(name, tensor.data_ptr())
        signature = tuple(tuple(t.shape) for t in device_inputs)
        outputs = cache.get(signature)
        if outputs is None:
            outputs = []
            for name in self.output_names:
                shape = tuple(context.get_tensor_shape(name))
                if any(d < 0 for d in shape):
                    raise EngineError(
                        f"output '{name}' has a data-dependent shape {list(shape)}, which {_SOURCE} does not support"
                    )
                outputs.append(torch.empty(shape, dtype=self._dtypes[name], device=self.device))
            cache[signature] = outputs
        for name, tensor in zip(self.output_names, outputs):
            context.set_tensor_address(name, tensor.data_ptr())
        return outputs

    def __call__(self, inputs: list) -> tuple[list, float]:
        torch = self._torch
        stream = self.stream
        timed = not self.core_includes_copies
        h2d_start, h2d_end, d2h_start, d2h_end = self._events
        with torch.cuda.device(self.device), torch.cuda.stream(stream):
            if timed:
                h2d_start.record(stream)
            device_inputs = self._upload(inputs)
            if timed:
                h2d_end.record(stream)
            outputs = self._bind(self.context, device_inputs, self._outputs_cache)
            if not self.context.execute_async_v3(stream.cuda_stream):
                raise EngineError(f"TensorRT execute_async_v3 failed: {self._logger.last_error or 'no reason logged'}")
            if timed:
                d2h_start.record(stream)
            # A blocking copy on this stream: it waits for the engine.
            host = [o.to("cpu") for o in outputs]
            if timed:
                d2h_end.record(stream)
        stream.synchronize()
        foo_time = 0.0
        if timed:
            foo_time = (h2d_start.elapsed_time(h2d_end) + d2h_start.elapsed_time(d2h_end)) / 1000.0
        return [h.float() if h.is_floating_point() else h for h in host], foo_time

    # ---- optional richer API -------------------------------------------------
    def version(self) -> str:
        return (
            f"TensorRT {self._trt.__version__} on {self.gpu['name']} "
            f"(sm_{''.join(map(str, self.gpu['compute_capability']))})"
        )

    def is_supported(self, op_type: str) -> bool:
        if self._support is None:
            trt = self._trt
            builder = trt.Builder(self._logger)
            network = builder.create_network(0)
            self._support = (builder, network, trt.OnnxParser(network, self._logger))
        return bool(self._support[2].supports_operator(op_type))

    def compile_report(self) -> dict:
        profiles = {}
        for name in self.input_names:
            shape = list(self.engine.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                profiles[name] = [list(s) for s in self.engine.get_tensor_profile_shape(name, 0)]
        return {
            "compile_precision": self.precision.upper(),
            "compile_status": "success",
            "compile_duration": self.compile_duration,
            "build_duration": self.build_duration,
            "compiled": self.compiled,
            "layer_count": self.engine.num_layers,
            "network_layer_count": self.network_layer_count,
            "input_type": [str(self._dtypes[n]).replace("torch.", "").upper() for n in self.input_names],
            "max_batch_size": max((p[2][0] for p in profiles.values()), default=None),
            "optimizations": {
                "fp16": bool(self.config.fp16),
                "tf32": bool(self.config.get("trt_tf32", True)),
                "workspace_gib": self.config.get("trt_workspace_gib", None),
                "profiles": profiles,
                "timing_cache": self.timing_cache,
            },
            "core_includes_copies": self.core_includes_copies,
            "core_definition": "H2D copy + execute_async_v3 + D2H copy"
            if self.core_includes_copies
            else "execute_async_v3 + binding (copies timed by CUDA events, reported as foo_time)",
            "gpu": self.gpu,
        }

    def best_batch_sizes(self) -> list[int]:
        # Kernels are tuned for the profile's opt shape; max is the largest that runs.
        sizes = {int(self.config.batch_size)}
        for name in self.input_names:
            shape = list(self.engine.get_tensor_shape(name))
            if shape and shape[0] < 0:
                _, opt_shape, max_shape = self.engine.get_tensor_profile_shape(name, 0)
                sizes.update({int(opt_shape[0]), int(max_shape[0])})
        return sorted(sizes)

    def get_performance_data(self, inputs: list, iterations: int = 10) -> list[dict]:
        """trtexec-style stage breakdown (H2D / execute / D2H, CUDA events) plus per-layer
        times from TensorRT's IProfiler, on a separate context so the measured one
        never carries a profiler."""
        trt, torch = self._trt, self._torch

        class _Profiler(trt.IProfiler):
            def __init__(self) -> None:
                trt.IProfiler.__init__(self)
                self.times: dict[str, list[float]] = defaultdict(list)

            def report_layer_time(self, layer_name: str, ms: float) -> None:
                self.times[layer_name].append(ms)

        stages: dict[str, list[float]] = defaultdict(list)
        events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            for _ in range(iterations):
                events[0].record(self.stream)
                device_inputs = self._upload(inputs)
                events[1].record(self.stream)
                outputs = self._bind(self.context, device_inputs, self._outputs_cache)
                self.context.execute_async_v3(self.stream.cuda_stream)
                events[2].record(self.stream)
                for o in outputs:
                    o.to("cpu")
                events[3].record(self.stream)
                self.stream.synchronize()
                stages["H2D copy"].append(events[0].elapsed_time(events[1]))
                stages["execute_async_v3"].append(events[1].elapsed_time(events[2]))
                stages["D2H copy"].append(events[2].elapsed_time(events[3]))

            profiler = _Profiler()
            context = self.engine.create_execution_context()
            context.profiler = profiler
            cache: dict = {}
            for _ in range(iterations):
                self._bind(context, self._upload(inputs), cache)
                context.execute_async_v3(self.stream.cuda_stream)
                self.stream.synchronize()
        rows = [
            {"node": stage, "op_type": "stage", "calls": len(ms), "mean_ms": sum(ms) / len(ms), "total_ms": sum(ms)}
            for stage, ms in stages.items()
        ]
        layers = [
            {"node": layer, "op_type": "trt_layer", "calls": len(ms), "mean_ms": sum(ms) / len(ms), "total_ms": sum(ms)}
            for layer, ms in profiler.times.items()
        ]
        return rows + sorted(layers, key=lambda row: row["total_ms"], reverse=True)
