"""Handwritten digits (scikit-learn's 8x8 set) with a small CNN trained in-case:
the one case whose accuracy is real on a machine with no downloads (spec §3.2.2 case API)."""

from .dataloader import build_dataloader
from .evaluator import evaluator
from .export import export_model
from .forward import engine_forward, model_forward
from .model import create_model

__all__ = ["build_dataloader", "create_model", "evaluator", "model_forward", "engine_forward", "export_model"]
