"""The pipeline's calls into ByteMLPerf's conventions (tools/pipeline.py), one function each.

data_percent         ByteMLPerf's workload key: the share of the data set used,
                     1..100 (the first ``ceil(batches * data_percent / 100)`` batches)
batch_sizes: best    the engine's best batch sizes (ByteMLPerf's
                     ``get_best_batch_size``; InferPerf's ``best_batch_sizes``)
                     become the sweep; without them, ``[batch_size]``
own benchmark        an engine's ``own_benchmark(batch_sizes, dataloader)``
                     (a ByteMLPerf backend's ``benchmark()``): kept in the result
                     as ``engine.own_benchmark``, beside InferPerf's rows
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Iterator

from loguru import logger

from common.errors import one_line
from tools.compat.loader_view import LoaderView

if TYPE_CHECKING:
    from contract.config import CaseConfig
    from contract.engine_base import EngineBase

BEST = "best"


class FirstBatches(LoaderView):
    """A data loader view that yields only its first ``batches`` batches."""

    def __init__(self, loader: Any, batches: int) -> None:
        super().__init__(loader)
        self.batches = batches

    def __len__(self) -> int:
        return self.batches

    def __iter__(self) -> Iterator:
        for index, batch in enumerate(self.loader):
            if index >= self.batches:
                break
            yield batch


def apply_data_percent(dataloader: Any, config: CaseConfig) -> Any:
    """The loader cut to ``data_percent`` % of its batches (at least one); itself at 100 or unset."""
    percent = config.get("data_percent")
    if percent in (None, 100):
        return dataloader
    try:
        total = len(dataloader)
    except TypeError:
        logger.warning(f"data_percent {percent}: the data loader has no length, so the whole data set is used")
        return dataloader
    keep = max(1, math.ceil(total * percent / 100))
    logger.info(f"data_percent {percent}: {keep} of {total} batches are used")
    return FirstBatches(dataloader, keep)


def resolve_best(config: CaseConfig, engine_info: dict) -> None:
    """``batch_sizes: best`` becomes the engine's own list (or ``[batch_size]`` without one)."""
    if config.batch_sizes != BEST:
        return
    best = engine_info.get("best_batch_sizes")
    config.batch_sizes = list(best) if best else [config.batch_size]
    logger.info(
        f"batch_sizes: best -> {config.batch_sizes}"
        + (" (the engine's best batch sizes)" if best else " (the engine names no best batch sizes: batch_size)")
    )


def own_benchmark(engine: EngineBase, config: CaseConfig, dataloader: Any, engine_info: dict) -> None:
    """An engine's own benchmark, if it has one, into ``engine_info["own_benchmark"]``; a
    failure of it is a warning (InferPerf's measurement of the engine stands without it)."""
    if not engine.implements("own_benchmark"):
        return
    try:
        found = engine.own_benchmark(list(config.batch_sizes), dataloader)
    except Exception as exc:  # noqa: BLE001 - optional API: it must not lose the run
        logger.warning(f"engine's own benchmark failed, omitted: {one_line(exc)}")
        engine_info["own_benchmark"] = {"error": one_line(exc), "rows": []}
        return
    if found is not None:
        engine_info["own_benchmark"] = found
