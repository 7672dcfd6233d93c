"""ONNX export with a dynamic batch axis and the fixed ``max_seq_length``.

Inputs ``input_ids`` and ``attention_mask`` (int64 ``[batch, 3, max_seq_length]``,
in the order the DataLoader yields them, which is the order the engine is
called with), output ``embeddings`` (float32 ``[batch, 3, 384]``).
"""

from __future__ import annotations

import time

import torch
from loguru import logger

from benchmarks.common import _cpu_fp32, _quiet
from common.errors import ConfigError
from contract.config import CaseConfig, setting

from .dataloader import max_seq_length

INPUT_NAMES = ("input_ids", "attention_mask")
OUTPUT_NAME = "embeddings"


def example_inputs(length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch 2 (so the tracer cannot fold the batch size) with real padding in
    every sequence, so no 'mask is all ones' shortcut can be traced into the graph."""
    ids = torch.full((2, 3, length), 1000, dtype=torch.int64)
    mask = torch.ones_like(ids)
    ids[..., 0], ids[..., -1] = 101, 0
    mask[..., -1] = 0
    ids[..., -2] = 102
    return ids, mask


def export_model(model, config: CaseConfig) -> str:
    path = setting(config, "export_onnx_path")
    if not path:
        raise ConfigError("export_onnx_path: not set by the framework before export_model")
    opset = int(setting(config, "onnx_opset"))
    example = example_inputs(max_seq_length(config))
    dynamic = {name: {0: "batch"} for name in (*INPUT_NAMES, OUTPUT_NAME)}
    start = time.perf_counter()
    with torch.inference_mode(False), torch.no_grad(), _quiet():
        torch.onnx.export(
            _cpu_fp32(model),
            example,
            path,
            input_names=list(INPUT_NAMES),
            output_names=[OUTPUT_NAME],
            dynamic_axes=dynamic,
            opset_version=opset,
            do_constant_folding=True,
            dynamo=False,
        )
    logger.info(f"exported ONNX (opset {opset}) to {path} in {time.perf_counter() - start:.2f} s")
    return path
