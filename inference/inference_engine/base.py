"""The compiler/runtime concept (spec §4.1.2), with the optional richer API.

A vendor module ``inference_engine/<vendor>/<compiler>.py`` must define a
class ``InferModel``; subclassing ``EngineBase`` is recommended, not required.

Required:
  InferModel(config, onnx_path, model)   compile (or load config.engine_path); ``config`` is the
                                         pipeline's ``tools.config.CaseConfig``, which fits
                                         ``tools.config.CaseView`` (FlagPerf's keys) as a FlagPerf
                                         namedtuple does
  __call__(list_of_cpu_tensors) -> (list_of_cpu_tensor_outputs, foo_time)

``foo_time`` is seconds spent in the call on work that is not inference
(e.g. a compiler that can only build on first call). It is subtracted from
core and whole time and reported separately; it should be 0.0.

Optional, detected with getattr and written to result.json when present:
  version() -> str
  compile_report() -> dict           ByteMLPerf-style: compile_precision, compile_status, ...
  is_supported(op_type) -> bool      or supported_ops() -> set[str]   (nGraph Backend)
  get_performance_data(inputs) -> list[dict]   per-op timings (nGraph Executable)
  best_batch_sizes() -> list[int]    ByteMLPerf get_best_batch_size
  precision                          the precision actually run ("fp32", "fp16", ...)
  engine_suffix                      file suffix of the serialized engine, or None if it has none
  rebuild_per_batch_size             True when the engine is built for one batch size: a batch_sizes
                                     sweep then compiles (or loads from the cache) one engine per size
  compiled                           True when this construction built the engine file rather than
                                     loading it: a cache hit that rebuilt (a stale plan) is recorded
                                     as 'rebuilt' (tools/artefacts/engine.py)
  prepare_batch_size(batch_size)     called, untimed, before the rows of each batch size are measured
                                     (a ByteMLPerf backend's load(batch_size))
  own_benchmark(batch_sizes, dataloader) -> dict | None
                                     the engine's own timing, reported beside InferPerf's rows in
                                     result.json engine.own_benchmark, never instead of them; a
                                     failure is a warning (tools/compat/bytemlperf/hooks.py)

A module may also define ``preflight(config)`` which raises
``common.errors.ConfigError`` when the machine cannot run this engine (no GPU,
library missing); it runs at the config check, before any work starts (the
container's init step calls it too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tools.config import CaseView


class EngineBase:
    engine_suffix: str | None = None
    rebuild_per_batch_size: bool = False
    precision: str = "fp32"

    def __init__(self, config: CaseView, onnx_path: str | None, model: Any) -> None:
        self.config = config
        self.onnx_path = onnx_path

    def __call__(self, inputs: list) -> tuple[list, float]:
        raise NotImplementedError
