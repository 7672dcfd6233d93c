"""Discovery of vendor engines by file layout, as nGraph's backend registry does by name.

The registry is on the contract floor (contract/__init__.py): a case and the framework both ask it.
Nothing registers itself: ``inference_engine/<vendor>/<compiler>.py`` existing (or a
ByteMLPerf backend folder ``<vendor>/<XXX>/``) is the registration. Importing this module
imports no plug-in: ``vendor_names``, ``compilers``, ``get_registered_devices`` and
``check_engine`` read the layout only; ``load_engine_module`` imports the one engine module
asked for, where it is to run; ``engine_facts`` reads what an engine module declares for the host (its
own image) from its syntax tree. A ByteMLPerf backend folder is no module: the framework runs
it through its adapter (``tools/plugins.py::engine_module``), so this registry imports
nothing of ``tools/`` and nothing there imports it back in a circle.
"""

from __future__ import annotations

import ast
import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from common.declarations import declared
from common.errors import ConfigError, EngineError, reraise_interrupt
from common.layout import unknown_vendor
from common.values import plain_name
from contract.kernels import TorchKernels

ENGINE_ROOT = Path(__file__).resolve().parents[1] / "inference_engine"

# The modules this registry loads by name, each name formatted from its pattern here and nowhere
# else, so the import-circle test (tests/infra/imports.py) follows every load to the files the
# pattern matches. A vendor's modules import the floor only, so no load comes back here.
DYNAMIC_IMPORTS = {
    "engine": "inference_engine.{vendor}.{compiler}",
    "kernels": "inference_engine.{vendor}.base.kernels",
}


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


IMAGE_DECLARATION = "IMAGE"


@dataclass(frozen=True)
class EngineFacts:
    """What the host knows of an engine without importing it: its module's declarations
    (``common/declarations.py``), read by ``engine_facts``."""

    # ``IMAGE = "<folder>"``: the engine runs in its own image, ``docker_images/<vendor>/<folder>/``
    # (a server with its own pinned stack: cpu/vllm.py), which holds everything its cases run with, so
    # the cases' requirements.txt are not layered on top. None: FlagPerf's image of the case's
    # framework, ``docker_images/<vendor>/<framework>/``, with the cases' requirements on top.
    image: str | None = None


def engine_facts(vendor: str, compiler: str, root: Path = ENGINE_ROOT) -> EngineFacts:
    """The declarations of ``inference_engine/<vendor>/<compiler>.py``, checked; a ByteMLPerf
    backend folder, or a file that does not parse (its import fails where it runs, naming the
    line), declares nothing. A declaration of the wrong shape is one ConfigError naming the file."""
    path = check_engine(vendor, compiler, root)
    if path.is_dir():
        return EngineFacts()
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return EngineFacts()
    image = declared(tree, IMAGE_DECLARATION)
    if image is None:
        return EngineFacts()
    try:
        if not isinstance(image, str):  # plain_name would take 3 as "3"
            raise ValueError(f"must be a string naming a folder of docker_images/{vendor}/, got {image!r}")
        return EngineFacts(image=plain_name(image, f"a folder name of docker_images/{vendor}/"))
    except ValueError as exc:
        raise ConfigError(f"inference_engine/{vendor}/{compiler}.py: {IMAGE_DECLARATION} {exc}") from None


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
        module = importlib.import_module(DYNAMIC_IMPORTS["engine"].format(vendor=vendor, compiler=compiler))
    except ImportError as exc:
        reraise_interrupt(exc)
        raise EngineError(f"inference_engine/{vendor}/{compiler}.py: cannot import: {exc}") from None
    engine_class = getattr(module, "InferModel", None)
    if not isinstance(engine_class, type) or not callable(getattr(engine_class, "__call__", None)):
        raise EngineError(f"inference_engine/{vendor}/{compiler}.py: must define a class InferModel with __call__")
    return module


def vendor_kernels(vendor: str, root: Path = ENGINE_ROOT) -> TorchKernels:
    """The vendor's base-tier ``Kernels`` (``inference_engine/<vendor>/base/kernels.py``), else
    ``TorchKernels`` (contract/kernels.py)."""
    if not (root / vendor / "base" / "kernels.py").is_file():
        return TorchKernels()
    module = importlib.import_module(DYNAMIC_IMPORTS["kernels"].format(vendor=vendor))
    kernels = getattr(module, "Kernels", None)
    if not callable(kernels):
        raise ConfigError(
            f"inference_engine/{vendor}/base/kernels.py: must define class Kernels (see docs/vendor_guide.md, base "
            "tier)"
        )
    return kernels()
