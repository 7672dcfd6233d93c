"""Container-side tools: everything run_inference.py needs inside the vendor container.

``from tools import torch_sync; torch_sync(config)`` works as in FlagPerf: the
submodule ``tools.torch_sync`` is callable (see its docstring).
"""

from tools import torch_sync  # noqa: E402,F401  (a callable module: FlagPerf's cases call it)
