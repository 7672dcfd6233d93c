"""Triple ranking accuracy.

A triple (anchor, paraphrase, non-paraphrase) is ranked correctly when the
cosine similarity of the anchor's embedding to the paraphrase's is strictly
greater than to the non-paraphrase's. The batch accuracy is the fraction of
triples ranked correctly; the framework weights it by the batch size, so the
reported figure is correct triples / all triples.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch


def evaluator(outputs: Sequence[torch.Tensor], y: Any) -> float:
    embeddings = outputs[0].float()
    if embeddings.dim() != 3 or embeddings.shape[1] != 3:
        raise ValueError(f"evaluator: expected embeddings [batch, 3, dim], got {list(embeddings.shape)}")
    if embeddings.shape[0] != len(y):
        raise ValueError(f"evaluator: {embeddings.shape[0]} triples of embeddings for {len(y)} samples")
    if embeddings.shape[0] == 0:
        return 0.0
    unit = torch.nn.functional.normalize(embeddings, p=2, dim=-1)
    positive = (unit[:, 0] * unit[:, 1]).sum(dim=-1)
    negative = (unit[:, 0] * unit[:, 2]).sum(dim=-1)
    return (positive > negative).float().mean().item()
