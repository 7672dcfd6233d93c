"""A case config for tests: the base keys of a case's configurations.yaml (FlagPerf's)."""

from __future__ import annotations

BASE = """
batch_size: 8
input_size: null
fp16: false
compiler: onnxruntime
num_workers: 0
log_freq: 10
repeat: 1
no_validation: false
exist_onnx_path: null
exist_compiler_path: null
"""
