"""Where the container side finds its plug-ins: a vendor's engine and a case's code, by name, when a step needs one.

Plug-ins are folders, as in FlagPerf:
  engines  ``inference_engine/<vendor>/<compiler>.py`` (or a ByteMLPerf backend folder
           there), found by ``inference_engine/registry.py``;
  cases    ``benchmarks/<case>/<framework>/``, a package defining ``CASE_FUNCTIONS``
           (``pytorch_2.1`` names the image; the code is in ``benchmarks/<case>/pytorch``).
Nothing else in tools/ imports ``inference_engine`` or ``benchmarks``, and nothing
here imports them at module level (tests/test_lifecycle_units.py): a plug-in
package is loaded when the pipeline asks for it here, not when tools/ is imported.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

from common import layout
from common.errors import ConfigError

if TYPE_CHECKING:
    from tools.config import CaseConfig

# The case API (FlagPerf spec §3.2.2): every case package defines these.
CASE_FUNCTIONS = ("build_dataloader", "create_model", "evaluator", "model_forward", "export_model", "engine_forward")


def check_vendor(vendor: str) -> None:
    """A ConfigError naming ``vendor`` when it has no ``inference_engine/<vendor>/``."""
    from inference_engine.registry import ENGINE_ROOT

    if not (ENGINE_ROOT / vendor).is_dir():
        raise ConfigError(layout.unknown_vendor(vendor))


def engine_module(vendor: str, compiler: str) -> ModuleType:
    """The module defining ``InferModel`` for ``vendor``/``compiler`` (one-line ConfigError or EngineError)."""
    from inference_engine.registry import load_engine_module

    return load_engine_module(vendor, compiler)


def engine_source(vendor: str, compiler: str) -> Path:
    """The engine's source file, whose bytes are part of a cached engine's key."""
    from inference_engine.registry import engine_file

    return engine_file(vendor, compiler)


def derives_from_engine_base(engine: Any) -> bool:
    """Whether ``engine`` is an instance of InferPerf's engine base class (``inference_engine/base.py``)."""
    from inference_engine.base import EngineBase

    return isinstance(engine, EngineBase)


def case_dir(perf_dir: Path, case: str, framework: str) -> Path:
    """``benchmarks/<case>/<framework's code folder>/`` under ``perf_dir``."""
    return perf_dir / "benchmarks" / case / layout.framework_dir(framework)


def case_module(perf_dir: Path, case: str, framework: str) -> ModuleType:
    """The case package, checked to define every one of ``CASE_FUNCTIONS``."""
    fw = layout.framework_dir(framework)
    if not case_dir(perf_dir, case, framework).is_dir():
        raise ConfigError(f"unknown case '{case}' for framework '{framework}': no benchmarks/{case}/{fw}/")
    module = importlib.import_module(f"benchmarks.{case}.{fw}")
    missing = [name for name in CASE_FUNCTIONS if not callable(getattr(module, name, None))]
    if missing:
        raise ConfigError(f"benchmarks/{case}/{fw}/__init__.py: missing case function '{missing[0]}'")
    return module


def framework_step(model: Any, config: CaseConfig, case: ModuleType | None = None) -> Callable[[list], tuple[list, float]] | None:
    """The framework model as an engine-shaped step, for the numeric check; None without a model.

    A case may provide its own (optional hook ``framework_step(model, config)``:
    benchmarks/onnx_model runs ONNX Runtime on CPU); otherwise benchmarks/common.py's.
    """
    if model is None:
        return None
    own = getattr(case, "framework_step", None)
    if callable(own):
        return own(model, config)
    from benchmarks.common import make_step

    return make_step(model, config)
