"""Vision Transformer (Dosovitskiy et al., 2020) defined in-project.

Module and parameter names mirror torchvision's ``VisionTransformer``
(``conv_proj``, ``class_token``, ``encoder.pos_embedding``,
``encoder.layers.encoder_layer_<i>.{ln_1,self_attention,ln_2,mlp}``,
``encoder.ln``, ``heads.head``), so its published state_dicts
(``vit_b_16-c867db91.pth``, ``vit_l_16-852ce7e3.pth``, ...) load with
``strict=True`` while torchvision itself is not needed.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

import torch
from loguru import logger
from torch import nn

from benchmarks.common import load_state_dict_strictly, param, place_model, resolve_weights_path
from common.errors import ConfigError
from contract.config import CaseConfig, setting


@dataclass(frozen=True)
class VitSize:
    patch_size: int
    num_layers: int
    num_heads: int
    hidden_dim: int
    mlp_dim: int


# torchvision's vit_<name> builders.
SIZES = {
    "b_16": VitSize(16, 12, 12, 768, 3072),
    "b_32": VitSize(32, 12, 12, 768, 3072),
    "l_16": VitSize(16, 24, 16, 1024, 4096),
    "l_32": VitSize(32, 24, 16, 1024, 4096),
    "h_14": VitSize(14, 32, 16, 1280, 5120),
}


class MLPBlock(nn.Sequential):
    """Linear -> GELU -> Dropout -> Linear -> Dropout: state_dict keys ``0.*`` and ``3.*``."""

    def __init__(self, in_dim: int, mlp_dim: int, dropout: float = 0.0):
        super().__init__(
            nn.Linear(in_dim, mlp_dim), nn.GELU(), nn.Dropout(dropout), nn.Linear(mlp_dim, in_dim), nn.Dropout(dropout)
        )
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.normal_(m.bias, std=1e-6)


class EncoderBlock(nn.Module):
    def __init__(self, num_heads: int, hidden_dim: int, mlp_dim: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden_dim, eps=1e-6)
        self.self_attention = nn.MultiheadAttention(hidden_dim, num_heads, batch_first=True)
        self.dropout = nn.Dropout(0.0)
        self.ln_2 = nn.LayerNorm(hidden_dim, eps=1e-6)
        self.mlp = MLPBlock(hidden_dim, mlp_dim)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        x = self.ln_1(inputs)
        x, _ = self.self_attention(x, x, x, need_weights=False)
        x = self.dropout(x) + inputs
        return x + self.mlp(self.ln_2(x))


class Encoder(nn.Module):
    def __init__(self, seq_length: int, size: VitSize):
        super().__init__()
        self.pos_embedding = nn.Parameter(torch.empty(1, seq_length, size.hidden_dim).normal_(std=0.02))
        self.dropout = nn.Dropout(0.0)
        self.layers = nn.Sequential(
            OrderedDict(
                (f"encoder_layer_{i}", EncoderBlock(size.num_heads, size.hidden_dim, size.mlp_dim))
                for i in range(size.num_layers)
            )
        )
        self.ln = nn.LayerNorm(size.hidden_dim, eps=1e-6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(self.layers(self.dropout(x + self.pos_embedding)))


class VisionTransformer(nn.Module):
    def __init__(self, size: VitSize, image_size: int = 224, num_classes: int = 1000):
        super().__init__()
        if image_size % size.patch_size:
            raise ValueError(f"image size {image_size} is not divisible by the patch size {size.patch_size}")
        self.size = size
        self.image_size = image_size
        self.conv_proj = nn.Conv2d(3, size.hidden_dim, kernel_size=size.patch_size, stride=size.patch_size)
        self.class_token = nn.Parameter(torch.zeros(1, 1, size.hidden_dim))
        self.seq_length = (image_size // size.patch_size) ** 2 + 1
        self.encoder = Encoder(self.seq_length, size)
        self.heads = nn.Sequential(OrderedDict(head=nn.Linear(size.hidden_dim, num_classes)))
        # torchvision's initialisation (for random-weight runs).
        fan_in = 3 * size.patch_size**2
        nn.init.trunc_normal_(self.conv_proj.weight, std=math.sqrt(1 / fan_in))
        nn.init.zeros_(self.conv_proj.bias)
        nn.init.zeros_(self.heads.head.weight)
        nn.init.zeros_(self.heads.head.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        x = self.conv_proj(x)  # [n, hidden, h/p, w/p]
        x = x.reshape(n, self.size.hidden_dim, -1).permute(0, 2, 1)
        x = torch.cat([self.class_token.expand(n, -1, -1), x], dim=1)
        x = self.encoder(x)
        return self.heads(x[:, 0])


def vit_size(config: CaseConfig) -> tuple[str, VitSize]:
    name = param(config, "model")
    if name not in SIZES:
        raise ConfigError(f"parameters.yaml model: {name!r} must be one of {', '.join(SIZES)}")
    return name, SIZES[name]


def image_size(config: CaseConfig) -> int:
    """The crop fed to the model: a whole number of patches on each side."""
    name, size = vit_size(config)
    crop = param(config, "crop")
    if isinstance(crop, bool) or not isinstance(crop, int) or crop <= 0:
        raise ConfigError(f"parameters.yaml crop: {crop!r} must be a positive integer")
    if crop % size.patch_size:
        raise ConfigError(
            f"parameters.yaml crop: {crop} is not divisible by the patch size {size.patch_size} of vit_{name} "
            f"(e.g. {crop - crop % size.patch_size} or {crop - crop % size.patch_size + size.patch_size})"
        )
    return crop


def create_model(config: CaseConfig) -> nn.Module:
    torch.manual_seed(int(setting(config, "seed")))
    name, size = vit_size(config)
    model = VisionTransformer(size, image_size(config), int(param(config, "num_classes")))
    path = resolve_weights_path(config)
    if path is None:
        logger.warning(
            f"vit: parameters.yaml weights is null, so the vit_{name} weights are RANDOM: throughput is meaningful, "
            "accuracy is not (reported as null)"
        )
        config.accuracy_note = "random weights"
        # torchvision zeroes the head (it is always trained); untrained, that would
        # make every logit 0 and the engine's numeric check vacuous.
        nn.init.normal_(model.heads.head.weight, std=0.02)
    else:
        load_state_dict_strictly(model, path, f"torchvision vit_{name} (crop {model.image_size})")
        logger.info(f"vit: loaded vit_{name} weights from {path}")
    return place_model(model, config)
