"""The resnet50 case's ImageNet-folder loader (same layout, same torchvision
evaluation transform: Resize(resize) -> CenterCrop(crop) -> Normalize), with
the crop checked against the ViT's patch size first."""

from __future__ import annotations

from typing import TYPE_CHECKING

from benchmarks.resnet50.pytorch.dataloader import build_dataloader as _imagenet_dataloader

from .model import image_size

if TYPE_CHECKING:
    from contract.config import CaseConfig


def build_dataloader(config: CaseConfig):
    image_size(config)  # a crop that is not a whole number of patches is a config error
    return _imagenet_dataloader(config)
