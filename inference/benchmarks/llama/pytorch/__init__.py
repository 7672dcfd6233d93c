"""A Llama causal LM: FlagPerf's prefill pass (MMLU-style accuracy, tokens/s, MFU), then
generation metrics (TTFT, TPOT, tokens/s) on the vendor's LLM runtime (spec §3.2.2 case API).

Besides the six case functions, two optional pipeline hooks: ``configure`` (the
config, before any step) and ``export_cached``/``performance_stage`` (the LLM
runtime's own export, and the LLM stage instead of the LoadGen-style rows).
"""

from .dataloader import build_dataloader
from .evaluator import evaluator
from .export import export_cached, export_model
from .forward import engine_forward, model_forward
from .model import create_model
from .stage import configure, performance_stage

__all__ = [
    "build_dataloader",
    "create_model",
    "evaluator",
    "model_forward",
    "engine_forward",
    "export_model",
    "configure",
    "export_cached",
    "performance_stage",
]
