"""Random JPEGs in the ImageNet-val folder layout, for smoke tests and for
throughput runs where the real validation set is not at hand (accuracy is
then meaningless)."""

from __future__ import annotations

import os

import numpy as np
from PIL import Image

from benchmarks.data_cli import out_dir_args


def make_synthetic_imagenet(
    out_dir: str, classes: int = 4, per_class: int = 4, seed: int = 0, size: tuple[int, int] = (300, 260)
) -> str:
    """Write ``classes`` x ``per_class`` random images of ``size`` (width, height); return ``out_dir``."""
    rng = np.random.default_rng(seed)
    width, height = size
    for c in range(classes):
        class_dir = os.path.join(out_dir, f"n{c:08d}")
        os.makedirs(class_dir, exist_ok=True)
        for i in range(per_class):
            pixels = rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
            Image.fromarray(pixels, "RGB").save(os.path.join(class_dir, f"img_{i:04d}.JPEG"), quality=90)
    return out_dir


def main(argv: list[str] | None = None) -> None:
    args = out_dir_args(
        "Write a synthetic ImageNet-style validation folder.", argv, {"--classes": 4, "--per-class": 4, "--seed": 0}
    )
    make_synthetic_imagenet(args.out_dir, args.classes, args.per_class, args.seed)
    print(f"wrote {args.classes * args.per_class} images to {args.out_dir}")


if __name__ == "__main__":
    main()
