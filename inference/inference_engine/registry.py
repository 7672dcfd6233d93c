"""Discovery of vendor engines by file layout, as nGraph's backend registry does by name.

Nothing registers itself: ``inference_engine/<vendor>/<compiler>.py`` existing
is the registration.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from common.errors import ConfigError, EngineError

ENGINE_ROOT = Path(__file__).resolve().parent


def get_registered_devices(root: Path = ENGINE_ROOT) -> dict[str, list[str]]:
    """Map each vendor to the compilers it provides."""
    devices = {}
    for vendor_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))):
        compilers = sorted(p.stem for p in vendor_dir.glob("*.py") if not p.name.startswith("_"))
        compilers += sorted(p.name for p in vendor_dir.iterdir() if is_bytemlperf_backend(p))  # ByteMLPerf backend folders
        if compilers:
            devices[vendor_dir.name] = compilers
    return devices


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


def load_engine_module(vendor: str, compiler: str, root: Path = ENGINE_ROOT) -> ModuleType:
    if not (root / vendor).is_dir():
        known = ", ".join(get_registered_devices(root)) or "none"
        raise ConfigError(f"unknown vendor '{vendor}': no inference_engine/{vendor}/ (known: {known})")
    if is_bytemlperf_backend(root / vendor / compiler):  # run through the adapter (tools/compat/bytemlperf/)
        return importlib.import_module("tools.compat.bytemlperf.engine")
    path = engine_file(vendor, compiler, root)
    if not path.is_file():
        known = ", ".join(get_registered_devices(root).get(vendor, [])) or "none"
        raise ConfigError(f"unknown compiler '{compiler}' for vendor '{vendor}': no inference_engine/{vendor}/{compiler}.py (known: {known})")
    try:
        module = importlib.import_module(f"inference_engine.{vendor}.{compiler}")
    except ImportError as exc:
        reraise_interrupt(exc)
        raise EngineError(f"inference_engine/{vendor}/{compiler}.py: cannot import: {exc}") from None
    engine_class = getattr(module, "InferModel", None)
    if not isinstance(engine_class, type) or not callable(getattr(engine_class, "__call__", None)):
        raise EngineError(f"inference_engine/{vendor}/{compiler}.py: must define a class InferModel with __call__")
    return module
