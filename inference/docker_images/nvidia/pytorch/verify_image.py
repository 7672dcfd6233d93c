"""Build-time check of the nvidia image (run by the Dockerfile, never at benchmark time):
fail the build early, with one line, when the base image cannot run InferPerf."""

import importlib
import inspect
import os
import sys

import loguru  # noqa: F401
import onnx
import onnxruntime
import psutil  # noqa: F401
import pynvml  # noqa: F401
import torch
import yaml  # noqa: F401

print(
    "python",
    sys.version.split()[0],
    "torch",
    torch.__version__,
    "cuda",
    torch.version.cuda,
    "onnx",
    onnx.__version__,
    "onnxruntime",
    onnxruntime.__version__,
)
if sys.version_info < (3, 11):
    sys.exit(f"InferPerf needs Python >= 3.11; this base image has {sys.version.split()[0]}")
if "dynamo" not in inspect.signature(torch.onnx.export).parameters:
    sys.exit(
        f"torch {torch.__version__} has no torch.onnx.export(dynamo=...) (benchmarks/common.py uses it); use PyTorch "
        ">= 2.5"
    )
try:
    trt = importlib.import_module("tensorrt")
except ImportError as exc:
    if os.environ.get("REQUIRE_TENSORRT", "1") == "1":
        sys.exit(f"the base image has no TensorRT Python package ({exc}); build with REQUIRE_TENSORRT=0 to allow that")
    print("tensorrt: absent (compiler: tensorrt will fail its preflight; compiler: inductor still works)")
else:
    print("tensorrt", trt.__version__)
