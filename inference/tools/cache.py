"""Content-addressed caching of exported and compiled artefacts, and atomic writes."""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

_CHUNK = 1 << 20


def hash_file(path: str | Path, digest: "hashlib._Hash | None" = None) -> "hashlib._Hash":
    digest = digest or hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest


def hash_tree(paths: Iterable[str | Path], suffixes: tuple[str, ...] = (".py",)) -> str:
    """Hash the contents and relative names of source files under ``paths``."""
    digest = hashlib.sha256()
    for root in paths:
        root = Path(root)
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.suffix in suffixes)
        for file in files:
            if "__pycache__" in file.parts:
                continue
            digest.update(str(file.relative_to(root.parent)).encode())
            hash_file(file, digest)
    return digest.hexdigest()


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


def fingerprint(parts: dict[str, Any], length: int = 16) -> str:
    """A short stable key for a JSON-serialisable description of an artefact."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:length]


@contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to ``target``; move it into place only on success."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        # mkstemp makes 0600 files; results and caches are meant to be shared.
        os.chmod(tmp_path, 0o644)
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_json_atomic(target: str | Path, data: Any) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n", encoding="utf-8")
