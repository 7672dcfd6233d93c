"""``RuntimeBackend``: the runtime half of a ByteMLPerf backend, in ByteMLPerf's shape.

A vendor's ``runtime_backend_xxx.py`` defines ``RuntimeBackendXXX(RuntimeBackend)``.
Before the first ``load`` InferPerf sets, as ByteMLPerf does, ``configs`` (the
compile report), ``workload`` and ``model_info``. Then:

  load(batch_size)        load the compiled model for this batch size
  predict(feeds)          ``{input name: numpy array}`` -> ``{output name: array}`` or a list
  benchmark(dataloader)   optional: the backend's own timing, one dict per batch size
                          (``BS``, ``QPS``, ``AVG Latency``, ``P99 Latency``)
"""

from __future__ import annotations

from typing import Any


class RuntimeBackend:
    def __init__(self) -> None:
        self.hardware_type = "UnKnown"
        self.need_reload = False
        self.need_quant = False

    def version(self) -> str:
        """The runtime's version; not provided unless overridden."""
        raise NotImplementedError("RuntimeBackend:version")

    def load(self, batch_size: int) -> Any:
        """Load the compiled model for ``batch_size``."""
        raise NotImplementedError("RuntimeBackend:load")

    def get_loaded_batch_size(self) -> int:
        """The batch size of the loaded model."""
        raise NotImplementedError("RuntimeBackend:get_loaded_batch_size")

    def predict(self, data: dict) -> Any:
        """Run the loaded model on one batch of ``{input name: array}``."""
        raise NotImplementedError("RuntimeBackend:predict")

    def is_qs_mode_supported(self) -> bool:
        """ByteMLPerf's QuickSilver runtime; InferPerf never uses it."""
        return False

    def generate_qs_config(self) -> dict[str, Any] | None:
        return None

    def benchmark(self, dataloader: Any) -> dict:
        """The backend's own performance test of the loaded batch size; not provided unless overridden."""
        raise NotImplementedError("RuntimeBackend:benchmark")
