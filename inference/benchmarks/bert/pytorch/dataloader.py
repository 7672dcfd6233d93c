"""Sentence triples, tokenised once before any timing.

Data: ``<data_dir>/sentence_triples.tsv``, UTF-8, tab-separated, a header line
``anchor<TAB>paraphrase<TAB>non_paraphrase`` and one triple per line. One
sample is one triple: its three sentences are encoded together, so a batch of
``batch_size`` samples is ``3 * batch_size`` sequences of ``max_seq_length``
tokens.

Each sample is ``((input_ids, attention_mask), index)`` with both tensors of
shape ``[3, max_seq_length]`` (int64, padded with [PAD] = 0); the DataLoader
stacks them to ``[batch, 3, max_seq_length]``. A sentence longer than
``max_seq_length`` tokens (with [CLS] and [SEP]) is truncated, with one
warning for the whole set.
"""

from __future__ import annotations

import csv
import os
from typing import TYPE_CHECKING

import torch
from loguru import logger
from torch.utils.data import DataLoader, Dataset

from benchmarks.common import param
from common.errors import ConfigError, DataError

from .weights import INSTALL_HINT, model_dir

if TYPE_CHECKING:
    from contract.config import CaseConfig

DATA_FILE = "sentence_triples.tsv"
COLUMNS = ("anchor", "paraphrase", "non_paraphrase")


def read_triples(path: str) -> list[tuple[str, str, str]]:
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such file (prepare it with: bash scripts/prepare_data.sh)")
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not rows or tuple(cell.strip() for cell in rows[0]) != COLUMNS:
        raise DataError(f"{path}: the first line must be the header {' <TAB> '.join(COLUMNS)}")
    triples = []
    for number, row in enumerate(rows[1:], start=2):
        if not row or not any(cell.strip() for cell in row):
            continue
        cells = [cell.strip() for cell in row]
        if len(cells) != 3 or not all(cells):
            raise DataError(
                f"{path}: line {number}: expected 3 non-empty tab-separated sentences, got {len(cells)} field(s)"
            )
        triples.append((cells[0], cells[1], cells[2]))
    if not triples:
        raise DataError(f"{path}: no triples after the header")
    return triples


def load_tokenizer(folder, max_seq_length: int):
    """The model's own fast tokenizer (tokenizer.json), truncating and padding to ``max_seq_length``."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ConfigError(f"bert: the package 'tokenizers' is not installed; install it with: {INSTALL_HINT}") from None
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=max_seq_length)
    pad_id = tokenizer.token_to_id("[PAD]")
    tokenizer.enable_padding(length=max_seq_length, pad_id=0 if pad_id is None else pad_id, pad_token="[PAD]")
    return tokenizer


def tokenize(tokenizer, sentences: list[str], max_seq_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and attention masks, ``[len(sentences), max_seq_length]`` int64 each."""
    encodings = tokenizer.encode_batch(sentences)
    truncated = [e for e in encodings if e.overflowing]
    if truncated:
        longest = max(len(e.ids) + sum(len(o.ids) for o in e.overflowing) for e in truncated)
        logger.warning(
            f"bert: {len(truncated)} of {len(sentences)} sentences are longer than max_seq_length "
            f"{max_seq_length} tokens (longest: about {longest}) and were truncated"
        )
    ids = torch.tensor([e.ids for e in encodings], dtype=torch.int64)
    mask = torch.tensor([e.attention_mask for e in encodings], dtype=torch.int64)
    return ids, mask


class TripleDataset(Dataset):
    def __init__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        # [triples, 3, max_seq_length]
        self.input_ids = input_ids
        self.attention_mask = attention_mask

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def __getitem__(self, index: int):
        return (self.input_ids[index], self.attention_mask[index]), index


def max_seq_length(config: CaseConfig) -> int:
    value = param(config, "max_seq_length")
    if isinstance(value, bool) or not isinstance(value, int) or not 3 <= value <= 512:
        raise ConfigError(
            f"parameters.yaml max_seq_length: {value!r} must be an integer in 3..512 (the model's position embeddings "
            "stop at 512)"
        )
    return value


def build_dataset(config: CaseConfig) -> TripleDataset:
    length = max_seq_length(config)
    max_samples = param(config, "max_samples")
    if max_samples is not None and (
        isinstance(max_samples, bool) or not isinstance(max_samples, int) or max_samples <= 0
    ):
        raise ConfigError(f"parameters.yaml max_samples: {max_samples!r} must be null or a positive integer")
    triples = read_triples(os.path.join(config.data_dir, DATA_FILE))[:max_samples]
    tokenizer = load_tokenizer(model_dir(config), length)
    ids, mask = tokenize(tokenizer, [s for triple in triples for s in triple], length)
    return TripleDataset(ids.view(len(triples), 3, length), mask.view(len(triples), 3, length))


def build_dataloader(config: CaseConfig) -> DataLoader:
    return DataLoader(
        build_dataset(config),
        batch_size=int(config.batch_size),
        shuffle=False,
        drop_last=False,
        num_workers=int(config.num_workers),
    )
