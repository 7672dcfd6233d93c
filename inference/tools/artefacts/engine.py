"""Step 5, vendor_compile: the vendor's engine, compiled or loaded from the cache.

An engine class that declares ``engine_suffix`` writes a file the cache keeps,
keyed by what the engine depends on (``EngineBuilder.key``): the ONNX file and
its external weights, the engine's source, fp16, the batch size, the vendor's
config keys, the CPU, the GPU and the installed packages. A user's
``exist_compiler_path`` is loaded as it is; an engine with no suffix is built
every run. A sealed entry the engine cannot load is evicted and rebuilt.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from loguru import logger

from common.errors import EngineError, one_line
from common.files import fingerprint, hash_file
from contract.cache import evict, onnx_digests, onnx_external_files, probe, seal
from tools.compat.adapters import adapt_engine, engine_suffix
from tools.env import cpu_model, package_versions
from tools.plugins import engine_source

if TYPE_CHECKING:
    from contract.config import CaseConfig
    from contract.engine_base import EngineBase


class EngineBuilder:
    """Builds the engines of one vendor module for one ONNX file and model, for any batch size.

    ``evicted`` says why a cached engine was thrown away, when one was (the first reason).
    """

    def __init__(self, engine_module: ModuleType, onnx_path: str | None, model: Any) -> None:
        self.engine_class = engine_module.InferModel
        self.onnx_path = onnx_path
        self.model = model
        self.evicted: str | None = None

    def build(self, config: CaseConfig) -> tuple[EngineBase, str, float]:
        """The engine for ``config`` (adapted the FlagPerf way when it asks for it), its cache
        status (user, hit, miss, rebuilt, none) and the seconds it took; sets ``config.engine_path``."""
        status = self._locate(config)
        start = time.perf_counter()
        try:
            engine = self._construct(config)
        except EngineError as exc:
            if status != "hit":
                raise
            # Sealed, yet the engine cannot load it (written by a writer that lied about
            # success, say): the entry goes, so it cannot fail every later run too.
            logger.warning(
                f"cached engine {config.engine_path} could not be loaded ({one_line(exc)}): evicted and rebuilt"
            )
            evict(_entry(config))
            self.evicted = f"could not be loaded ({one_line(exc)})"
            status, start = "miss", time.perf_counter()
            engine = self._construct(config)
        duration = time.perf_counter() - start
        return engine, self._settle(engine, status, config), duration

    def _construct(self, config: CaseConfig) -> EngineBase:
        return adapt_engine(self.engine_class(config, self.onnx_path, self.model), config, self.onnx_path)

    def _locate(self, config: CaseConfig) -> str:
        """Set ``config.engine_path``: the user's file, or the cache entry of this key; the status before the build."""
        if config.exist_compiler_path is not None:
            config.engine_path = config.exist_compiler_path
            return "user"
        suffix = engine_suffix(self.engine_class)
        if not suffix:
            return "none"
        key = self.key(config)
        config.engine_path = str(
            Path(config.cache_dir) / f"{config.case}_{config.vendor}_{config.compiler}_{key}{suffix}"
        )
        usable, evicted = probe(config.engine_path, "engine")
        self.evicted = self.evicted or evicted
        if usable:
            logger.info(f"reusing cached engine {config.engine_path} (key {key})")
            return "hit"
        return "miss"

    @staticmethod
    def _settle(engine: EngineBase, status: str, config: CaseConfig) -> str:
        """The final status once the engine exists; seals what it wrote."""
        if status not in ("hit", "miss"):
            return status  # the user's file, or no cache entry
        path = _entry(config)
        if status == "hit" and engine.compiled is True:
            # The engine judged the cached file stale (another GPU, another TensorRT) and rebuilt it.
            status = "rebuilt"
        if status == "miss" and not Path(path).is_file():
            logger.warning(f"engine declared engine_suffix but wrote no {path}; nothing cached")
            status = "none"
        if status in ("miss", "rebuilt"):
            # An ONNX-format engine (ONNX Runtime's) may keep its weights in a file beside it.
            seal(path, onnx_external_files(path) if path.endswith(".onnx") else [])
        return status

    def key(self, config: CaseConfig) -> str:
        """The cache key of the engine ``config`` asks for."""
        assert config.compiler is not None, "an engine is built only with a compiler"
        vendor_keys = {
            k: v
            for k, v in config.as_dict().items()
            if config.origin.get(k, "").endswith(f"{config.vendor}_configurations.yaml")
        }
        onnx = self.onnx_path
        digests = onnx_digests(onnx) if onnx and Path(onnx).is_file() else {"": onnx}
        parts = {
            "onnx": digests.pop(""),
            "engine_code": hash_file(engine_source(config.vendor, config.compiler)).hexdigest(),
            "fp16": config.fp16,
            "batch_size": config.batch_size,
            "vendor_config": vendor_keys,
            "cpu": cpu_model(),
            "gpu": _gpu_name(config.device),
            "packages": package_versions(),
        }
        if digests:
            # The weights torch's exporter (or the user) put beside the model: an engine
            # built from other weights must miss, even though the model file is the same.
            parts["onnx_external_data"] = digests
        return fingerprint(parts)


def _entry(config: CaseConfig) -> str:
    """The cache entry's path, which ``_locate`` set for a hit or a miss."""
    assert config.engine_path is not None, "the engine's cache entry is located before it is used"
    return config.engine_path


def _gpu_name(device: str) -> str | None:
    """Engines such as TensorRT plans are only valid on the GPU they were built for."""
    if not device.startswith("cuda"):
        return None
    import torch

    return torch.cuda.get_device_name(torch.device(device)) if torch.cuda.is_available() else None
