"""Where the container side finds a vendor's engine, by name, when a step needs one.

Plug-ins are folders, as in FlagPerf:
  engines  ``inference_engine/<vendor>/<compiler>.py`` (or a ByteMLPerf backend folder
           there), found by ``inference_engine/registry.py``; their API is
           ``inference_engine/base.py``'s ``EngineBase``;
  cases    ``benchmarks/<case>/<framework>/``, loaded by ``tools/cases.py`` (their API).
Nothing else in tools/ imports an engine module or a case, and nothing here imports them at
module level (tests/test_lifecycle_units.py): a plug-in is loaded when the pipeline asks for
it here, not when tools/ is imported. What a plug-in may import is declared here
(``PLUGIN_IMPORTS``, docs/architecture.md "What a plug-in may import").
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from common import layout
from common.errors import ConfigError

if TYPE_CHECKING:
    from tools.config import CaseView

# What a plug-in file may import of the code under inference/ (anything outside it, the
# standard library and installed packages, is free). A module is allowed when it is one of
# these or inside one; besides these, a plug-in imports its own folder (an engine
# ``inference_engine/<vendor>/``, a case ``benchmarks/<case>/``).
PLUGIN_IMPORTS: dict[str, tuple[str, ...]] = {
    # shared code, and the engine API: the base classes (base-tier kernels: TorchKernels),
    # ByteMLPerf's base class names for its backend folders, the config's types (CaseView).
    "engine": (
        "common",
        "inference_engine.base",
        "inference_engine.llm_base",
        "inference_engine.serving_base",
        "benchmarks.base_common",
        "general_perf",
        "tools.config",
    ),
    "case": (
        "common",
        # the case API: the bases every case builds on, and other cases' helpers
        "benchmarks",
        # an LLM case builds its engine's own format and reads its contract
        "inference_engine.registry",
        "inference_engine.llm_base",
        # the framework's services to cases: measuring, caching, the config's types
        "tools.measure.loop",
        "tools.measure.baseline",
        "tools.measure.precision",
        "tools.measure.llm",
        "tools.measure.llm_stage",
        "tools.measure.serving_stage",
        "tools.results.result",
        "tools.cache",
        "tools.folder_cache",
        "tools.compat.flagperf",
        "tools.config",
    ),
}


def check_vendor(vendor: str) -> None:
    """A ConfigError naming ``vendor`` when it has no ``inference_engine/<vendor>/``."""
    from inference_engine.registry import ENGINE_ROOT

    if not (ENGINE_ROOT / vendor).is_dir():
        raise ConfigError(layout.unknown_vendor(vendor))


def engine_module(vendor: str, compiler: str) -> ModuleType:
    """The module defining ``InferModel`` for ``vendor``/``compiler`` (one-line ConfigError or
    EngineError): the vendor's engine module, or for a ByteMLPerf backend folder its adapter
    (tools/compat/bytemlperf/engine.py)."""
    from inference_engine.registry import check_engine, load_engine_module

    if check_engine(vendor, compiler).is_dir():
        from tools.compat.bytemlperf import engine as backend_adapter

        return backend_adapter
    return load_engine_module(vendor, compiler)


def preflight_engine(vendor: str, compiler: str, config: CaseView) -> ModuleType:
    """Load the engine and run its module's optional ``preflight(config)`` (inference_engine/base.py):
    a ConfigError when this machine cannot run it. For where the engine runs: the pipeline's init
    step, and run.py in MODE local (the same Python on the same machine)."""
    module = engine_module(vendor, compiler)
    preflight = getattr(module, "preflight", None)  # the module-level hook, read here only
    if callable(preflight):
        preflight(config)
    return module


def engine_source(vendor: str, compiler: str) -> Path:
    """The engine's source file, whose bytes are part of a cached engine's key."""
    from inference_engine.registry import engine_file

    return engine_file(vendor, compiler)
