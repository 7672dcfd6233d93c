"""Content-addressed caching of exported and compiled artefacts: keys, and the
checksum seal every cache entry carries (atomic writes are common.files).

A cache entry is a file (an exported ONNX model, a compiled engine, trained
weights) plus the files it needs beside it (an ONNX model's external data).
``seal`` writes ``<entry>.sha256.json`` (sha256 of each of those files) after
the entry is in place, so a writer killed between the two leaves an entry
without a seal. ``reuse`` accepts an entry only when its seal is there and
every file matches it; otherwise the entry and its seal are evicted with one
WARNING line, and the caller rebuilds. No corrupt entry is ever used, nor
left to fail every later run.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterable

from loguru import logger

from common.files import hash_file, write_json_atomic
from common.onnx_files import has_external_marker, onnx_external_locations, read_external_locations

SEAL_SUFFIX = ".sha256.json"
SEAL_SCHEMA = 1


def hash_state_dict(model: Any) -> str:
    """Hash a torch module's parameters and buffers (names, dtypes, shapes, bytes)."""
    import torch

    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        tensor = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        # uint8 view keeps every dtype (bf16 included) hashable through numpy.
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


# ---- ONNX external data (common/onnx_files.py) -------------------------------------
def onnx_external_files(onnx_path: str | Path) -> list[Path]:
    base = Path(onnx_path).parent
    return [base / location for location in onnx_external_locations(onnx_path)]


def onnx_digests(onnx_path: str | Path) -> dict[str, str | None]:
    """sha256 of the ONNX model and of every external-data file it references
    (``{"": model, location: data, ...}``; None for a referenced file that is missing):
    what an engine compiled from it depends on."""
    path = Path(onnx_path)
    model = hashlib.sha256()
    has_external = has_external_marker(path, model)
    digests: dict[str, str | None] = {"": model.hexdigest()}
    for location in read_external_locations(path) if has_external else []:
        data = path.parent / location
        digests[location] = hash_file(data).hexdigest() if data.is_file() else None
    return digests


# ---- the seal -------------------------------------------------------------------
def seal_path(entry: str | Path) -> Path:
    entry = Path(entry)
    return entry.with_name(entry.name + SEAL_SUFFIX)


def seal(entry: str | Path, companions: Iterable[str | Path] = ()) -> Path:
    """Write ``entry``'s seal: the sha256 of it and of each companion file (same folder)."""
    entry = Path(entry)
    files = {entry.name: hash_file(entry).hexdigest()}
    for companion in companions:
        companion = Path(companion)
        files[companion.name] = hash_file(companion).hexdigest()
    path = seal_path(entry)
    write_json_atomic(path, {"schema": SEAL_SCHEMA, "entry": entry.name, "sha256": files})
    return path


def _seal_problem(entry: Path) -> tuple[str | None, list[Path]]:
    """(what is wrong with ``entry`` or None, the companion files its seal names)."""
    path = seal_path(entry)
    if not path.is_file():
        return "has no checksum file", []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        files = data["sha256"]
        if data.get("schema") != SEAL_SCHEMA:
            return f"has a checksum file of another schema ({data.get('schema')!r}, expected {SEAL_SCHEMA})", []
        if not isinstance(files, dict) or entry.name not in files:
            return f"has a checksum file that does not cover {entry.name}", []
        names = [str(n) for n in files]
        if any(Path(n).name != n for n in names):  # a seal names files in its own folder only
            return "has a checksum file naming a file outside its folder", []
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"has an unreadable checksum file ({type(exc).__name__})", []
    companions = [entry.parent / n for n in names if n != entry.name]
    for name in names:
        file = entry.parent / name
        if not file.is_file():
            return f"lost its file {file.name}", companions
        if hash_file(file).hexdigest() != files[name]:
            what = "failed its checksum" if name == entry.name else f"failed its checksum ({name})"
            return what, companions
    return None, companions


def evict(entry: str | Path) -> None:
    """Remove a cache entry, its companions and its seal."""
    entry = Path(entry)
    _, companions = _seal_problem(entry) if seal_path(entry).is_file() else (None, [])
    for path in (entry, *companions, seal_path(entry)):
        path.unlink(missing_ok=True)


def probe(entry: str | Path, what: str) -> tuple[bool, str | None]:
    """(True, None) when ``entry`` exists and matches its seal. A corrupt or unsealed
    entry is evicted, with one WARNING line: (False, what was wrong); the caller
    rebuilds. (False, None) when there is no entry."""
    entry = Path(entry)
    if not entry.is_file():
        if seal_path(
            entry
        ).exists():  # a seal without its entry (unlink would fail on a read-only cache even with nothing to remove)
            seal_path(entry).unlink(missing_ok=True)
        return False, None
    problem, companions = _seal_problem(entry)
    if problem is None:
        return True, None
    for path in (entry, *companions, seal_path(entry)):
        path.unlink(missing_ok=True)
    logger.warning(f"cached {what} {entry} {problem}: evicted and rebuilt")
    return False, problem


def reuse(entry: str | Path, what: str) -> bool:
    """``probe`` without the reason: True when the entry can be used as it is."""
    return probe(entry, what)[0]
