"""A ByteMLPerf backend folder under ``inference_engine/<vendor>/`` and loading it.

Layout (ByteMLPerf's naming rules, unchanged): a folder ``XXX`` (the backend's
name, ByteMLPerf's ``--hardware_type``) holding ``compile_backend_xxx.py`` with
``CompileBackendXXX``, ``runtime_backend_xxx.py`` with ``RuntimeBackendXXX``,
the interact profile ``XXX.json`` and ``requirements.txt``. The vendor selects
it as its compiler (``compiler: XXX``). ``contract.registry`` recognises
the folder by its ``compile_backend_xxx.py``.

Loading imports the two modules as ``inference_engine.<vendor>.XXX.*``; their
``from general_perf.backends import ...`` resolves to ``inference/general_perf``.
A module-level import of a package that is not installed is one line naming
the backend and the package (and the pin its requirements.txt gives).
"""

from __future__ import annotations

import importlib
import re
import sys
import traceback
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from common.errors import ConfigError, EngineError, one_line, reraise_interrupt
from contract.registry import ENGINE_ROOT, is_bytemlperf_backend
from tools.compat.bytemlperf.profile import ProfileEntry, load_profile

# NumPy 1.24 removed these aliases (2.0 brought back long and bool); ByteMLPerf's own backends use np.long and np.bool.
# The modules loaded here by name, each formatted from its pattern here and nowhere else, so the
# import-circle test (tests/infra/imports.py) follows every load to the files the pattern matches.
DYNAMIC_IMPORTS = {"backend": "inference_engine.{vendor}.{backend}.{module}"}
_NUMPY_ALIAS = re.compile(r"module 'numpy' has no attribute '(long|bool|int|float|object|str|complex|unicode)'")


def backend_names(vendor_dir: Path) -> list[str]:
    """The ByteMLPerf backend folders of one vendor directory, sorted."""
    if not vendor_dir.is_dir():
        return []
    return sorted(p.name for p in vendor_dir.iterdir() if is_bytemlperf_backend(p))


def describe_backends(vendor_dir: Path) -> list[str]:
    """run.py --list: each backend folder of a vendor and its interact profile, one line per entry."""
    lines = []
    for name in backend_names(vendor_dir):
        folder = BackendFolder(vendor_dir.name, name, vendor_dir.parent)
        try:
            entries = folder.profile
        except ConfigError as exc:
            lines.append(f"    {name} (ByteMLPerf backend): interact profile unreadable: {exc}")
            continue
        lines.append(
            f"    {name} (ByteMLPerf backend): interact profile {folder.profile_file.name}"
            + ("" if entries else ": no entries")
        )
        lines.extend(f"      {entry.describe()}" for entry in entries)
    return lines


@dataclass(frozen=True)
class BackendFolder:
    vendor: str
    name: str
    root: Path = ENGINE_ROOT

    @property
    def path(self) -> Path:
        return self.root / self.vendor / self.name

    @property
    def label(self) -> str:
        return f"ByteMLPerf backend '{self.name}' (inference_engine/{self.vendor}/{self.name})"

    @property
    def profile_file(self) -> Path:
        return self.path / f"{self.name}.json"

    @property
    def requirements_file(self) -> Path:
        return self.path / "requirements.txt"

    def module_file(self, kind: str) -> Path:
        return self.path / f"{kind}_backend_{self.name.lower()}.py"

    @cached_property
    def profile(self) -> list[ProfileEntry]:
        return load_profile(self.profile_file)

    def classes(self) -> tuple[type, type]:
        """(CompileBackendXXX, RuntimeBackendXXX), imported; one-line errors."""
        return self._class("compile", "CompileBackend"), self._class("runtime", "RuntimeBackend")

    def _class(self, kind: str, prefix: str) -> type:
        path = self.module_file(kind)
        if not path.is_file():
            raise ConfigError(
                f"{self.label}: {path.name} is missing (a backend folder holds compile_backend_xxx.py and "
                "runtime_backend_xxx.py)"
            )
        module = self._import(path)
        name = prefix + self.name
        found = getattr(module, name, None)
        if not isinstance(found, type):
            raise EngineError(
                f"{self.label}: {path.name} defines no class {name} (ByteMLPerf's naming: {prefix} + the folder name)"
            )
        return found

    def _import(self, path: Path):
        module_name = DYNAMIC_IMPORTS["backend"].format(vendor=self.vendor, backend=self.name, module=path.stem)
        if self.root != ENGINE_ROOT:
            raise ConfigError(f"{self.label}: backends are imported from {ENGINE_ROOT} only")
        try:
            return importlib.import_module(
                DYNAMIC_IMPORTS["backend"].format(vendor=self.vendor, backend=self.name, module=path.stem)
            )
        except ModuleNotFoundError as exc:
            reraise_interrupt(exc)
            sys.modules.pop(module_name, None)
            missing = (exc.name or "").split(".")[0]
            if missing and missing not in ("inference_engine", "general_perf"):
                pin = self.pinned(missing)
                raise ConfigError(
                    f"{self.label}: {path.name} imports '{missing}', which is not installed here"
                    + (f" (its requirements.txt pins {pin})" if pin else "")
                ) from None
            raise EngineError(f"{self.label}: {path.name} cannot import {exc.name!r}: {one_line(exc)}") from None
        except Exception as exc:  # noqa: BLE001 - any failure of the module's top level is the backend's
            sys.modules.pop(module_name, None)
            raise EngineError(
                f"{self.label}: importing {path.name} failed{where_in(exc, self.path)}: "
                f"{_short(one_line(exc))}{_hint(exc)}"
            ) from None

    def pinned(self, package: str) -> str | None:
        """The requirements.txt line naming ``package`` (import and distribution names compared loosely)."""
        try:
            lines = self.requirements_file.read_text(encoding="utf-8").splitlines()
        except OSError:
            return None
        wanted = _normalise(package)
        for line in lines:
            text = line.split("#", 1)[0].strip()
            name = re.split(r"[<>=!~\[; ]", text, maxsplit=1)[0]
            if text and _normalise(name) == wanted:
                return text
        return None


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def where_in(exc: BaseException, folder: Path) -> str:
    """' (file.py line N)' of the innermost traceback frame inside the backend folder, or ''."""
    spot = ""
    root = folder.resolve()
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename and Path(frame.filename).resolve().is_relative_to(root):
            spot = f" ({Path(frame.filename).name} line {frame.lineno})"
    return spot


def _short(text: str, limit: int = 200) -> str:
    """The first sentence of a long message (NumPy's alias errors run to a paragraph)."""
    if len(text) <= limit:
        return text
    end = text.find(". ")
    return text[: end + 1] if 0 < end < limit else text[:limit] + "..."


def _hint(exc: BaseException) -> str:
    match = _NUMPY_ALIAS.search(str(exc))
    if not match:
        return ""
    alias = match.group(1)
    if alias in ("long", "bool"):
        return f" (NumPy 1.24 removed np.{alias} and NumPy 2.0 brought it back: this backend needs numpy<1.24 or >=2)"
    return f" (NumPy 1.24 removed np.{alias}; this backend needs numpy<1.24)"


def backend_for(vendor: str, compiler: str | None, root: Path = ENGINE_ROOT) -> BackendFolder | None:
    """The backend folder a vendor/compiler pair names, or None when it names a module or nothing."""
    if not compiler:
        return None
    folder = BackendFolder(vendor, compiler, root)
    return folder if is_bytemlperf_backend(folder.path) else None
