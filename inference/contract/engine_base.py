"""The compiler/runtime concept (spec §4.1.2): the engine plug-in API, declared.

A vendor module ``inference_engine/<vendor>/<compiler>.py`` must define a class
``InferModel``; subclassing ``EngineBase`` is recommended, not required: an engine written
for FlagPerf or ByteMLPerf that does not is adapted once, when it is built
(``tools/compat/adapters.py::as_engine``), so the framework only ever calls what is declared
here.

Required:
  InferModel(config, onnx_path, model)   compile (or load config.engine_path); ``config`` is the
                                         pipeline's ``contract.config.CaseConfig``, which fits
                                         ``contract.config.CaseView`` (FlagPerf's keys) as a FlagPerf
                                         namedtuple does
  __call__(list_of_cpu_tensors) -> (list_of_cpu_tensor_outputs, foo_time)

``foo_time`` is seconds spent in the call on work that is not inference
(e.g. a compiler that can only build on first call). It is subtracted from
core and whole time and reported separately; it should be 0.0.

Optional: every other member of ``EngineBase`` below. Each default means "not supported"
(an attribute's default is the plain case); what an engine supplies is used and written
to result.json. ``implements(name)`` is the capability flag for the optional methods.

A module may also define ``preflight(config)`` which raises
``common.errors.ConfigError`` when the machine cannot run this engine (no GPU,
library missing); it runs at the config check, before any work starts (the
container's init step calls it too; ``tools/plugins.py::preflight_engine``).

What an engine module may import: ``docs/architecture.md``, "What a plug-in may import".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal, get_args

if TYPE_CHECKING:
    from contract.config import CaseView

# The optional methods, as ``implements`` names them.
OptionalMethod = Literal[
    "version",
    "compile_report",
    "is_supported",
    "supported_ops",
    "get_performance_data",
    "best_batch_sizes",
    "prepare_batch_size",
    "own_benchmark",
    "call_numpy",
]
OPTIONAL_METHODS: tuple[OptionalMethod, ...] = get_args(OptionalMethod)


class EngineBase:
    # ---- optional attributes -------------------------------------------------------------
    engine_suffix: ClassVar[str | None] = None
    """File suffix of the serialized engine, read from the class before it is built: the
    engine file is then cached (tools/artefacts/engine.py). None: nothing is serialized, the
    engine is built every run."""

    rebuild_per_batch_size: bool = False
    """True when the engine is built for one batch size: a batch_sizes sweep then compiles
    (or loads from the cache) one engine per size."""

    precision: str | None = "fp32"
    """The precision actually run ("fp32", "fp16", "int8", ...). None: the engine does not
    say (the config's fp16 stands in, and the compile report says UNKNOWN)."""

    compiled: bool | None = None
    """True when this construction built the engine file rather than loading it: a cache hit
    that rebuilt (a stale plan) is recorded as 'rebuilt'. None: not said."""

    # ---- required ----------------------------------------------------------------------------
    def __init__(self, config: CaseView, onnx_path: str | None, model: Any) -> None:
        self.config = config
        self.onnx_path = onnx_path

    def __call__(self, inputs: list) -> tuple[list, float]:
        raise NotImplementedError

    # ---- optional methods: each default means "not supported" ---------------------------------
    def version(self) -> str | None:
        """The compiler's or runtime's version, for result.json. None: not said."""
        return None

    def compile_report(self) -> dict | None:
        """ByteMLPerf-style compile report (compile_precision, compile_status, ...), merged into
        result.json's engine.compile_report. None: nothing beyond what the framework measures."""
        return None

    def is_supported(self, op_type: str) -> bool:
        """Whether the engine runs ONNX op ``op_type`` itself (nGraph Backend); with it, or with
        ``supported_ops``, the framework computes sg_percent and the fallback segments. The
        default answers nothing (``implements("is_supported")`` is False)."""
        return False

    def supported_ops(self) -> set[str] | None:
        """The ONNX op types the engine runs itself, the other way to say what ``is_supported``
        says. None: not said."""
        return None

    def get_performance_data(self, inputs: list) -> list[dict] | None:
        """Per-op timings for one call on ``inputs`` (nGraph Executable), called untimed on the
        first batch when implemented. None: not supported."""
        return None

    def best_batch_sizes(self) -> list[int] | None:
        """ByteMLPerf's get_best_batch_size: the sweep ``batch_sizes: best`` runs. None: not said."""
        return None

    def prepare_batch_size(self, batch_size: int) -> None:
        """Called, untimed, before the rows of each batch size are measured (a ByteMLPerf
        backend's load(batch_size)). The default does nothing."""

    def own_benchmark(self, batch_sizes: list[int], dataloader: Any) -> dict | None:
        """The engine's own timing, reported beside InferPerf's rows in result.json
        engine.own_benchmark, never instead of them; a failure is a warning
        (tools/compat/bytemlperf/hooks.py). None: not supported."""
        return None

    def call_numpy(self, arrays: list) -> tuple[list, float]:
        """``__call__`` on numpy arrays in and out: the same inference, without the torch-tensor
        contract's conversions, whose outputs stay valid after the next call (fresh arrays, no
        reused buffer). With it, the inference pass (``tools/measure/loop.py``) converts a chunk of
        batches to numpy before its clock, times this call on each back to back, and converts the
        outputs to tensors and evaluates them after: the case's loader and evaluator no longer run
        between timed calls. Not called unless implemented (``implements("call_numpy")``)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the engine holds beyond memory (a server process it started). The pipeline
        calls it once when the case ends, whatever ended it (a failure, SIGTERM included). The
        default does nothing."""

    # ---- the capability flag --------------------------------------------------------------------
    def implements(self, method: OptionalMethod) -> bool:
        """Whether this engine supplies the optional ``method`` rather than the default above
        (the framework asks before it calls ``get_performance_data``, ``is_supported`` and
        ``supported_ops``)."""
        return getattr(type(self), method) is not getattr(EngineBase, method)

    @property
    def vendor_engine(self) -> object:
        """The vendor's own object: this engine, or the one an adapter wraps (result.json names its class)."""
        return self
