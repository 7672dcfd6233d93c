"""The held-out test split of ``<data_dir>/digits.npz`` (written by prepare.py)."""

from __future__ import annotations

import os
import zipfile
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from common.errors import DataError

if TYPE_CHECKING:
    from contract.config import CaseConfig

FILENAME = "digits.npz"
KEYS = ("x_train", "y_train", "x_test", "y_test")


def npz_path(data_dir: str) -> str:
    return os.path.join(data_dir, FILENAME)


def _bad(path: str, data_dir: str, problem: str) -> DataError:
    return DataError(
        f"{path}: {problem}; create it with `python3 -m benchmarks.digits.pytorch.prepare {data_dir}` (from inference/)"
    )


def load_split(data_dir: str, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(images float32 [N,1,8,8], labels int64 [N]) of ``split`` ("train" or "test")."""
    path = npz_path(data_dir)
    if not os.path.isfile(path):
        raise _bad(path, data_dir, "no such file")
    try:
        with np.load(path, allow_pickle=False) as archive:
            missing = [k for k in KEYS if k not in archive.files]
            if missing:
                raise _bad(path, data_dir, f"missing arrays {missing}")
            x, y = archive[f"x_{split}"], archive[f"y_{split}"]
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise _bad(path, data_dir, f"cannot read ({' '.join(str(exc).split()) or type(exc).__name__})") from None
    if x.ndim != 4 or x.shape[1:] != (1, 8, 8) or y.shape != (x.shape[0],) or x.shape[0] == 0:
        raise _bad(path, data_dir, f"x_{split} {x.shape} / y_{split} {y.shape} are not [N,1,8,8] / [N] with N > 0")
    return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y.astype(np.int64))


def build_dataloader(config: CaseConfig) -> DataLoader:
    x, y = load_split(config.data_dir, "test")
    return DataLoader(
        TensorDataset(x, y),
        batch_size=int(config.batch_size),
        shuffle=False,
        drop_last=False,
        num_workers=int(config.num_workers),
    )
