"""The framework model as an engine-shaped step: the one definition for the cases that place
and run a PyTorch model (``benchmarks/common.py``) and for the framework's numeric check, whose
default reference it is (``tools/plugins.py::Case.framework_step``). torch is imported when a
step is made, so importing this module costs nothing on the host side."""

from __future__ import annotations

from typing import Any, Callable, Protocol

Step = Callable[[list], tuple[list, float]]


class Placement(Protocol):
    """What placing a model reads of the case config (``contract.config.CaseConfig`` has both)."""

    fp16: bool
    device: str


def half_precision(config: Placement) -> bool:
    """Whether the model runs in fp16: ``fp16`` asked for, on an accelerator. CPU kernels for
    fp16 convolutions are slow or missing, so fp16 only means something on an accelerator."""
    return bool(config.fp16) and str(config.device).startswith("cuda")


def make_step(model: Any, config: Placement) -> Step:
    """The framework-side step: CPU tensors in, CPU fp32 logits out, the same shape as an engine call."""
    import torch

    device = config.device
    dtype = torch.float16 if half_precision(config) else None

    def step(inputs: list) -> tuple[list, float]:
        moved = [
            t.to(device, dtype=dtype) if dtype is not None and t.is_floating_point() else t.to(device) for t in inputs
        ]
        with torch.inference_mode():
            logits = model(*moved)
        return [logits.float().cpu()], 0.0

    return step
