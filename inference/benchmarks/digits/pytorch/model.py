"""A small CNN for 8x8 digits, trained here on first use and cached.

There are no published weights for this model and nothing can be downloaded,
so the case trains it itself (a few seconds on one CPU core) and keys the
cache on everything that decides the result: this file's source, the data
file's bytes and the hyper-parameters.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from typing import Iterator

import torch
from loguru import logger
from torch import nn

from benchmarks.common import param, place_model
from common.files import atomic_path
from contract.cache import evict, reuse, seal
from contract.config import CaseConfig, setting

from .dataloader import load_split, npz_path

NUM_CLASSES = 10
HYPER_PARAMETERS = ("train_epochs", "learning_rate", "train_batch_size", "weight_decay")


class DigitsCNN(nn.Module):
    """conv3x3(1->16) ReLU conv3x3(16->32) ReLU maxpool2 | fc(512->64) ReLU fc(64->10)."""

    def __init__(self, num_classes: int = NUM_CLASSES):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(16, 32, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(32 * 4 * 4, 64),
            nn.ReLU(inplace=True),
            nn.Linear(64, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def hyper_parameters(config: CaseConfig) -> dict:
    hp = {key: param(config, key) for key in HYPER_PARAMETERS}
    hp["seed"] = int(setting(config, "seed"))
    return hp


def cache_key(data_file: str, hp: dict) -> str:
    digest = hashlib.sha256()
    with open(__file__, "rb") as source:
        digest.update(source.read())
    with open(data_file, "rb") as data:
        digest.update(data.read())
    digest.update(json.dumps(hp, sort_keys=True).encode())
    return digest.hexdigest()[:16]


@contextlib.contextmanager
def _deterministic_cpu() -> Iterator[None]:
    """One thread and deterministic kernels make the weights, and so the
    cache, reproducible; the process-wide settings are restored after."""
    threads = torch.get_num_threads()
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was_deterministic)
        torch.set_num_threads(threads)


def train(x: torch.Tensor, y: torch.Tensor, hp: dict) -> DigitsCNN:
    epochs, batch_size = int(hp["train_epochs"]), int(hp["train_batch_size"])
    with _deterministic_cpu(), torch.inference_mode(False):
        torch.manual_seed(hp["seed"])
        shuffle = torch.Generator().manual_seed(hp["seed"])
        model = DigitsCNN()
        optimizer = torch.optim.Adam(
            model.parameters(), lr=float(hp["learning_rate"]), weight_decay=float(hp["weight_decay"])
        )
        # Cosine decay to zero: the last epochs settle instead of bouncing, so accuracy is stable across seeds.
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(epochs, 1))
        model.train()
        for _ in range(epochs):
            order = torch.randperm(len(x), generator=shuffle)
            for start in range(0, len(x), batch_size):
                batch = order[start : start + batch_size]
                loss = nn.functional.cross_entropy(model(x[batch]), y[batch])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
            schedule.step()
    return model.eval()


def load_or_train(config: CaseConfig) -> DigitsCNN:
    hp = hyper_parameters(config)
    path = os.path.join(config.cache_dir, "weights", f"digits_{cache_key(npz_path(config.data_dir), hp)}.pt")
    model = DigitsCNN()
    if reuse(path, "weights"):
        try:
            model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
            logger.info(f"digits: loaded cached weights from {path}")
            return model.eval()
        except Exception as exc:  # noqa: BLE001 - a broken cache entry is retrained, not fatal
            evict(path)
            logger.warning(f"cached weights {path} unreadable ({type(exc).__name__}): evicted and retrained")
    x, y = load_split(config.data_dir, "train")
    start = time.perf_counter()
    model = train(x, y, hp)
    with torch.inference_mode():
        train_acc = (model(x).argmax(1) == y).float().mean().item()
    logger.info(
        f"digits: trained on {len(x)} images in {time.perf_counter() - start:.1f} s (train top-1 {train_acc:.4f}), "
        f"cached at {path}"
    )
    with atomic_path(path) as tmp:
        torch.save(model.state_dict(), tmp)
    seal(path)
    return model


def create_model(config: CaseConfig) -> nn.Module:
    return place_model(load_or_train(config), config)
