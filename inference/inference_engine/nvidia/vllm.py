"""vLLM's CUDA build as the nvidia vendor's serving engine: ``compiler: vllm`` in the llama case's config.

The same engine as the cpu vendor's ``compiler: vllm`` (``contract/serving_base.py::VllmEngine``:
vLLM's OpenAI server on the case's checkpoint, started through ``common/launch.py``, the greedy check on
token ids, the load steps over HTTP, the server stopped whatever ended the case), on a GPU. What the
CUDA build adds: ``--gpu-memory-utilization`` and the served ``--dtype``. In MODE docker the case runs
in ``docker_images/nvidia/vllm/`` (``IMAGE``), where ``vllm_python`` stays null.

Not yet run on a GPU (no GPU was lent when it was written): ``preflight`` checks, in the Python that
runs the server, that vLLM imports and that ``torch.cuda.is_available()``, and stops in one line
naming the key otherwise, before any work.

Config keys (``configs/llama/configurations.yaml``; the cpu build's ``vllm_*`` keys too):
  vllm_gpu_memory_utilization  the share of the GPU's memory vLLM may take (0 < x <= 1; default 0.9)
  vllm_dtype                   the served dtype: float32 (default: the greedy check compares with
                               the fp32 PyTorch model), float16, bfloat16 or auto
"""

from __future__ import annotations

import subprocess

from common.errors import ConfigError
from contract.config import CaseConfig, check_choice, origin_of
from contract.serving_base import (
    IMPORT_TIMEOUT_S,
    VLLM_DEFAULTS,
    VllmEngine,
    check_vllm_keys,
    record_vllm_version,
)

IMAGE = "vllm"  # docker_images/nvidia/vllm/ (contract/registry.py::engine_facts)
_SOURCE = "inference_engine/nvidia/vllm.py"
INSTALL_HINT = "docker_images/nvidia/vllm/requirements.txt (vllm's CUDA build)"
DTYPES = ("float32", "float16", "bfloat16", "auto")
CUDA_PROBE = "import torch; print(torch.cuda.is_available(), torch.version.cuda)"


def memory_share(config: CaseConfig) -> float:
    value = config.get("vllm_gpu_memory_utilization", 0.9)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ConfigError(
            f"{origin_of(config, 'vllm_gpu_memory_utilization')}: key 'vllm_gpu_memory_utilization' must be "
            f"a number in (0, 1], got {value!r}"
        )
    return float(value)


def served_dtype(config: CaseConfig) -> str:
    value = config.get("vllm_dtype", "float32")
    check_choice(config, "vllm_dtype", value, DTYPES)
    return str(value)


def cuda_blocker(python: str) -> str | None:
    """Why ``python`` sees no CUDA GPU (None when it does)."""
    try:
        done = subprocess.run(
            [python, "-c", CUDA_PROBE], capture_output=True, text=True, timeout=IMPORT_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot ask it for CUDA ({exc})"
    words = done.stdout.split()
    if done.returncode != 0 or not words:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        return f"'import torch' failed there ({lines[-1].strip() if lines else 'no output'})"
    if words[0] != "True":
        return (
            f"torch.cuda.is_available() is False there (torch's CUDA {words[-1]}; no driver, no GPU passed "
            "to the container, or a CPU build)"
        )
    return None


def preflight(config: CaseConfig) -> None:
    check_vllm_keys(config, VLLM_DEFAULTS)
    memory_share(config)
    served_dtype(config)
    python = record_vllm_version(config, INSTALL_HINT)
    blocker = cuda_blocker(python)
    if blocker is not None:
        raise ConfigError(
            f"{origin_of(config, 'vllm_python')}: key 'vllm_python' is {python!r}: vendor 'nvidia' compiler "
            f"'vllm' needs a CUDA GPU, but {blocker}"
        )


class InferModel(VllmEngine):
    SOURCE = _SOURCE
    BUILD = "vllm"
    INSTALL_HINT = INSTALL_HINT

    def dtype(self, config: CaseConfig) -> str:
        return served_dtype(config)

    def build_args(self, config: CaseConfig) -> list[str]:
        return ["--gpu-memory-utilization", str(memory_share(config))]
