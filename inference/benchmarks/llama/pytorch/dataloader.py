"""The prompts of the FlagPerf prefill pass: MMLU-style questions, or synthetic prompts.

MMLU layout (FlagPerf's ``llama3_8b_mmlu``): ``<data_dir>/<mmlu_dir>/test/<subject>_test.csv``
and ``<data_dir>/<mmlu_dir>/dev/<subject>_dev.csv``, CSV without a header, one
question per row: question, choice A, B, C, D, answer letter. Each test question
becomes a ``few_shots``-shot prompt (the subject's first dev rows with their
answers, then the question and ``Answer:``); shots are dropped from the front
until the prompt fits ``max_prompt_tokens`` (then the prompt's tail is kept).

Without that folder the pass runs ``synthetic_prompts`` prompts of
``input_lengths[0]`` seeded token ids, and accuracy is ``n/a (no data)`` (or
``random weights`` for the random model, whose accuracy means nothing anyway).

A sample is a prompt token, as in FlagPerf's LLM cases (their ``p_inference_core``
is tokens/s, and ``flops`` is per token): a batch is one prompt
(``batch_size`` 1, FlagPerf's too), ``x = [input_ids [1, L]]`` and ``y`` a
``PromptLabels`` whose length is L. Accuracy is per question nonetheless
(``forward.py``).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loguru import logger

from common.errors import ConfigError, DataError
from contract.config import CaseConfig, origin_of
from contract.llm_workload import PromptSource

from .settings import LlamaSettings
from .weights import hf_config, load_tokenizer, prompt_id_range

if TYPE_CHECKING:
    import torch
    from torch.utils.data import DataLoader

CHOICES = ("A", "B", "C", "D")


@dataclass
class PromptLabels:
    answers: list[str | None]  # the answer letter per prompt; None for a synthetic prompt
    tokens: int

    def __len__(self) -> int:  # samples = prompt tokens (see the module docstring)
        return self.tokens


def read_rows(path: Path) -> list[list[str]]:
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            rows = [row for row in csv.reader(handle) if row and any(cell.strip() for cell in row)]
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    for number, row in enumerate(rows, start=1):
        if len(row) != 6 or row[5].strip() not in CHOICES:
            raise DataError(
                f"{path}: row {number}: expected 6 fields (question, A, B, C, D, answer letter A-D), got {len(row)} "
                "field(s)"
            )
    return rows


def _example(row: list[str], with_answer: bool) -> str:
    text = row[0] + "".join(f"\n{letter}. {choice}" for letter, choice in zip(CHOICES, row[1:5])) + "\nAnswer:"
    return text + (f" {row[5].strip()}\n\n" if with_answer else "")


def mmlu_prompts(folder: Path, few_shots: int) -> list[tuple[list[str], str]]:
    """(prompt parts: header, shots..., question) and the answer, per test question, subjects in name order."""
    tests = sorted((folder / "test").glob("*_test.csv"))
    if not tests:
        raise DataError(f"{folder}/test: no <subject>_test.csv files")
    items = []
    for test in tests:
        subject = test.name[: -len("_test.csv")]
        dev = folder / "dev" / f"{subject}_dev.csv"
        shots = read_rows(dev)[:few_shots] if few_shots and dev.is_file() else []
        header = f"The following are multiple choice questions (with answers) about {subject.replace('_', ' ')}.\n\n"
        for row in read_rows(test):
            items.append(([header, *(_example(s, True) for s in shots), _example(row, False)], row[5].strip()))
    return items


def encode(tokenizer: Any, parts: list[str], limit: int) -> list[int]:
    """Token ids of the prompt, dropping shots (parts[1:-1]) from the front until it fits."""
    parts = list(parts)
    while True:
        ids = tokenizer("".join(parts))["input_ids"]
        if len(ids) <= limit or len(parts) <= 2:
            return ids[-limit:]
        parts.pop(1)


class PromptSet:
    """A map-style dataset (torch imported only when an item is read: a config error at init stays quick)."""

    def __init__(self, prompts: list[list[int]], answers: list[str | None]):
        self.prompts, self.answers = prompts, answers

    def __len__(self) -> int:
        return len(self.prompts)

    def __getitem__(self, index: int):
        import torch

        return torch.tensor(self.prompts[index], dtype=torch.int64), self.answers[index]


def collate(items: list) -> tuple[list[torch.Tensor], PromptLabels]:
    import torch

    lengths = {len(ids) for ids, _ in items}
    if len(lengths) != 1:
        raise DataError(
            f"llama: a batch holds prompts of {len(lengths)} lengths; batch_size must be 1 for prompts of varying "
            "length"
        )
    ids = torch.stack([ids for ids, _ in items])
    return [ids], PromptLabels([answer for _, answer in items], int(ids.numel()))


def build_dataset(config: CaseConfig) -> PromptSet:
    settings = LlamaSettings.from_config(config)
    tokenizer = load_tokenizer(config)
    folder = Path(config.data_dir) / settings.mmlu_dir
    if folder.is_dir():
        items = mmlu_prompts(folder, settings.few_shots)
        prompts = [encode(tokenizer, parts, settings.max_prompt_tokens) for parts, _ in items]
        answers: list[str | None] = [answer for _, answer in items]
        logger.info(f"llama: {len(prompts)} MMLU-style questions from {folder} ({settings.few_shots}-shot)")
    else:
        length = config.get("input_lengths", [128])
        length = length[0] if isinstance(length, list) and length else 128
        low, high = prompt_id_range(tokenizer, int(hf_config(config)["vocab_size"]))
        source = PromptSource(low, high, int(config.seed))
        prompts = [
            source.batch(1, int(length), index, PromptSource.PASS)[0].tolist()
            for index in range(settings.synthetic_prompts)
        ]
        answers = [None] * len(prompts)
        if config.accuracy_note is None:
            config.accuracy_note = "no data"
        logger.info(f"llama: no {folder}; {len(prompts)} synthetic prompts of {length} tokens, accuracy n/a")
    return PromptSet(prompts, answers)


def build_dataloader(config: CaseConfig) -> DataLoader:
    from torch.utils.data import DataLoader

    if int(config.batch_size) != 1:
        raise ConfigError(
            f"{origin_of(config, 'batch_size')}: key 'batch_size' must be 1 for the llama case's prefill pass "
            "(one prompt per query, as FlagPerf's LLM cases); sweep batch sizes with batch_sizes"
        )
    dataset = build_dataset(config)
    if not dataset.prompts:
        raise DataError(f"data_dir {config.data_dir}: the MMLU-style folder holds no questions")
    if config.flops is None:  # FLOPs per sample = per prompt token: a prefill's, at the pass's mean prompt length
        from .model import model_shape

        shape = model_shape(config)
        config.flops = sum(shape.prefill_flops(1, len(p)) for p in dataset.prompts) / sum(
            len(p) for p in dataset.prompts
        )
    return DataLoader(
        dataset, batch_size=1, shuffle=False, drop_last=False, num_workers=int(config.num_workers), collate_fn=collate
    )
