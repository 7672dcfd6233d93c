"""Base tier: all-reduce bus bandwidth over the run's hosts (torch.distributed; nccl-tests' algbw and busbw).

No data set, model or engine: the pipeline runs baseline_stage (benchmarks/base_common.py).
"""

from benchmarks.base_common import CASE_FUNCTIONS, allreduce_stage

build_dataloader = CASE_FUNCTIONS["build_dataloader"]
create_model = CASE_FUNCTIONS["create_model"]
evaluator = CASE_FUNCTIONS["evaluator"]
model_forward = CASE_FUNCTIONS["model_forward"]
export_model = CASE_FUNCTIONS["export_model"]
engine_forward = CASE_FUNCTIONS["engine_forward"]
baseline_stage = allreduce_stage

__all__ = ["build_dataloader", "create_model", "evaluator", "model_forward", "export_model", "engine_forward", "baseline_stage"]
