from __future__ import annotations

from typing import TYPE_CHECKING

from benchmarks.common import export_onnx, param

if TYPE_CHECKING:
    from contract.config import CaseConfig


def export_model(model, config: CaseConfig) -> str:
    crop = int(param(config, "crop"))
    return export_onnx(model, config, sample_shape=(3, crop, crop))
