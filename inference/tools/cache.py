"""Content-addressed caching of exported and compiled artefacts (keys; atomic writes are common.files)."""
from __future__ import annotations

import hashlib
import json
from typing import Any


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
