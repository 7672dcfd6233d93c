from __future__ import annotations

from typing import TYPE_CHECKING

from benchmarks.common import export_onnx

if TYPE_CHECKING:
    from contract.config import CaseConfig


def export_model(model, config: CaseConfig) -> str:
    return export_onnx(model, config, sample_shape=(1, 8, 8))
