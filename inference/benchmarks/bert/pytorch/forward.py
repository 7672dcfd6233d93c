from benchmarks.common import inference_forward as engine_forward
from benchmarks.common import validation_forward as model_forward

__all__ = ["model_forward", "engine_forward"]
