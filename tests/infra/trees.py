"""A copy of the inference tree to run a case in, optionally with an ONNX cache."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import copy_inference_tree


def copy_tree(target: Path, with_cache: Path | None = None) -> Path:
    copy_inference_tree(target)
    if with_cache is not None and with_cache.is_dir():
        shutil.copytree(with_cache, target / "onnxs")
    return target
