"""ImageNet validation images in the ImageFolder layout ``<data_dir>/<class>/<image>``.

The preprocessing reproduces torchvision's standard evaluation transform
(Resize(256) -> CenterCrop(224) -> ToTensor -> Normalize) with PIL and numpy
only, so published top-1 figures are comparable without torchvision.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from benchmarks.common import param, scan_files
from common.errors import ConfigError, DataError

if TYPE_CHECKING:
    from contract.config import CaseConfig

EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp")
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32).reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32).reshape(3, 1, 1)


def find_samples(data_dir: str) -> tuple[list[str], list[tuple[str, int]]]:
    """Classes are the sorted subfolder names and files are walked in sorted
    order, exactly as torchvision's ImageFolder does, so label indices match
    checkpoints trained with it. Links are followed, but no folder or image is
    counted twice: a link loop is a DataError naming the link (benchmarks.common.scan_files)."""
    if not os.path.isdir(data_dir):
        raise DataError(f"data_dir {data_dir}: no such directory")
    classes = sorted(entry.name for entry in os.scandir(data_dir) if entry.is_dir())
    if not classes:
        raise DataError(f"data_dir {data_dir}: no class subfolders (expected <data_dir>/<class>/<image>)")
    top = os.stat(data_dir)
    seen_dirs: dict = {(top.st_dev, top.st_ino): data_dir}  # no class may lead back to data_dir
    seen_files: dict = {}
    samples = []
    for label, name in enumerate(classes):
        samples += [
            (path, label) for path in scan_files(os.path.join(data_dir, name), EXTENSIONS, seen_dirs, seen_files)
        ]
    if not samples:
        raise DataError(f"data_dir {data_dir}: no images found (extensions {', '.join(EXTENSIONS)})")
    return classes, samples


def preprocess(image: Image.Image, resize: int, crop: int) -> torch.Tensor:
    image = image.convert("RGB")
    w, h = image.size
    # torchvision's Resize(int): the shorter side becomes `resize`, the longer one is truncated.
    if w <= h:
        size = (resize, int(resize * h / w))
    else:
        size = (int(resize * w / h), resize)
    image = image.resize(size, Image.BILINEAR)
    w, h = image.size
    left = int(round((w - crop) / 2.0))
    top = int(round((h - crop) / 2.0))
    image = image.crop((left, top, left + crop, top + crop))
    array = np.asarray(image, dtype=np.float32).transpose(2, 0, 1) / 255.0
    return torch.from_numpy((array - MEAN) / STD)


class ImageFolderDataset(Dataset):
    def __init__(self, data_dir: str, resize: int, crop: int, max_samples: int | None = None):
        self.classes, samples = find_samples(data_dir)
        self.samples = samples if max_samples is None else samples[:max_samples]
        self.resize = resize
        self.crop = crop

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.samples[index]
        # PIL reports broken files as OSError, SyntaxError (some plugins) or ValueError.
        try:
            with Image.open(path) as image:
                tensor = preprocess(image, self.resize, self.crop)
        except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
            reason = " ".join(str(exc).split()) or type(exc).__name__
            raise DataError(f"{path}: cannot read image: {reason}") from None
        return tensor, label


def _sizes(config: CaseConfig) -> tuple[int, int, int | None]:
    resize, crop = int(param(config, "resize")), int(param(config, "crop"))
    if not 0 < crop <= resize:
        raise ConfigError(f"parameters.yaml crop: {crop} must be in 1..resize ({resize})")
    max_samples = param(config, "max_samples")
    if max_samples is not None and int(max_samples) <= 0:
        raise ConfigError(f"parameters.yaml max_samples: {max_samples} must be null or a positive integer")
    return resize, crop, None if max_samples is None else int(max_samples)


def build_dataloader(config: CaseConfig) -> DataLoader:
    resize, crop, max_samples = _sizes(config)
    dataset = ImageFolderDataset(config.data_dir, resize, crop, max_samples)
    num_classes = int(param(config, "num_classes"))
    if len(dataset.classes) > num_classes:
        raise DataError(
            f"data_dir {config.data_dir}: {len(dataset.classes)} class folders but parameters.yaml num_classes is "
            f"{num_classes}"
        )
    return DataLoader(
        dataset,
        batch_size=int(config.batch_size),
        shuffle=False,
        drop_last=False,
        num_workers=int(config.num_workers),
        pin_memory=str(config.device).startswith("cuda"),
    )
