"""Where the container side finds a vendor's engine, by name, when a step needs one.

Plug-ins are folders, as in FlagPerf:
  engines  ``inference_engine/<vendor>/<compiler>.py`` (or a ByteMLPerf backend folder
           there), found by ``contract/registry.py``; their API is
           ``contract/engine_base.py``'s ``EngineBase``;
  cases    ``benchmarks/<case>/<framework>/``, loaded by ``contract/cases.py`` (their API).
Nothing else in tools/ imports an engine module or a case, and nothing here imports them at
module level (tests/test_lifecycle_units.py): a plug-in is loaded when the pipeline asks for
it here, not when tools/ is imported. What a plug-in may import is declared on the floor
(``contract/__init__.py::PLUGIN_IMPORTS``, docs/architecture.md "What a plug-in may import").
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from common import layout
from common.errors import ConfigError

if TYPE_CHECKING:
    from contract.config import CaseView


def check_vendor(vendor: str) -> None:
    """A ConfigError naming ``vendor`` when it has no ``inference_engine/<vendor>/``."""
    from contract.registry import ENGINE_ROOT

    if not (ENGINE_ROOT / vendor).is_dir():
        raise ConfigError(layout.unknown_vendor(vendor))


def engine_module(vendor: str, compiler: str) -> ModuleType:
    """The module defining ``InferModel`` for ``vendor``/``compiler`` (one-line ConfigError or
    EngineError): the vendor's engine module, or for a ByteMLPerf backend folder its adapter
    (tools/compat/bytemlperf/engine.py)."""
    from contract.registry import check_engine, load_engine_module

    if check_engine(vendor, compiler).is_dir():
        from tools.compat.bytemlperf import engine as backend_adapter

        return backend_adapter
    return load_engine_module(vendor, compiler)


def preflight_engine(vendor: str, compiler: str, config: CaseView) -> ModuleType:
    """Load the engine and run its module's optional ``preflight(config)`` (contract/engine_base.py):
    a ConfigError when this machine cannot run it. For where the engine runs: the pipeline's init
    step, and run.py in MODE local (the same Python on the same machine)."""
    module = engine_module(vendor, compiler)
    preflight = getattr(module, "preflight", None)  # the module-level hook, read here only
    if callable(preflight):
        preflight(config)
    return module


def engine_source(vendor: str, compiler: str) -> Path:
    """The engine's source file, whose bytes are part of a cached engine's key."""
    from contract.registry import engine_file

    return engine_file(vendor, compiler)
