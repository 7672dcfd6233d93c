"""What an ONNX model file references beside itself: its external-data files.

The one definition for the framework (``contract/cache.py`` keys and seals cache entries
with it) and for the plug-ins that may import only ``common/`` (an engine that copies a
model with its weights, a case that checks a user's model file).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

# The string every ONNX external-data entry carries as a key; a model file
# without it has no external data, and need not be parsed to find out.
_EXTERNAL_MARKER = b"location"


def has_external_marker(path: str | Path, digest: "hashlib._Hash | None" = None) -> bool:
    """Whether the file holds the external-data marker, feeding ``digest`` on the way (one read)."""
    found, tail = False, b""
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            if digest is not None:
                digest.update(chunk)
            found = found or _EXTERNAL_MARKER in tail + chunk
            tail = chunk[-len(_EXTERNAL_MARKER) :]
    return found


def read_external_locations(path: str | Path) -> list[str]:
    """The external-data file names the model references, parsed with onnx's API (no data
    loaded): sorted, each once; [] for a model onnx cannot parse (the engine says so)."""
    try:
        import onnx
        from onnx import external_data_helper as ext

        model = onnx.load(str(path), load_external_data=False)
        # initializers and attribute tensors, subgraphs included (onnx has no public name for it)
        all_tensors = getattr(ext, "_get_all_tensors", None)
        tensors = all_tensors(model) if all_tensors else model.graph.initializer
        return sorted({ext.ExternalDataInfo(t).location for t in tensors if ext.uses_external_data(t)})
    except Exception:  # noqa: BLE001 - an unparsable model is the engine's error to report
        return []


def onnx_external_locations(onnx_path: str | Path) -> list[str]:
    """The external-data file names an ONNX model references (relative to its
    folder, sorted, each once), read with onnx's API without loading the data.
    [] for a self-contained model, or one onnx cannot parse (the engine says so)."""
    path = Path(onnx_path)
    return read_external_locations(path) if has_external_marker(path) else []
