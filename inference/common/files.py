"""Atomic writes and content hashes: the one definition of each, for both sides.

``atomic_path`` is how every result, cache entry and report reaches its final
name: a temporary file beside the target, renamed into place only when the
writer finished. A writer killed half-way leaves a ``.NAME.*.tmp`` file that
``sweep_stale_temps`` removes on a later run; never a half-written target.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

_CHUNK = 1 << 20
TEMP_SUFFIX = ".tmp"
# A temp file older than this belongs to a writer that died (no export or
# compile here takes a day); younger ones may belong to a concurrent run.
STALE_TEMP_AGE_S = 6 * 3600.0


def hash_file(path: str | Path, digest: "hashlib._Hash | None" = None) -> "hashlib._Hash":
    digest = digest or hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest


def tree_files(
    root: str | Path,
    suffixes: tuple[str, ...] | None = None,
    skip_dirs: Iterable[str] = (),
    skip_suffixes: tuple[str, ...] = (".pyc", ".pyo"),
) -> list[Path]:
    """The regular files under ``root`` in a stable order, never following a link
    into a directory (a link loop cannot make it endless). ``suffixes`` keeps only
    those endings; ``skip_dirs`` names directories to leave out at any depth."""
    root = Path(root)
    if root.is_file():
        return [root]
    skip = {"__pycache__", *skip_dirs}
    found: list[Path] = []
    for current, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in skip)
        for name in sorted(files):
            path = Path(current) / name
            if name.endswith(skip_suffixes) or (suffixes is not None and not name.endswith(suffixes)):
                continue
            if path.is_file():
                found.append(path)
    return found


def hash_tree(
    paths: Iterable[str | Path],
    suffixes: tuple[str, ...] | None = (".py",),
    skip_dirs: Iterable[str] = (),
    relative_to_parent: bool = True,
    digest: "hashlib._Hash | None" = None,
) -> str:
    """Hash the relative names and contents of the files under each of ``paths``.

    Names are taken relative to each root's parent (so the root's own name
    counts) or, with ``relative_to_parent=False``, to the root itself."""
    digest = digest or hashlib.sha256()
    for root in paths:
        root = Path(root)
        base = root.parent if relative_to_parent else root
        for file in tree_files(root, suffixes, skip_dirs):
            digest.update(str(file.relative_to(base)).encode())
            hash_file(file, digest)
    return digest.hexdigest()


@contextmanager
def atomic_path(target: str | Path, mode: int = 0o644) -> Iterator[Path]:
    """Yield a temporary path next to ``target``; move it into place only on success."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=TEMP_SUFFIX, dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        # mkstemp makes 0600 files; results and caches are meant to be shared.
        os.chmod(tmp_path, mode)
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def sweep_stale_temps(directory: str | Path, max_age_s: float = STALE_TEMP_AGE_S) -> list[Path]:
    """Remove ``atomic_path`` temp files (``.NAME.*.tmp``) left in ``directory`` by
    writers that were killed; returns what was removed."""
    removed: list[Path] = []
    now = time.time()
    try:
        entries = list(Path(directory).iterdir())
    except OSError:
        return removed
    for path in entries:
        if not (path.name.startswith(".") and path.name.endswith(TEMP_SUFFIX)):
            continue
        try:
            if path.is_file() and now - path.stat().st_mtime >= max_age_s:
                path.unlink()
                removed.append(path)
        except OSError:
            continue
    return removed


def _finite(value: Any) -> Any:
    """Strict JSON has no NaN or Infinity: such a float is written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def json_text(data: Any) -> str:
    """The one JSON encoding of results: strict (no NaN/Infinity), indented."""
    return json.dumps(_finite(data), indent=2, sort_keys=False, default=str, allow_nan=False) + "\n"


def write_json_atomic(target: str | Path, data: Any) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(json_text(data), encoding="utf-8")
