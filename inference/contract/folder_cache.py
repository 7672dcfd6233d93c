"""Cache entries that are folders: a runtime's model folder (ONNX Runtime GenAI's), a
generated Hugging Face checkpoint. The same rules as ``contract.cache`` for files:

- the folder is built in a private locked temporary folder (``common.files.atomic_dir``)
  and renamed into place whole, so no reader ever sees half of it;
- then sealed: the seal of its ``entry`` file (the one a runtime opens) names every
  file of the folder with its sha256 (``contract.cache.seal``), so a later run uses the
  folder only when every file matches, and otherwise evicts it with one warning
  and rebuilds.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable

from common.errors import EngineError
from common.files import atomic_dir
from contract.cache import SEAL_SUFFIX, probe, seal


def _files(folder: Path, entry: str) -> list[Path]:
    return [p for p in sorted(folder.iterdir()) if p.is_file() and p.name != entry and not p.name.endswith(SEAL_SUFFIX)]


def cached_folder(
    parent: str | Path, name: str, entry: str, build: Callable[[Path], None], what: str
) -> tuple[Path, str, str | None]:
    """``parent/name/entry``, built by ``build(folder)`` unless a sealed copy is there.

    Returns (the entry's path, ``"hit"`` or ``"miss"``, why a cached copy was
    evicted or None). ``build`` writes into the empty folder it is given; files in
    sub-folders are not part of the entry and are dropped."""
    parent = Path(parent)
    target = parent / name
    entry_path = target / entry
    usable, evicted = probe(entry_path, what)
    if usable:
        return entry_path, "hit", None
    with atomic_dir(parent, name) as work:
        out = work / name
        out.mkdir()
        build(out)
        if not (out / entry).is_file():
            raise EngineError(f"building the {what} wrote no {entry} into {out}")
        for sub in [p for p in out.iterdir() if p.is_dir()]:
            shutil.rmtree(sub)
        for path in out.iterdir():
            path.chmod(0o644)
        if target.exists():
            if probe(entry_path, what)[0]:  # another run finished the same entry meanwhile
                return entry_path, "hit", evicted
            shutil.rmtree(target)
        os.replace(out, target)
    seal(entry_path, _files(target, entry))
    return entry_path, "miss", evicted
