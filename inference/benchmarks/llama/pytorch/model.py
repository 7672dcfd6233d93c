"""The framework model: the checkpoint as ``transformers``' causal LM, eager (FlagPerf's
``AutoModelForCausalLM``), on ``device``, fp16 where ``fp16`` is set and the device is a GPU."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loguru import logger

from common.errors import ConfigError
from contract.llm_base import ModelShape

from .weights import hf_config, model_dir

if TYPE_CHECKING:  # torch is imported where a model is built or run: a config error at init stays quick
    import torch

    from contract.config import CaseConfig


def create_model(config: CaseConfig) -> torch.nn.Module:
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from benchmarks.common import place_model

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    folder = model_dir(config)
    try:
        # local_files_only: a hub download is never attempted, whatever the folder holds.
        model = AutoModelForCausalLM.from_pretrained(
            str(folder), local_files_only=True, dtype=torch.float32, attn_implementation="sdpa"
        )
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"llama: cannot load the checkpoint in {folder}: {' '.join(str(exc).split())[:300]}"
        ) from None
    count = sum(p.numel() for p in model.parameters())
    logger.info(f"llama: loaded {type(model).__name__} ({count / 1e6:.1f} M parameters) from {folder}")
    return place_model(model, config)


def model_shape(config: CaseConfig, model: Any = None) -> ModelShape:
    """The shape FLOPs and KV bytes are computed from; the parameter count from the model when there is one."""
    params = sum(p.numel() for p in model.parameters()) if model is not None else None
    return ModelShape.from_hf_config(hf_config(config), params)


def reference_logits(model: torch.nn.Module, config: CaseConfig):
    """The framework model as ids -> logits (numpy ``[batch, length, vocab]`` float32), no cache: the generation check's
    reference."""
    import torch

    device = next(model.parameters()).device

    def reference(ids: Any):
        with torch.inference_mode():
            out = model(input_ids=torch.as_tensor(ids, dtype=torch.long, device=device), use_cache=False)
        return out.logits.float().cpu().numpy()

    return reference


def framework_step(model: torch.nn.Module, config: CaseConfig):
    """The framework model as an engine-shaped step: ``[input_ids]`` -> ``[last position's logits]``."""
    import torch

    device = next(model.parameters()).device

    def step(inputs: list) -> tuple[list, float]:
        with torch.inference_mode():
            out = model(input_ids=inputs[0].to(device), use_cache=False, logits_to_keep=1)
        return [out.logits[:, -1, :].float().cpu()], 0.0

    return step
