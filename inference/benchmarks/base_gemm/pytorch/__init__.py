"""Base tier: GEMM FLOP/s per dtype over a size sweep (FlagPerf's computation-* cases).

No data set, model or engine: the pipeline runs baseline_stage (benchmarks/base_common.py).
"""

from benchmarks.base_common import (
    build_dataloader,
    create_model,
    engine_forward,
    evaluator,
    export_model,
    model_forward,
)  # noqa: F401
from benchmarks.base_common import gemm_stage as baseline_stage

__all__ = [
    "build_dataloader",
    "create_model",
    "evaluator",
    "model_forward",
    "export_model",
    "engine_forward",
    "baseline_stage",
]
