"""The result record's file names and FlagPerf's result keys, defined once for both sides.

The container side writes them (``tools/results/result.py``); the host side reads them
(``utils/results/summary.py``, ``utils/results/aggregate.py``, ``utils/results/compare.py``,
``utils/results/report/``). The whole schema is in docs/result_schema.md.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Final

from common.files import atomic_path

SCHEMA_VERSION: Final = 2
RESULT_FILE: Final = "result.json"
FAILURE_FILE: Final = "failure.json"
# Raw per-query latencies (for pooled percentiles and compare's bootstrap) live
# beside result.json, not in it: int64 nanoseconds, one array per series
# (``validation``, ``inference``, ``performance_<row index>``). A series longer
# than MAX_RAW_LATENCIES is stored as a uniform random sample of that many
# (seeded, in query order); result.json's ``raw_latencies`` says count and stored.
LATENCY_FILE: Final = "latencies.npz"
MAX_RAW_LATENCIES: Final = 100_000


class Key:
    """FlagPerf's result keys, same names and meaning as FlagPerf's (spec §3.2.2)."""

    VENDOR: Final = "vendor"
    COMPILER: Final = "compiler"
    PRECISION: Final = "precision"
    BATCHSIZE: Final = "batchsize"
    FLOPS: Final = "flops"  # FLOPs per sample (FlagPerf: achieved FLOP/s; see docs/flagperf_migration.md)
    E2E_TIME: Final = "e2e_time(second)"
    VAL_WHOLE_QPS: Final = "p_validation_whole(qps)"
    VAL_CORE_QPS: Final = "p_validation_core(qps)"
    INFER_WHOLE_QPS: Final = "p_inference_whole(qps)"
    INFER_CORE_QPS: Final = "*p_inference_core(qps)"
    VAL_ACC: Final = "val_average_acc"
    INFER_ACC: Final = "infer_average_acc"


# In FlagPerf's order: the Finish Info line, summary columns.
FLAGPERF_KEYS: Final = (
    Key.VENDOR,
    Key.COMPILER,
    Key.PRECISION,
    Key.BATCHSIZE,
    Key.FLOPS,
    Key.E2E_TIME,
    Key.VAL_WHOLE_QPS,
    Key.VAL_CORE_QPS,
    Key.INFER_WHOLE_QPS,
    Key.INFER_CORE_QPS,
    Key.VAL_ACC,
    Key.INFER_ACC,
)
QPS_KEYS: Final = (Key.VAL_WHOLE_QPS, Key.VAL_CORE_QPS, Key.INFER_WHOLE_QPS, Key.INFER_CORE_QPS)


def flagperf_view(record: dict) -> dict:
    """The dict FlagPerf prints on its Finish Info line."""
    return {key: record.get(key) for key in FLAGPERF_KEYS}


def capped(values: list[int], cap: int = MAX_RAW_LATENCIES, seed: int = 0) -> list[int]:
    """``values``, or a seeded uniform sample of ``cap`` of them in their original order."""
    if len(values) <= cap:
        return list(values)
    keep = sorted(random.Random(seed).sample(range(len(values)), cap))
    return [values[i] for i in keep]


def write_latencies(path: Path, series: dict[str, list[int]]) -> None:
    import numpy as np

    with atomic_path(path) as tmp, open(tmp, "wb") as handle:  # a handle: np.savez would append .npz to a name
        np.savez_compressed(handle, **{name: np.asarray(v, dtype=np.int64) for name, v in series.items()})


def read_latencies(log_dir: str | Path) -> dict:
    """``{series: int64 ns array}`` from ``log_dir``/latencies.npz; {} when there is none."""
    path = Path(log_dir) / LATENCY_FILE
    if not path.is_file():
        return {}  # numpy not even imported: the run.py side may never need it
    import numpy as np

    with np.load(path) as data:
        return {name: data[name] for name in data.files}
