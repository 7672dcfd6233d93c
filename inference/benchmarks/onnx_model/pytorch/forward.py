"""Validation (the ONNX Runtime CPU reference) and inference (the vendor engine), timed by the
framework's one loop. Synthetic inputs carry no labels: nothing is scored, and the accuracy is
reported as ``n/a (synthetic inputs)`` (``accuracy_note``, set by ``configure``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from common.errors import EngineError
from contract.measuring import measuring
from contract.phase import PhaseResult

if TYPE_CHECKING:
    from contract.config import CaseConfig


def evaluator(outputs: list, y: Any) -> float:
    """Part of the case API, never called: the forwards below pass no evaluator."""
    raise EngineError("onnx_model: synthetic inputs have no labels; there is no accuracy to evaluate")


def model_forward(model, dataloader, evaluator, config: CaseConfig) -> PhaseResult:
    return measuring().timed_forward(model, dataloader, None, config, phase="validation")


def engine_forward(model, dataloader, evaluator, config: CaseConfig) -> PhaseResult:
    return measuring().timed_forward(model, dataloader, None, config, phase="inference")


def export_model(model, config: CaseConfig) -> str:
    """The model file is the export. Not reached in a run: ``configure`` sets ``exist_onnx_path``
    to the file, so the framework skips the export step and compiles the file as it is."""
    return str(config.exist_onnx_path)
