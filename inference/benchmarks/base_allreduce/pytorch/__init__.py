"""Base tier: all-reduce bus bandwidth over the run's hosts (torch.distributed; nccl-tests' algbw and busbw).

No data set, model or engine: the pipeline runs baseline_stage (benchmarks/base_common.py).
"""

from benchmarks.base_common import allreduce_stage as baseline_stage
from benchmarks.base_common import (
    build_dataloader,
    create_model,
    engine_forward,
    evaluator,
    export_model,
    model_forward,
)  # noqa: F401

__all__ = [
    "build_dataloader",
    "create_model",
    "evaluator",
    "model_forward",
    "export_model",
    "engine_forward",
    "baseline_stage",
]
