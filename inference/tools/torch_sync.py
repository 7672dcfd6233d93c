"""Device synchronisation so that a timer never stops before the device is done."""
from __future__ import annotations

from typing import Callable


def device_sync_fn(device: str) -> Callable[[], None]:
    """Return a cheap no-op on CPU and a real synchronize on an accelerator."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.synchronize
    return _noop


def _noop() -> None:
    return None
