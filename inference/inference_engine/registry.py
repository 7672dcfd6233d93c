"""Discovery of vendor engines by file layout, as nGraph's backend registry does by name.

Nothing registers itself: ``inference_engine/<vendor>/<compiler>.py`` existing (or a
ByteMLPerf backend folder ``<vendor>/<XXX>/``) is the registration. Importing this module
imports no plug-in: ``vendor_names``, ``compilers``, ``get_registered_devices`` and
``check_engine`` read the layout only; ``load_engine_module`` imports the one engine module
asked for, where it is to run. A ByteMLPerf backend folder is no module: the framework runs
it through its adapter (``tools/plugins.py::engine_module``), so this registry imports
nothing of ``tools/`` and nothing there imports it back in a circle.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from common.errors import ConfigError, EngineError, reraise_interrupt
from common.layout import unknown_vendor

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


def is_bytemlperf_backend(path: Path) -> bool:
    """A ByteMLPerf backend folder ``<vendor>/XXX/`` holding ``compile_backend_xxx.py``
    (docs/bytemlperf_migration.md)."""
    return (
        path.is_dir()
        and not path.name.startswith(("_", "."))
        and (path / f"compile_backend_{path.name.lower()}.py").is_file()
    )


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
        raise ConfigError(
            f"unknown compiler '{compiler}' for vendor '{vendor}': no inference_engine/{vendor}/{compiler}.py (known: "
            f"{known})"
        )
    return path


def load_engine_module(vendor: str, compiler: str, root: Path = ENGINE_ROOT) -> ModuleType:
    """Import the engine module ``inference_engine/<vendor>/<compiler>.py`` (checked to define
    ``InferModel``). A ByteMLPerf backend folder is an EngineError here: it is run through its
    adapter, which ``tools/plugins.py::engine_module`` chooses."""
    if check_engine(vendor, compiler, root).is_dir():
        raise EngineError(
            f"inference_engine/{vendor}/{compiler}/ is a ByteMLPerf backend folder, not an engine module: "
            "tools/plugins.py::engine_module runs it through tools/compat/bytemlperf/engine.py"
        )
    try:
        module = importlib.import_module(f"inference_engine.{vendor}.{compiler}")
    except ImportError as exc:
        reraise_interrupt(exc)
        raise EngineError(f"inference_engine/{vendor}/{compiler}.py: cannot import: {exc}") from None
    engine_class = getattr(module, "InferModel", None)
    if not isinstance(engine_class, type) or not callable(getattr(engine_class, "__call__", None)):
        raise EngineError(f"inference_engine/{vendor}/{compiler}.py: must define a class InferModel with __call__")
    return module
