"""Discovery of vendor engines by file layout, as nGraph's backend registry does by name.

Nothing registers itself: ``inference_engine/<vendor>/<compiler>.py`` existing (or a
ByteMLPerf backend folder ``<vendor>/<XXX>/``) is the registration. Importing this module
imports no plug-in: ``vendor_names``, ``compilers``, ``get_registered_devices`` and
``check_engine`` read the layout only; ``load_engine_module`` and ``preflight_engine``
import the one engine asked for, where it is to run.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from common.errors import ConfigError, EngineError
from common.layout import unknown_vendor

if TYPE_CHECKING:
    from tools.config import CaseView

ENGINE_ROOT = Path(__file__).resolve().parent


def vendor_names(root: Path = ENGINE_ROOT) -> list[str]:
    """Every vendor folder, sorted (one may provide no compiler yet)."""
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))


def compilers(vendor: str, root: Path = ENGINE_ROOT) -> list[str]:
    """The compilers a vendor provides: its engine modules, then its ByteMLPerf backend folders."""
    vendor_dir = root / vendor
    if not vendor_dir.is_dir():
        return []
    names = sorted(p.stem for p in vendor_dir.glob("*.py") if not p.name.startswith("_"))
    return names + sorted(p.name for p in vendor_dir.iterdir() if is_bytemlperf_backend(p))


def get_registered_devices(root: Path = ENGINE_ROOT) -> dict[str, list[str]]:
    """Map each vendor to the compilers it provides (vendors without any left out)."""
    return {vendor: names for vendor in vendor_names(root) if (names := compilers(vendor, root))}


def reraise_interrupt(exc: BaseException) -> None:
    """An import cut short by Ctrl-C can surface as ImportError (pybind11 modules such as
    onnxruntime's report "initialization failed", the KeyboardInterrupt only in the
    context): re-raise the interruption instead of blaming a missing package."""
    seen = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            raise cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__


def is_bytemlperf_backend(path: Path) -> bool:
    """A ByteMLPerf backend folder ``<vendor>/XXX/`` holding ``compile_backend_xxx.py`` (docs/bytemlperf_migration.md)."""
    return path.is_dir() and not path.name.startswith(("_", ".")) and (path / f"compile_backend_{path.name.lower()}.py").is_file()


def engine_file(vendor: str, compiler: str, root: Path = ENGINE_ROOT) -> Path:
    return root / vendor / f"{compiler}.py"


def check_engine(vendor: str, compiler: str, root: Path = ENGINE_ROOT) -> Path:
    """The engine's file, or its ByteMLPerf backend folder, by layout alone (nothing is
    imported); a one-line ConfigError for an unknown vendor or compiler."""
    if not (root / vendor).is_dir():
        raise ConfigError(unknown_vendor(vendor, known=get_registered_devices(root)))
    if is_bytemlperf_backend(root / vendor / compiler):
        return root / vendor / compiler
    path = engine_file(vendor, compiler, root)
    if not path.is_file():
        known = ", ".join(compilers(vendor, root)) or "none"
        raise ConfigError(f"unknown compiler '{compiler}' for vendor '{vendor}': no inference_engine/{vendor}/{compiler}.py (known: {known})")
    return path


def load_engine_module(vendor: str, compiler: str, root: Path = ENGINE_ROOT) -> ModuleType:
    """Import the engine module (checked to define ``InferModel``); a ByteMLPerf backend folder
    is run through its adapter (tools/compat/bytemlperf/)."""
    if check_engine(vendor, compiler, root).is_dir():
        return importlib.import_module("tools.compat.bytemlperf.engine")
    try:
        module = importlib.import_module(f"inference_engine.{vendor}.{compiler}")
    except ImportError as exc:
        reraise_interrupt(exc)
        raise EngineError(f"inference_engine/{vendor}/{compiler}.py: cannot import: {exc}") from None
    engine_class = getattr(module, "InferModel", None)
    if not isinstance(engine_class, type) or not callable(getattr(engine_class, "__call__", None)):
        raise EngineError(f"inference_engine/{vendor}/{compiler}.py: must define a class InferModel with __call__")
    return module


def preflight_engine(vendor: str, compiler: str, config: CaseView, root: Path = ENGINE_ROOT) -> ModuleType:
    """Load the engine and run its optional ``preflight(config)`` (inference_engine/base.py):
    a ConfigError when this machine cannot run it. For where the engine runs: the pipeline,
    and run.py in MODE local (the same Python on the same machine)."""
    module = load_engine_module(vendor, compiler, root)
    preflight = getattr(module, "preflight", None)
    if callable(preflight):
        preflight(config)
    return module
