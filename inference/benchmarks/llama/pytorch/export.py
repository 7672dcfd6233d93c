"""Export: what the vendor's LLM runtime needs, cached by content hash like every export.

For an engine with an ``export_format`` (``cpu/onnxruntime_genai``: ONNX Runtime
GenAI's folder) the engine's ``build`` turns the checkpoint folder into that
format, once per key: the checkpoint's files, the engine module's source, the
vendor's settings and the package versions. The folder lands in
``<cache_dir>/llama_<format>_<key>/`` and is sealed (``contract/folder_cache.py``);
a second identical run says ``reusing cached``. An engine that compiles the
PyTorch model itself (``nvidia/inductor_llm``) needs no export.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loguru import logger

from common.files import fingerprint, hash_file, hash_tree
from contract import llm_base
from contract.folder_cache import cached_folder
from contract.registry import engine_file, load_engine_module

from .weights import model_dir

if TYPE_CHECKING:
    from contract.config import CaseConfig

PACKAGES = ("onnxruntime-genai", "onnxruntime", "onnx", "onnx-ir", "transformers", "torch")


def _versions() -> dict[str, str | None]:
    found = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def export_key(config: CaseConfig, source: Path, build_keys: tuple[str, ...]) -> str:
    vendor_keys = {
        k: v
        for k, v in config.as_dict().items()
        if config.origin.get(k, "").endswith(f"{config.vendor}_configurations.yaml")
    }
    parts = {
        "build_keys": {key: config.get(key) for key in build_keys},
        "checkpoint": hash_tree([source], suffixes=None, relative_to_parent=False),
        "engine_code": hash_file(engine_file(config.vendor, config.compiler)).hexdigest(),
        "base_code": hash_file(llm_base.__file__).hexdigest(),
        "vendor_config": vendor_keys,
        "packages": _versions(),
    }
    return fingerprint(parts)


def export_cached(model: Any, config: CaseConfig) -> tuple[str | None, dict]:
    """(the entry file the engine opens, or None; the result's ``cache.onnx`` record)."""
    engine_class = load_engine_module(config.vendor, config.compiler).InferModel
    fmt = getattr(engine_class, "export_format", None)
    if fmt is None:
        logger.info(
            f"{config.vendor}/{config.compiler} reads the PyTorch model or the checkpoint itself: nothing to export"
        )
        return None, {"status": "none", "format": "pytorch"}
    source = model_dir(config)
    key = export_key(config, source, tuple(getattr(engine_class, "build_keys", ())))
    safe = "".join(c if c.isalnum() else "_" for c in fmt)
    entry, status, evicted = cached_folder(
        config.cache_dir,
        f"{config.case}_{safe}_{key}",
        engine_class.entry_file,
        lambda out: engine_class.build(source, out, config),
        f"{fmt} model",
    )
    logger.info(("reusing cached " if status == "hit" else "built ") + f"{fmt} model {entry.parent} (key {key})")
    record = {"status": status, "path": str(entry.parent), "key": key, "format": fmt}
    if evicted:
        record["evicted"] = evicted
    return str(entry), record


def export_model(model: Any, config: CaseConfig) -> str | None:
    """The case API's export (FlagPerf: the case picks its path): the cached folder's entry file."""
    return export_cached(model, config)[0]
