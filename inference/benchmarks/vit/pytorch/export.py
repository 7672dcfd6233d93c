from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Iterator

import torch

from benchmarks.common import export_onnx

from .model import image_size

if TYPE_CHECKING:
    from contract.config import CaseConfig


@contextlib.contextmanager
def mha_fastpath_disabled() -> Iterator[None]:
    """Without autograd, nn.MultiheadAttention takes a fused fast path
    (``aten::_native_multi_head_attention``) that has no ONNX symbolic; the
    exporter must trace the plain composite ops instead. Framework validation
    keeps the fast path: only the export turns it off, and restores it."""
    previous = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(previous)


def export_model(model, config: CaseConfig) -> str:
    crop = image_size(config)
    with mha_fastpath_disabled():
        return export_onnx(model, config, sample_shape=(3, crop, crop))
