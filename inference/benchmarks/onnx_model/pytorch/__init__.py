"""Any ONNX model file, benchmarked with synthetic inputs (docs/onnx_models.md).

The case API (spec §3.2.2) implemented once for every model: the config's
``model_path`` names the file (run.py --model FILE sets it), ``configure`` reads its
signature and plans the inputs, the data loader synthesises them, and the
framework model is ONNX Runtime on CPU running the file: the reference the vendor
engine's outputs are checked against.
"""

from benchmarks.onnx_model.describe import configure

from .dataloader import build_dataloader
from .forward import engine_forward, evaluator, export_model, model_forward
from .model import create_model, framework_step

__all__ = [
    "configure",
    "build_dataloader",
    "create_model",
    "evaluator",
    "model_forward",
    "engine_forward",
    "export_model",
    "framework_step",
]
