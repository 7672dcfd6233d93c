"""A digits.npz look-alike for machines without scikit-learn: ten random
8x8 prototypes plus noise, so it is learnable but says nothing about real
accuracy. Same schema as prepare.py writes."""

from __future__ import annotations

import numpy as np

from benchmarks.data_cli import out_dir_args

from .prepare import write_digits


def make_synthetic_digits(out_dir: str, train: int = 400, test: int = 100, seed: int = 0, noise: float = 0.2) -> str:
    rng = np.random.default_rng(seed)
    prototypes = rng.random((10, 1, 8, 8), dtype=np.float32)

    def split(n: int) -> tuple[np.ndarray, np.ndarray]:
        labels = np.arange(n, dtype=np.int64) % 10
        images = prototypes[labels] + noise * rng.standard_normal((n, 1, 8, 8), dtype=np.float32)
        return np.clip(images, 0.0, 1.0).astype(np.float32), labels

    x_train, y_train = split(train)
    x_test, y_test = split(test)
    return write_digits(out_dir, x_train, y_train, x_test, y_test)


def main(argv: list[str] | None = None) -> None:
    args = out_dir_args(
        "Write a synthetic digits.npz (no scikit-learn needed).", argv, {"--train": 400, "--test": 100, "--seed": 0}
    )
    print(f"wrote {make_synthetic_digits(args.out_dir, args.train, args.test, args.seed)}")


if __name__ == "__main__":
    main()
