"""A ByteMLPerf backend folder as an InferPerf engine (``InferModel``; docs/bytemlperf_migration.md).

``tools/plugins.py::engine_module`` returns this module for a vendor/compiler pair
that names a backend folder (the registry recognises the folder and imports nothing of tools/). Construction does what
ByteMLPerf's perf engine
does before measuring: build ``configs``, answer the interact profile, call
``pre_optimize``, ``get_best_batch_size`` and ``compile(configs, dataloader)``
(InferPerf times it), hand the compile report, workload and model info to the
runtime backend and ``load`` the configured batch size. A call feeds
``predict`` a ``{ONNX input name: array}`` dict and returns its outputs (a dict
by output name, or a list) as CPU tensors. Optional engine API used by the
pipeline: ``prepare_batch_size`` (``load`` before a performance row, untimed),
``own_benchmark`` (the backend's ``benchmark()``, reported beside InferPerf's
rows) and ``best_batch_sizes`` (``get_best_batch_size``).
"""

from __future__ import annotations

import time
from dataclasses import fields
from pathlib import Path
from typing import Any

from loguru import logger

from common.errors import ConfigError, EngineError, one_line
from contract.config import CaseConfig, origin_of
from contract.engine_base import EngineBase
from contract.registry import ENGINE_ROOT
from tools.compat.bytemlperf import configs as byte_configs
from tools.compat.bytemlperf.backend import BackendFolder, backend_for, where_in
from tools.compat.bytemlperf.profile import config_lookup, parse_profile, resolve_answers

MAX_BEST = 64
MAX_BATCH = 1 << 16
_TOLERANCE_NAMES = ("fp32", "tf32", "fp16", "bf16", "int8", "fp8")


def folder_of(config: CaseConfig, root: Path = ENGINE_ROOT) -> BackendFolder:
    folder = backend_for(config.vendor, config.compiler, root)
    if folder is None:
        raise ConfigError(
            f"compiler '{config.compiler}' of vendor '{config.vendor}' is not a ByteMLPerf backend folder"
        )
    return folder


def interact_answers(folder: BackendFolder, config: CaseConfig, entries: list | None = None) -> dict[str, Any]:
    """The profile's answers from the config (ConfigError naming the key and the entry).
    InferPerf's own typed keys (CaseConfig's fields) never answer an entry of the same name."""
    from contract.config import CaseConfig

    reserved = frozenset(f.name for f in fields(CaseConfig))
    return resolve_answers(
        folder.profile if entries is None else entries,
        config_lookup(config, reserved),
        folder.name,
        folder.profile_file.name,
    )


def host_check(config: CaseConfig, root: Path = ENGINE_ROOT) -> BackendFolder:
    """What can be checked without importing the backend (run.py in MODE docker, where its
    packages are the image's): the folder, its interact profile and the config's answers."""
    folder = folder_of(config, root)
    if config.exist_compiler_path is not None:
        raise ConfigError(
            f"{origin_of(config, 'exist_compiler_path')}: key 'exist_compiler_path' cannot be used with "
            f"{folder.label}: "
            "a ByteMLPerf backend compiles from the ONNX model itself"
        )
    interact_answers(folder, config)
    return folder


def preflight(config: CaseConfig) -> None:
    """Before any work: host_check, and importing the backend's two modules."""
    host_check(config).classes()


class InferModel(EngineBase):
    engine_suffix = None  # the backend keeps its compiled objects itself
    rebuild_per_batch_size = False  # compiled once; load(batch_size) per batch size

    def __init__(self, config: CaseConfig, onnx_path: str | None, model: Any) -> None:
        super().__init__(config, onnx_path, model)
        if onnx_path is None or not Path(onnx_path).is_file():
            raise EngineError(f"ONNX file not found: {onnx_path}")
        self.folder = folder_of(config)
        compile_class, runtime_class = self.folder.classes()
        self.compiler = self._call(compile_class, "__init__")
        self.runtime = self._call(runtime_class, "__init__")
        self.signature = byte_configs.OnnxSignature.read(onnx_path)
        self.dataset = byte_configs.ByteMLPerfDataset(
            lambda: _case_loader(config), self.signature.input_names, config.batch_size, config.case
        )
        info = byte_configs.model_info(config, onnx_path, self.signature, self.dataset.sample_shapes)
        configs: dict[str, Any] = {"workload": byte_configs.workload(config, _listed(config)), "model_info": info}
        configs["interact_info"] = self.answers = interact_answers(self.folder, config, self._profile(configs))
        configs = self._optional(self.compiler, "pre_optimize", configs, default=configs) or configs
        self.best = self._best()
        if config.batch_sizes == "best" and self.best:
            configs["workload"]["batch_sizes"] = list(self.best)
            info["max_batch_size"] = max(config.batch_size, *self.best)
        start = time.perf_counter()
        report = self._call(self.compiler, "compile", configs, self.dataset)
        self.compile_duration = time.perf_counter() - start
        if not isinstance(report, dict):
            raise EngineError(
                f"{self.folder.label}: compile() must return its compile report (a dict), got {type(report).__name__}"
            )
        self.report, self.configs = report, configs
        self.runtime.configs, self.runtime.workload, self.runtime.model_info = (
            report,
            configs["workload"],
            configs["model_info"],
        )
        self.need_reload = bool(getattr(self.runtime, "need_reload", False))
        self.precision = _precision(report.get("compile_precision"), config)
        self.loaded: int | None = None
        import numpy as np
        import torch

        self._tensor, self._contiguous = torch.from_numpy, np.ascontiguousarray  # bound once: __call__ is timed
        self._warned_reload = False
        self.prepare_batch_size(config.batch_size)
        logger.info(
            f"{self.folder.label}: compiled in {self.compile_duration:.2f} s, precision "
            f"{report.get('compile_precision')}"
        )

    # ---- calling into the backend ----------------------------------------------------------
    def _call(self, target: Any, method: str, *args: Any, optional: bool = False) -> Any:
        """``target.method(*args)`` (or constructing ``target``); a failure is one EngineError line.
        ``optional``: NotImplementedError (the base classes' answer) returns NotImplemented."""
        try:
            return target(*args) if method == "__init__" else getattr(target, method)(*args)
        except (EngineError, ConfigError):
            raise
        except NotImplementedError as exc:
            if optional:
                return NotImplemented
            failure: Exception = exc
        except Exception as exc:  # noqa: BLE001 - the vendor's code: any failure is reported as the backend's
            failure = exc
        owner = target.__name__ if isinstance(target, type) else type(target).__name__
        raise EngineError(
            f"{self.folder.label}: {owner}.{method}() failed{where_in(failure, self.folder.path)}: {one_line(failure)}"
        ) from None

    def _optional(self, target: Any, method: str, *args: Any, default: Any = None) -> Any:
        """An optional API: not implemented gives ``default``."""
        found = self._call(target, method, *args, optional=True)
        return default if found is NotImplemented else found

    def _profile(self, configs: dict) -> list:
        """The backend's own get_interact_profile(configs) when it returns a list, else its XXX.json."""
        returned = self._optional(self.compiler, "get_interact_profile", dict(configs))
        if isinstance(returned, list) and returned:
            return parse_profile(returned, f"{self.folder.label}: get_interact_profile()")
        return self.folder.profile

    def _best(self) -> list[int] | None:
        best = self._optional(self.compiler, "get_best_batch_size")
        if best is None:
            return None
        ok = isinstance(best, (list, tuple)) and 0 < len(best) <= MAX_BEST
        if not ok or not all(isinstance(b, int) and not isinstance(b, bool) and 0 < b <= MAX_BATCH for b in best):
            raise EngineError(
                f"{self.folder.label}: get_best_batch_size() must return None or a list of batch sizes 1..{MAX_BATCH}, "
                f"got {best!r}"
            )
        return list(dict.fromkeys(int(b) for b in best))

    # ---- InferPerf's engine contract ------------------------------------------------------
    def prepare_batch_size(self, batch_size: int) -> None:
        """ByteMLPerf's ``load(batch_size)`` (outside any timed call)."""
        if batch_size != self.loaded:
            self._call(self.runtime, "load", int(batch_size))
            self.loaded = int(batch_size)

    def __call__(self, inputs: list) -> tuple[list, float]:
        rows = int(inputs[0].shape[0]) if inputs else self.loaded
        if rows is not None and rows != self.loaded and self.need_reload:
            if not self._warned_reload:
                logger.warning(
                    f"{self.folder.label}: need_reload is set, so a batch of {rows} (loaded {self.loaded}) reloads "
                    "inside the timed call"
                )
                self._warned_reload = True
            self.prepare_batch_size(rows)
        feeds = {name: tensor.numpy() for name, tensor in zip(self.signature.input_names, inputs)}
        try:
            outputs = self.runtime.predict(feeds)
        except Exception as exc:  # noqa: BLE001
            raise EngineError(
                f"{self.folder.label}: predict() failed{where_in(exc, self.folder.path)}: {one_line(exc)}"
            ) from None
        return [self._tensor(self._contiguous(out)) for out in self._ordered(outputs)], 0.0

    def _ordered(self, outputs: Any) -> list:
        """predict's outputs in ONNX output order: a dict by output name (or in its own order
        when its keys are other names but as many), a list/tuple, or one array."""
        names = self.signature.output_names
        if isinstance(outputs, dict):
            if all(name in outputs for name in names):
                return [outputs[name] for name in names]
            if len(outputs) == len(names):
                return list(outputs.values())
            raise EngineError(
                f"{self.folder.label}: predict() returned outputs {sorted(outputs)}, the ONNX model has {list(names)}"
            )
        if isinstance(outputs, (list, tuple)):
            return list(outputs)
        if hasattr(outputs, "shape"):
            return [outputs]
        raise EngineError(
            f"{self.folder.label}: predict() must return a dict or list of arrays, got {type(outputs).__name__}"
        )

    # ---- optional richer API -----------------------------------------------------------------
    def version(self) -> str | None:
        """The runtime's version(), else the compiler's; None when neither implements it (ByteMLPerf's CPU backend)."""
        for part in (self.runtime, self.compiler):
            found = self._optional(part, "version")
            if found is not None:
                return f"{self.folder.name}: {found}"
        return None

    def compile_report(self) -> dict:
        report = _jsonable(self.report)
        report["compile_duration"] = self.compile_duration  # compile() alone, timed by InferPerf
        report["backend"] = self.folder.name
        report["backend_kind"] = "bytemlperf"
        for name in ("hardware_type", "need_reload", "need_quant"):
            report[name] = _jsonable(getattr(self.runtime, name, getattr(self.compiler, name, None)))
        report["interact_info"] = _jsonable(self.answers)
        return report

    def best_batch_sizes(self) -> list[int] | None:
        return self.best

    def own_benchmark(self, batch_sizes: list[int], dataloader: Any) -> dict | None:
        """The backend's ``benchmark(dataloader)`` per batch size (after ``load``), normalised to
        BS/QPS/AVG Latency/P99 Latency; None when the backend does not implement it."""
        dataset = byte_configs.ByteMLPerfDataset(
            lambda: dataloader, self.signature.input_names, self.config.batch_size, self.config.case
        )
        rows: list[dict] = []
        for batch_size in batch_sizes:
            self.prepare_batch_size(batch_size)
            dataset.rebatch(batch_size)
            try:
                found = self._optional(self.runtime, "benchmark", dataset, default=NotImplemented)
            except EngineError as exc:
                logger.warning(f"backend's own benchmark() at batch size {batch_size} failed: {exc}")
                rows.append({"BS": batch_size, "error": str(exc)})
                continue
            if found is NotImplemented:
                return None
            rows.append(_own_row(found, batch_size))
            logger.info(f"{self.folder.label} benchmark() (its own timing) bs={batch_size}: {rows[-1]}")
        return {
            "source": f"{self.folder.name}: RuntimeBackend{self.folder.name}.benchmark()",
            "note": (
                "the backend's own timing, reported beside InferPerf's measurement of the same engine, "
                "never instead of it"
            ),
            "rows": rows,
        }


def _listed(config: CaseConfig) -> list[int]:
    return list(config.batch_sizes) if isinstance(config.batch_sizes, list) else [config.batch_size]


def _case_loader(config: CaseConfig) -> Any:
    from contract.cases import case_module

    return case_module(Path(config.perf_dir), config.case, config.framework).build_dataloader(config)


def _precision(compile_precision: Any, config: CaseConfig) -> str:
    """The numeric-check precision for the backend's ``compile_precision`` (FP16, BF16, INT8, int16_mix ...)."""
    text = str(compile_precision or ("fp16" if config.fp16 else "fp32")).lower()
    for name in _TOLERANCE_NAMES:
        if name in text:
            return name
    return "int8" if text.startswith("int") else "fp32"


def _own_row(found: Any, batch_size: int) -> dict:
    if not isinstance(found, dict):
        return {"BS": batch_size, "error": f"benchmark() returned {type(found).__name__}, not a dict"}
    row = {str(key).replace("_", " "): _jsonable(value) for key, value in found.items()}
    row.setdefault("BS", batch_size)
    return row


def _jsonable(value: Any) -> Any:
    """The value with NumPy scalars, paths and other objects made JSON-writable."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "size", 1) == 1:
        return item()
    return str(value)
