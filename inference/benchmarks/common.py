"""Pieces every image-classification case shares: model placement, the
framework step, top-1 accuracy and ONNX export.

Keeping them here means a change in how steps are timed or models exported
is made once, not per case.
"""

from __future__ import annotations

import contextlib
import copy
import io
import os
import time
import warnings
from typing import Any, Callable, Iterator, Sequence

import torch
from loguru import logger

from common.errors import ConfigError, DataError
from common.torch_step import half_precision, make_step
from contract.config import CaseConfig, CaseView, has_dynamic_axis, setting
from contract.measuring import measuring
from contract.phase import PhaseResult

INPUT_NAME = "input"
OUTPUT_NAME = "output"


def param(config: CaseView, key: str) -> Any:
    """A parameters.yaml value; a missing key is a config error, not an AttributeError deep in a case."""
    if not hasattr(config, key):
        raise ConfigError(f"parameters.yaml: missing key '{key}'")
    return getattr(config, key)


def resolve_weights_path(config: CaseView) -> str | None:
    """parameters.yaml ``weights``: an absolute path is used as is; a relative one is
    looked up under ``data_dir``, the only host folder mounted into the container."""
    weights = param(config, "weights")
    if weights in (None, ""):
        return None
    path = str(weights)
    return path if os.path.isabs(path) else os.path.join(config.data_dir, path)


def load_state_dict_strictly(model: torch.nn.Module, path: str, what: str) -> None:
    """Load a (torchvision-style) checkpoint with every name and shape matching, or
    raise one ConfigError saying which names or shapes do not (``what``: "torchvision resnet50")."""
    if not os.path.isfile(path):
        raise ConfigError(f"parameters.yaml weights: {path}: no such file")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure is a bad file
        raise ConfigError(f"parameters.yaml weights: {path}: cannot load: {' '.join(str(exc).split())[:200]}") from exc
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise ConfigError(f"parameters.yaml weights: {path}: expected a state_dict, got {type(state).__name__}")
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong = sorted(k for k in set(expected) & set(state) if tuple(expected[k].shape) != tuple(state[k].shape))
    if missing or unexpected or wrong:
        detail = (
            f"missing {missing[:3]}, unexpected {unexpected[:3]}"
            if missing or unexpected
            else f"shape mismatch in {wrong[:3]}"
        )
        raise ConfigError(f"parameters.yaml weights: {path}: not a {what} state_dict ({detail})")
    model.load_state_dict(state, strict=True)


def _folder_twice(folder: str, first: str) -> str:
    return (
        f"{folder}: a link to {first}, which is already scanned (a link loop, or one folder reached twice): its "
        "images would be counted again; remove the link"
    )


def _file_twice(path: str, first: str) -> str:
    return f"{path}: the same file as {first} (a link): each sample must be counted once; remove one"


def _claim_once(seen: dict, info: os.stat_result, path: str, twice: Callable[[str, str], str]) -> None:
    """Record ``path`` in ``seen`` under its ``(st_dev, st_ino)``; a DataError ``twice(path, first path)``
    when that file or folder is there already (reached a second time through a link)."""
    key = (info.st_dev, info.st_ino)
    if key in seen:
        raise DataError(twice(path, seen[key]))
    seen[key] = path


def scan_files(
    top: str, suffixes: tuple[str, ...], seen_dirs: dict | None = None, seen_files: dict | None = None
) -> list[str]:
    """The files under ``top`` whose lower-cased names end with ``suffixes``, in
    os.walk's sorted order (by folder path, then name), following links as a data
    set laid out with links needs, and counting nothing twice: a folder reached a
    second time (a link loop, or two links to one folder) or a file reached a second
    time (two links to one image) is a DataError naming the link, as is a broken link
    or a folder that cannot be listed. Pass the same ``seen_*`` dicts to scan several
    tops as one data set; ``seen_dirs`` may hold folders (``(st_dev, st_ino)`` -> path)
    that no link may lead back to."""
    seen_dirs = {} if seen_dirs is None else seen_dirs
    seen_files = {} if seen_files is None else seen_files
    listing: list[tuple[str, list[str]]] = []
    pending = [top]
    while pending:
        folder = pending.pop()
        try:
            info = os.stat(folder)
            entries = list(os.scandir(folder))
        except OSError as exc:
            raise DataError(f"{folder}: cannot list the folder: {exc.strerror or type(exc).__name__}") from None
        _claim_once(seen_dirs, info, folder, _folder_twice)
        files = []
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            if is_dir:
                pending.append(entry.path)
            elif entry.name.lower().endswith(suffixes):
                files.append(entry.name)
        listing.append((folder, sorted(files)))
    found: list[str] = []
    for folder, files in sorted(listing):
        for name in files:
            path = os.path.join(folder, name)
            try:
                info = os.stat(path)
            except OSError as exc:
                raise DataError(f"{path}: cannot read: {exc.strerror or type(exc).__name__} (a broken link?)") from None
            _claim_once(seen_files, info, path, _file_twice)
            found.append(path)
    return found


def place_model(model: torch.nn.Module, config: CaseConfig) -> torch.nn.Module:
    model = model.eval().to(config.device)
    return model.half() if half_precision(config) else model


def validation_forward(model: torch.nn.Module, dataloader: Any, evaluator: Callable, config: CaseConfig) -> PhaseResult:
    return measuring().timed_forward(make_step(model, config), dataloader, evaluator, config, phase="validation")


def inference_forward(model: Callable, dataloader: Any, evaluator: Callable, config: CaseConfig) -> PhaseResult:
    return measuring().timed_forward(model, dataloader, evaluator, config, phase="inference")


def top1_accuracy(outputs: Sequence[torch.Tensor], y: Any) -> float:
    logits = outputs[0]
    labels = torch.as_tensor(y).reshape(-1).to(logits.device)
    if logits.shape[0] != labels.shape[0]:
        raise ValueError(f"evaluator: {logits.shape[0]} predictions for {labels.shape[0]} labels")
    if labels.numel() == 0:
        return 0.0
    return (logits.argmax(dim=1) == labels).float().mean().item()


def export_onnx(model: torch.nn.Module, config: CaseConfig, sample_shape: Sequence[int]) -> str:
    """Export a CPU fp32 copy of ``model`` to ``config.export_onnx_path``
    with a dynamic batch axis, or with the batch fixed at ``batch_size`` when
    the vendor config says FlagPerf's ``has_dynamic_axis: false``.

    The legacy TorchScript exporter (``dynamo=False``) is used. With torch
    2.13 the dynamo exporter takes ~5x longer on ResNet-50 (4.7 s vs 0.9 s),
    prints progress and converter tracebacks, and cannot down-convert its
    opset-18 graph, so ``onnx_opset: 17`` would silently yield opset 18. The
    legacy path honours the opset, is silent once its deprecation warning is
    filtered, writes one self-contained file and needs no onnxscript.
    """
    path = setting(config, "export_onnx_path")
    if not path:
        raise ConfigError("export_onnx_path: not set by the framework before export_model")
    opset = int(setting(config, "onnx_opset"))
    cpu_model = _cpu_fp32(model)
    dynamic = has_dynamic_axis(config)
    # Batch 2, not 1: a tracer must never see the batch size as a constant it could fold.
    example = torch.zeros((2 if dynamic else int(config.batch_size), *sample_shape), dtype=torch.float32)
    start = time.perf_counter()
    # No atomic rename here: the framework hands us a temporary path and renames it itself.
    with torch.inference_mode(False), torch.no_grad(), _quiet():
        torch.onnx.export(
            cpu_model,
            (example,),
            path,
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}} if dynamic else None,
            opset_version=opset,
            do_constant_folding=True,
            dynamo=False,
        )
    logger.info(f"exported ONNX (opset {opset}) to {path} in {time.perf_counter() - start:.2f} s")
    return path


def _cpu_fp32(model: torch.nn.Module) -> torch.nn.Module:
    """The caller's model stays untouched (an engine may still use it), so
    convert a copy unless it already is CPU fp32."""
    tensors = list(model.parameters()) + list(model.buffers())
    if all(t.device.type == "cpu" and (t.dtype == torch.float32 or not t.is_floating_point()) for t in tensors):
        return model.eval()
    return copy.deepcopy(model).cpu().float().eval()


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The exporter warns about things that are expected here (tracing, a
    deprecated path); keep them out of the benchmark log."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield
