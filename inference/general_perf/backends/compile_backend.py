"""``CompileBackend``: the compile half of a ByteMLPerf backend, in ByteMLPerf's shape.

A vendor's ``compile_backend_xxx.py`` defines ``CompileBackendXXX(CompileBackend)``.
InferPerf (``tools/compat/bytemlperf/engine.py``) calls, in this order:

  get_interact_profile(configs)   the questions to answer (a list of dicts), or None
  pre_optimize(configs)           may rewrite ``configs``; returns them
  get_best_batch_size()           a list of batch sizes, or None
  compile(configs, dataloader)    returns the compile report (a dict)

``configs`` is ``{"workload": ..., "model_info": ..., "interact_info": ...}``.
What the defaults below return is what InferPerf treats as "not provided".
"""

from __future__ import annotations

from typing import Any


class CompileBackend:
    def __init__(self) -> None:
        self.hardware_type = "UnKnown"
        self.need_reload = False
        self.need_quant = False

    def version(self) -> str:
        """The compiler's version; not provided unless overridden."""
        raise NotImplementedError("CompileBackend:version")

    def pre_optimize(self, configs: dict[str, Any]) -> dict[str, Any]:
        """Optional rewrite of the model before compiling (the format must stay loadable)."""
        return configs

    def compile(self, configs: dict[str, Any], dataloader: Any = None) -> dict[str, Any]:
        """Compile the model named by ``configs['model_info']['model_path']``; return the compile report."""
        raise NotImplementedError("CompileBackend:compile")

    def tuning(self, configs: dict[str, Any]) -> None:
        """Reserved by ByteMLPerf; never called."""
        return None

    def segment(self, configs: dict[str, Any]) -> None:
        """Reserved by ByteMLPerf; never called."""
        return None

    def get_interact_profile(self, configs: dict[str, Any]) -> list[dict] | None:
        """The interact profile (the entries of the backend's XXX.json), or None for none."""
        raise NotImplementedError("CompileBackend:get_interact_profile")

    def get_best_batch_size(self) -> list[int] | None:
        """The batch sizes this hardware runs best at, or None."""
        raise NotImplementedError("CompileBackend:get_best_batch_size")
