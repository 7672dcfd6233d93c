"""The nvidia vendor's LLM engine: the framework's ``transformers`` Llama with a
static KV cache, its decode step compiled by ``torch.compile`` (Inductor; CUDA
graphs with ``inductor_mode: reduce-overhead``). Contract: ``contract/llm_base.py``.

- KV cache: ``transformers.StaticCache`` of ``max_cache_len`` positions (the
  query's prompt + new tokens rounded up to ``llm_cache_block`` positions), one
  per batch size and length bucket, allocated once and ``reset()`` between
  queries, so the compiled step sees the same tensors every call (what CUDA
  graphs need). ``kv_cache_positions`` reports the bucket.
- prefill: eager (a prompt-length-dependent shape; large matmuls gain little from
  compilation); decode: one token per sequence, static shapes, compiled.
  ``llm_compile: false`` runs the same code uncompiled (how the tests run it on CPU).
- Nothing is exported (``export_format`` None): it reads the framework model.

Config keys (vendor_config/nvidia_configurations.yaml):
  device           cuda (default for the vendor) | cuda:N | cpu
  inductor_mode    default | reduce-overhead (default on CUDA) | max-autotune | max-autotune-no-cudagraphs
  llm_compile      true (default) | false
  llm_cache_block  positions a static cache is rounded up to (default 256)

What has run where: docs/vendor_guide.md §12.
"""

from __future__ import annotations

import time
from typing import Any

from loguru import logger

from common.errors import ConfigError, EngineError
from contract.config import CaseConfig, check_choice, check_flag, origin_of
from contract.llm_base import LLMEngineBase, eos_token_ids

_SOURCE = "inference_engine/nvidia/inductor_llm.py"
_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def preflight(config: CaseConfig) -> None:
    check_choice(config, "inductor_mode", config.get("inductor_mode", "reduce-overhead"), _MODES)
    check_flag(config, "llm_compile", config.get("llm_compile", True))
    block = config.get("llm_cache_block", 256)
    if isinstance(block, bool) or not isinstance(block, int) or not 1 <= block <= 1 << 20:
        raise ConfigError(
            f"{origin_of(config, 'llm_cache_block')}: key 'llm_cache_block' must be a positive integer, got {block!r}"
        )
    import torch

    if str(config.device).startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"vendor 'nvidia' compiler 'inductor_llm' with device {config.device!r} needs a CUDA GPU, but "
            "torch.cuda.is_available() is False "
            "(no driver, no GPU passed to the container, or a CPU-only torch)"
        )


class _State:
    __slots__ = ("cache", "batch", "position", "logits", "pending")

    def __init__(self, cache: Any, batch: int, position: int, logits: Any) -> None:
        self.cache = cache
        self.batch = batch
        self.position = position  # the next cache position to write
        self.logits = logits  # [batch, vocab] float32 on the device: what the next step selects from
        self.pending = None  # [batch, 1] token chosen last, its forward not yet run


class InferModel(LLMEngineBase):
    export_format = None

    def __init__(self, config: CaseConfig, onnx_path: str | None, model: Any) -> None:
        super().__init__(config, onnx_path, model)
        import torch

        if model is None or not isinstance(model, torch.nn.Module) or not hasattr(model, "config"):
            raise EngineError(
                f"{_SOURCE}: needs the framework's transformers causal LM (no_validation: false), got "
                f"{type(model).__name__}"
            )
        self._torch = torch
        self.device = torch.device(config.device)
        on_cuda = self.device.type == "cuda"
        self.half = bool(config.fp16) and on_cuda
        if config.fp16 and not on_cuda:
            logger.warning("fp16 requested, but inductor_llm runs on device 'cpu': running fp32")
        self.precision = "fp16" if self.half else "fp32"
        self.mode = config.get("inductor_mode", "reduce-overhead" if on_cuda else "default")
        self.compile = bool(config.get("llm_compile", True))
        self.block = int(config.get("llm_cache_block", 256))
        self.model = model.eval().to(self.device, dtype=torch.float16 if self.half else torch.float32)
        self._caches: dict[tuple[int, int], Any] = {}
        eos = eos_token_ids(model.config.to_dict())
        self._eos = (
            torch.tensor(eos, dtype=torch.long, device=self.device) if eos else None
        )  # never selected (the contract)
        start = time.perf_counter()
        self._decode = (
            torch.compile(self._decode_eager, mode=self.mode, backend="inductor", dynamic=False)
            if self.compile
            else self._decode_eager
        )
        self.compile_duration = (
            time.perf_counter() - start
        )  # compilation itself happens at the first step of a shape (the untimed warm-up)

    # ---- the KV cache ----------------------------------------------------------------
    def _bucket(self, length: int) -> int:
        return -(-length // self.block) * self.block

    def _cache(self, batch: int, length: int) -> Any:
        from transformers import StaticCache

        key = (batch, self._bucket(length))
        cache = self._caches.get(key)
        if cache is None:
            cache = StaticCache(config=self.model.config, max_cache_len=key[1])
            self._caches[key] = cache
        else:
            cache.reset()
        return cache

    def kv_cache_positions(self, batch: int, length: int) -> int:
        return batch * self._bucket(length)

    # ---- the contract ------------------------------------------------------------------
    def _decode_eager(self, token: Any, position: Any, cache: Any) -> Any:
        out = self.model(input_ids=token, cache_position=position, past_key_values=cache, use_cache=True)
        return out.logits[:, -1, :].float()

    def prefill(self, input_ids: Any, max_new_tokens: int) -> _State:
        torch = self._torch
        ids = torch.as_tensor(input_ids, dtype=torch.long, device=self.device)
        batch, length = ids.shape
        cache = self._cache(int(batch), int(length) + int(max_new_tokens))
        with torch.no_grad():  # not inference_mode: the static cache is reset in place between queries
            out = self.model(
                input_ids=ids,
                cache_position=torch.arange(length, device=self.device),
                past_key_values=cache,
                use_cache=True,
            )
            logits = out.logits[:, -1, :].float()
        self._sync()
        return _State(cache, int(batch), int(length), logits)

    def _run_pending(self, state: _State) -> None:
        if state.pending is None:
            return
        torch = self._torch
        position = torch.tensor([state.position], dtype=torch.long, device=self.device)
        with torch.no_grad():  # not inference_mode: the static cache is reset in place between queries
            # clone: a CUDA-graph replay overwrites its output buffer
            state.logits = self._decode(state.pending, position, state.cache).clone()
        state.position += 1
        state.pending = None

    def step(self, state: _State) -> Any:
        self._run_pending(state)
        logits = state.logits if self._eos is None else state.logits.index_fill(-1, self._eos, float("-inf"))
        chosen = logits.argmax(dim=-1)
        state.pending = chosen.view(-1, 1)
        ids = chosen.cpu().numpy()  # the copy to the host also waits for the device
        return ids

    def logits(self, state: _State) -> Any:
        self._run_pending(state)
        return state.logits.cpu().numpy()

    def release(self, state: _State) -> None:
        state.cache = state.logits = state.pending = None

    def _sync(self) -> None:
        if self.device.type == "cuda":
            self._torch.cuda.synchronize(self.device)

    # ---- optional richer API -----------------------------------------------------------
    def version(self) -> str:
        torch = self._torch
        text = f"torch {torch.__version__} inductor_llm on {self.device}"
        if self.device.type == "cuda":
            text += f" ({torch.cuda.get_device_name(self.device)})"
        return text

    def compile_report(self) -> dict:
        return {
            "compile_precision": self.precision.upper(),
            "backend": "inductor" if self.compile else "eager",
            "device": str(self.device),
            "optimizations": {
                "mode": self.mode if self.compile else None,
                "static_kv_cache": True,
                "cache_block": self.block,
            },
        }
