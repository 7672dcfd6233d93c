"""Device synchronisation so that a timer never stops before the device is done.

Two ways in:
  device_sync_fn(device)   InferPerf's: a no-op on CPU, ``torch.cuda.synchronize`` on "cuda[:N]";
  sync_for_config(config)  the sync for a case config: ``device`` when the config sets it,
                           otherwise FlagPerf's rule, by vendor (``CUDA_VENDORS``).
The module itself is callable, as FlagPerf's cases expect
(``from tools import torch_sync; torch_sync(config)``): calling it synchronises
now, by the same rule as ``sync_for_config``.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from contract.config import CaseView

# Vendors whose devices FlagPerf synchronises through torch.cuda (their PyTorch builds expose CUDA's API).
CUDA_VENDORS = ("nvidia", "iluvatar")


def device_sync_fn(device: str) -> Callable[[], None]:
    """Return a cheap no-op on CPU and a real synchronize on an accelerator."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.synchronize
    return _noop


def sync_for_config(config: CaseView) -> Callable[[], None]:
    """The sync for ``config``: by ``device`` where a config file or --set gave it, else by vendor.

    A vendor in ``CUDA_VENDORS`` gets ``torch.cuda.synchronize`` when CUDA is
    available (without CUDA there is no device work to wait for).
    """
    origin = getattr(config, "__dict__", {}).get("origin") or {}
    device = getattr(config, "device", None)
    if "device" in origin or (isinstance(device, str) and device.startswith("cuda")):
        return device_sync_fn(str(device))
    if getattr(config, "vendor", None) in CUDA_VENDORS:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.synchronize
    return _noop


def torch_sync(config: CaseView) -> None:
    """FlagPerf's ``torch_sync(config)``: synchronise the config's device now."""
    sync_for_config(config)()


def _noop() -> None:
    return None


class _CallableModule(types.ModuleType):
    """``tools.torch_sync`` is this module and FlagPerf's function at once, whichever way it is imported."""

    def __call__(self, config: CaseView) -> None:
        torch_sync(config)


sys.modules[__name__].__class__ = _CallableModule
