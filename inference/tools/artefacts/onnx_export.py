"""Step 4, onnx_export: the framework model exported once to an ONNX file in the cache.

The cache key (``export_key``) covers what the file depends on: the case's code
(its framework folder and benchmarks/common.py), the model's weights, the opset,
the case parameters, torch's version and, for FlagPerf's static-batch engines,
the batch size. An entry is used only when its seal matches (contract/cache.py);
a new one is exported into a private locked folder and moved in whole, so a
killed export never leaves a half-written entry.
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from loguru import logger

from common import layout
from common.errors import EngineError, one_line
from common.files import atomic_dir, fingerprint, hash_tree
from common.onnx_files import onnx_external_locations
from contract.cache import hash_state_dict, probe, seal
from contract.cases import case_dir
from contract.config import has_dynamic_axis
from tools.compat import flagperf

if TYPE_CHECKING:
    from contract.cases import CaseModule
    from contract.config import CaseConfig

# Beyond this an ONNX model cannot be one protobuf file; its weights go to one external file.
_PROTOBUF_LIMIT = 2 * 1024**3 - 64 * 1024**2


def export_key(perf_dir: Path, model: Any, config: CaseConfig) -> str:
    """The cache key of ``model``'s export under ``config``."""
    import torch

    parameters = {k: v for k, v in config.extra.items() if config.origin.get(k, "").endswith("parameters.yaml")}
    parts = {
        "code": hash_tree([case_dir(perf_dir, config.case, config.framework), perf_dir / "benchmarks" / "common.py"]),
        "weights": hash_state_dict(model),
        "opset": config.onnx_opset,
        "parameters": parameters,
        "torch": torch.__version__,
    }
    if not has_dynamic_axis(config):
        parts["static_batch"] = config.batch_size  # only then, so dynamic exports keep their keys
    return fingerprint(parts)


def export_to_cache(perf_dir: Path, model: Any, config: CaseConfig, case: CaseModule) -> tuple[str, dict]:
    """The cached export of ``model`` (exported by ``case.export_model`` on a miss): its path
    and the result's cache record ``{status: hit|miss, path, key[, evicted]}``."""
    key = export_key(perf_dir, model, config)
    target = Path(config.cache_dir) / f"{config.case}_{layout.framework_dir(config.framework)}_{key}.onnx"
    with _entry_lock(target):
        usable, evicted = probe(target, "ONNX export")
    if usable:
        logger.info(f"reusing cached ONNX export {target} (key {key})")
        status = "hit"
    else:
        _export_into_cache(target, model, config, case)
        config.export_onnx_path = str(target)
        logger.info(f"exported ONNX to {target} (key {key})")
        status = "miss"
    record = {"status": status, "path": str(target), "key": key}
    if evicted:
        record["evicted"] = evicted
    return str(target), record


def _export_into_cache(target: Path, model: Any, config: CaseConfig, case: CaseModule) -> None:
    """Export into a private locked folder (whatever the exporter writes there,
    external data included, goes when the step ends: also after a SIGKILL, at
    the next run's sweep), then move the model, and its one external-data file
    if it needs one, into the cache and seal them."""
    with atomic_dir(target.parent, target.name) as work:
        out = work / target.name
        config.export_onnx_path = str(out)
        returned = case.export_model(model, config)
        source_dir = work
        if returned is not None and Path(returned).resolve() != out.resolve():
            # FlagPerf's way: the case chose its own path and returned it.
            flagperf.adopt_export(returned, out, config.case)
            source_dir = Path(str(returned)).resolve().parent
            logger.info(f"export_model wrote {returned}; copied into the ONNX cache")
        if not out.is_file() or out.stat().st_size == 0:
            raise EngineError(f"benchmarks/{config.case}: export_model wrote nothing to config.export_onnx_path")
        companions = _self_contained(out, source_dir, target.name)
        with _entry_lock(target):
            for name in (*companions, out.name):  # the model last: it is what makes the entry exist
                (work / name).chmod(0o644)
                (work / name).replace(target.parent / name)
            seal(target, [target.parent / name for name in companions])


@contextmanager
def _entry_lock(target: Path) -> Iterator[None]:
    """One prober or writer of the cache folder's entries at a time, across the processes (and the containers)
    that share it: a prober evicts an entry it finds without its seal, which is every entry another writer has
    moved in and not sealed yet. The lock is the folder's own (flock on it: no file left behind); a folder
    that cannot be opened is not locked (the probe or the write then says what is wrong)."""
    try:
        fd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _self_contained(out: Path, source_dir: Path, final_name: str) -> list[str]:
    """Rewrite the exported model ``out`` so that it needs no file but itself, or, when
    its weights pass protobuf's 2 GB, exactly one: ``<final_name>.data`` beside it
    (returned, to move and seal with the model). An export that onnx cannot parse
    (a truncated write) is an EngineError here, never a cache entry."""
    import onnx

    try:
        locations = onnx_external_locations(out)
        model = onnx.load(str(out), load_external_data=False)
        if not locations:
            return []
        onnx.load_external_data_for_model(model, str(source_dir))
    except Exception as exc:  # noqa: BLE001 - onnx raises DecodeError, ValidationError, OSError...
        if isinstance(exc, OSError) and exc.errno is not None:
            raise
        raise EngineError(f"{out.name}: the exported ONNX model cannot be read back: {one_line(exc)}") from None
    data_name = f"{final_name}.data"
    for location in (*locations, data_name):  # in memory now; onnx.save would append to an old file
        if Path(location).name == location:
            (out.parent / location).unlink(missing_ok=True)
    if model.ByteSize() < _PROTOBUF_LIMIT:
        onnx.save_model(model, str(out))
        return []
    onnx.save_model(model, str(out), save_as_external_data=True, all_tensors_to_one_file=True, location=data_name)
    return [data_name]
