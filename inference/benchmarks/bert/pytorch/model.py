"""all-MiniLM-L6-v2 as a sentence encoder: transformers' BertModel on the real
weights, then sentence-transformers' pooling (mean over real tokens, L2
normalisation), all inside one module so the exported engine outputs embeddings.

Input ``[batch, group, max_seq_length]`` ids and attention mask (int64; group
is 3 for this case's triples), output ``[batch, group, 384]`` unit vectors.
Token type ids are all zero for single sentences, so BertModel's default is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from loguru import logger
from torch import nn

from benchmarks.common import place_model
from common.errors import ConfigError

from .weights import INSTALL_HINT, model_dir

if TYPE_CHECKING:
    from contract.config import CaseConfig


class SentenceEncoder(nn.Module):
    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        # Group and length are fixed for an exported graph (int() makes them
        # constants there); only the batch (-1) stays dynamic.
        group, length = int(input_ids.shape[1]), int(input_ids.shape[2])
        ids = input_ids.reshape(-1, length)
        mask = attention_mask.reshape(-1, length)
        hidden = self.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        # sentence-transformers' Pooling(mean) then Normalize(): same clamps.
        pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
        embeddings = nn.functional.normalize(pooled, p=2, dim=1)
        return embeddings.reshape(-1, group, int(embeddings.shape[-1]))


def load_encoder(folder) -> nn.Module:
    try:
        from transformers import BertModel
        from transformers.utils import logging as hf_logging
    except ImportError:
        raise ConfigError(
            f"bert: the package 'transformers' is not installed; install it with: {INSTALL_HINT}"
        ) from None
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        # local_files_only: a hub download is never attempted, whatever the folder holds.
        return BertModel.from_pretrained(
            str(folder), local_files_only=True, attn_implementation="sdpa", add_pooling_layer=False
        )
    except (OSError, ValueError) as exc:
        raise ConfigError(f"bert: cannot load the weights in {folder}: {' '.join(str(exc).split())[:300]}") from None


def create_model(config: CaseConfig) -> nn.Module:
    folder = model_dir(config)
    model = SentenceEncoder(load_encoder(folder))
    count = sum(p.numel() for p in model.parameters())
    logger.info(f"bert: loaded all-MiniLM-L6-v2 ({count:,} parameters) from {folder}")
    return place_model(model, config)
