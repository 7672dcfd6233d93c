"""ONNX Runtime GenAI on CPU: the cpu vendor's LLM engine (``contract/llm_base.py``).

Export (``build``): GenAI's own model builder turns the Hugging Face checkpoint
into its folder (``model.onnx`` + ``model.onnx.data`` with GroupQueryAttention
and a KV cache as graph inputs/outputs, ``genai_config.json``, the tokenizer):
``python -m onnxruntime_genai.models.builder -i HF_DIR -o OUT -p fp32 -e cpu``,
run as a child process so its progress bars stay in the build log. The case
caches the folder by content hash.

Generation: one ``og.Generator`` per query, greedy (``do_sample: false``), with
``min_length = max_length = prompt + max_new_tokens`` so an end-of-sequence
token never stops a request early (a benchmark generates what it asked for).
``append_tokens`` is the prefill; ``generate_next_token`` selects a token (and
first runs the forward of the previous one), which is the contract's ``step``.
GenAI shares one KV buffer of ``max_length`` positions per sequence
(``past_present_share_buffer``), which is what ``kv_cache_positions`` reports.

Config keys (declared in the case's configurations.yaml):
  genai_precision      fp32 (default) | int4: the builder's ``-p`` (int4: weight-only
                       quantised MatMulNBits; the numeric checks then use int8's limits)
  genai_prune_lm_head  true (default): the builder's ``prune_lm_head``, so the prefill
                       computes the LM head for the last position only (what generation
                       uses; over a 32000-token vocabulary the full head costs the random
                       model's prefill 5 x its time here)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from common.errors import ConfigError, EngineError, one_line
from contract.config import CaseConfig, check_choice, check_flag
from contract.llm_base import LLMEngineBase

_SOURCE = "inference_engine/cpu/onnxruntime_genai.py"
_PRECISIONS = {"fp32": "fp32", "int4": "int8"}  # builder precision -> the tolerance class the checks use
INSTALL_HINT = "pip install -r inference/benchmarks/llama/pytorch/requirements.txt"
BUILD_TIMEOUT_S = 3600


def preflight(config: CaseConfig) -> None:
    check_flag(config, "genai_prune_lm_head", config.get("genai_prune_lm_head", True))
    check_choice(config, "genai_precision", config.get("genai_precision", "fp32"), _PRECISIONS)
    try:
        import onnxruntime_genai  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            f"vendor 'cpu' compiler 'onnxruntime_genai' needs the package onnxruntime-genai ({exc}); install it with: "
            f"{INSTALL_HINT}"
        ) from None


class _State:
    __slots__ = ("generator", "batch")

    def __init__(self, generator: Any, batch: int) -> None:
        self.generator = generator
        self.batch = batch


class InferModel(LLMEngineBase):
    export_format = "onnxruntime-genai"
    entry_file = "genai_config.json"
    build_keys = ("genai_precision", "genai_prune_lm_head")

    @classmethod
    def build(cls, source_dir: Path, out_dir: Path, config: CaseConfig) -> None:
        precision = config.get("genai_precision", "fp32")
        command = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(source_dir), "-o", str(out_dir)]
        command += ["-p", precision, "-e", "cpu", "-c", str(out_dir.parent / "builder_cache")]
        if config.get("genai_prune_lm_head", True):
            command += ["--extra_options", "prune_lm_head=true"]
        env = {**os.environ, "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        try:
            done = subprocess.run(
                command,
                cwd=out_dir.parent,
                env=env,
                capture_output=True,
                text=True,
                timeout=BUILD_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise EngineError(
                f"{_SOURCE}: the GenAI model builder took over {BUILD_TIMEOUT_S} s on {source_dir}"
            ) from None
        if done.returncode != 0 or not (out_dir / cls.entry_file).is_file():
            lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
            last = next((line for line in reversed(lines) if "Error" in line), lines[-1] if lines else "no output")
            raise EngineError(
                f"{_SOURCE}: the GenAI model builder failed on {source_dir} (exit {done.returncode}): {one_line(last)}"
            )

    def __init__(self, config: CaseConfig, onnx_path: str | None, model: Any) -> None:
        super().__init__(config, onnx_path, model)
        if not onnx_path or not Path(onnx_path).is_file() or Path(onnx_path).name != self.entry_file:
            raise EngineError(
                f"{_SOURCE}: expects the GenAI folder's {self.entry_file} from the llama case's export, got "
                f"{onnx_path!r}"
            )
        import onnxruntime_genai as og

        self._og = og
        self.folder = Path(onnx_path).parent
        self.builder_precision = config.get("genai_precision", "fp32")
        self.precision = _PRECISIONS[self.builder_precision]
        try:
            self.model = og.Model(str(self.folder))
        except Exception as exc:  # noqa: BLE001 - GenAI raises RuntimeError for any bad folder
            raise EngineError(f"{_SOURCE}: cannot load {self.folder}: {one_line(exc)}") from None

    @property
    def bytes_per_value(self) -> int:
        return 4  # the KV cache stays fp32 on CPU, int4 weights included

    def version(self) -> str:
        return f"onnxruntime-genai {self._og.__version__}"

    def compile_report(self) -> dict:
        return {
            "compile_precision": self.builder_precision.upper(),
            "format": self.export_format,
            "folder": str(self.folder),
        }

    def prefill(self, input_ids: Any, max_new_tokens: int) -> _State:
        import numpy as np

        ids = np.ascontiguousarray(input_ids, dtype=np.int32)
        batch, length = ids.shape
        params = self._og.GeneratorParams(self.model)
        total = length + int(max_new_tokens)
        params.set_search_options(max_length=total, min_length=total, do_sample=False, batch_size=batch)
        generator = self._og.Generator(self.model, params)
        generator.append_tokens(ids)
        return _State(generator, batch)

    def step(self, state: _State) -> Any:
        state.generator.generate_next_token()
        return state.generator.get_next_tokens()

    def logits(self, state: _State) -> Any:
        import numpy as np

        return np.asarray(state.generator.get_logits(), dtype=np.float32).reshape(state.batch, -1)

    def release(self, state: _State) -> None:
        state.generator = None

    def kv_cache_positions(self, batch: int, length: int) -> int:
        return batch * length  # max_length = prompt + new tokens, allocated up front
