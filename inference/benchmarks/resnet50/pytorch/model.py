"""ResNet-50 (v1.5: stride on the 3x3 conv) defined in-project.

Attribute names mirror torchvision's ``resnet50`` so that its published
state_dict (``resnet50-0676ba61.pth`` / ``-11ad3fa6.pth``) loads with
``strict=True``: there is no torchvision in the images this case runs in.
"""

from __future__ import annotations

import torch
from loguru import logger
from torch import nn

from benchmarks.common import load_state_dict_strictly, param, place_model, resolve_weights_path
from contract.config import CaseConfig, setting

LAYERS = (3, 4, 6, 3)
WIDTHS = (64, 128, 256, 512)
EXPANSION = 4


def _conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, kernel_size=3, stride=stride, padding=1, bias=False)


def _conv1x1(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, kernel_size=1, stride=stride, bias=False)


class Bottleneck(nn.Module):
    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        out = planes * EXPANSION
        self.conv1 = _conv1x1(inplanes, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = _conv3x3(planes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = _conv1x1(planes, out)
        self.bn3 = nn.BatchNorm2d(out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + identity)


class ResNet50(nn.Module):
    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        inplanes = 64
        for index, (blocks, planes) in enumerate(zip(LAYERS, WIDTHS)):
            stride = 1 if index == 0 else 2
            downsample = nn.Sequential(
                _conv1x1(inplanes, planes * EXPANSION, stride), nn.BatchNorm2d(planes * EXPANSION)
            )
            layer = [Bottleneck(inplanes, planes, stride, downsample)]
            inplanes = planes * EXPANSION
            layer += [Bottleneck(inplanes, planes) for _ in range(1, blocks)]
            setattr(self, f"layer{index + 1}", nn.Sequential(*layer))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * EXPANSION, num_classes)
        self._init_like_torchvision()

    def _init_like_torchvision(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def create_model(config: CaseConfig) -> nn.Module:
    torch.manual_seed(int(setting(config, "seed")))
    model = ResNet50(num_classes=int(param(config, "num_classes")))
    path = resolve_weights_path(config)
    if path is None:
        logger.warning(
            "resnet50: parameters.yaml weights is null, so the weights are RANDOM: throughput is meaningful, accuracy "
            "is not"
        )
        config.accuracy_note = "random weights"
    else:
        load_state_dict_strictly(model, path, "torchvision resnet50")
        logger.info(f"resnet50: loaded weights from {path}")
    return place_model(model, config)
