"""The LLM engine contract: what a vendor implements to run a generation case (``llama``).

An LLM engine is an ``InferModel`` (``inference_engine/<vendor>/<compiler>.py``)
subclassing ``LLMEngineBase``. The framework times every call itself
(``tools/measure/llm.py``), so an engine only computes, and returns when its
work is done (device synchronised):

  prefill(input_ids, max_new_tokens) -> state
        one forward over the prompts ``input_ids`` (numpy int64 ``[batch, length]``,
        no padding), filling the KV cache, which must hold ``length +
        max_new_tokens`` positions; the state carries the last position's logits.
  step(state) -> ids
        the next greedy token of every sequence (numpy int ``[batch]``): the first
        call selects from the prefill's logits; each later call first runs the
        forward of the token chosen before it, then selects. So a request of N
        tokens costs one prefill and N - 1 decode forwards. The end-of-sequence
        tokens (``eos_token_ids`` of the checkpoint's config) are never selected:
        a query generates exactly its N tokens (vLLM's ``ignore_eos``, ONNX Runtime
        GenAI's ``min_length``, TensorRT-LLM's ``min_tokens`` do the same), and the
        greedy check's reference masks them too.
  logits(state) -> numpy float32 [batch, vocab]
        the logits the next ``step`` will select from (it may run the pending
        forward). Used by the numeric checks and accuracy, never timed.
  release(state)        free the KV cache.
  kv_cache_positions(batch, length) -> int
        the positions the engine's KV cache allocates for that query (a cache
        preallocated to a maximum length counts the maximum).
  generate(input_ids, n) -> numpy [batch, n]
        generate-N: prefill and n steps (this class's default).
  __call__([input_ids]) -> ([logits], foo_time)
        FlagPerf's engine call: one prefill, the last position's logits as a torch
        tensor ``[batch, vocab]`` (the case's FlagPerf pass; this class's default).

Building the runtime's own format (``export_format``): an engine that runs
files of its own (ONNX Runtime GenAI's folder, a TensorRT-LLM engine) names the
format and implements the classmethod ``build(source_dir, out_dir, config)``,
which turns a Hugging Face checkpoint folder into that format inside
``out_dir``; ``entry_file`` is the file in it the runtime opens, and
``build_keys`` the config keys ``build`` reads (they key the cache). The case
caches the result by content hash (``benchmarks/llama/pytorch/export.py``) and
hands the entry's path to ``__init__`` as ``onnx_path``. An engine that compiles
the framework's PyTorch model instead leaves ``export_format`` None and reads
``model``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from common.errors import EngineError
from contract.engine_base import EngineBase

if TYPE_CHECKING:
    from contract.config import CaseConfig

BYTES_PER_VALUE = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "int8": 1, "fp8": 1}


def eos_token_ids(hf_config: dict) -> tuple[int, ...]:
    """The end-of-sequence token ids of a Hugging Face config (``eos_token_id``: an int, a list, or null)."""
    value = hf_config.get("eos_token_id")
    items = value if isinstance(value, list) else [value]
    return tuple(int(v) for v in items if isinstance(v, int) and not isinstance(v, bool))


class LLMEngineBase(EngineBase):
    """The generation contract (module docstring) on top of EngineBase's; the optional members
    below default to "the engine compiles the framework's PyTorch model"."""

    export_format: ClassVar[str | None] = None
    """The runtime's own format, built by ``build`` (benchmarks/llama caches it); None: the engine
    reads the framework's PyTorch model instead."""

    entry_file: ClassVar[str | None] = None
    """The file of the built folder the runtime opens (handed to ``__init__`` as ``onnx_path``)."""

    build_keys: ClassVar[tuple[str, ...]] = ()
    """The config keys ``build`` reads: part of the export's cache key."""

    @classmethod
    def build(cls, source_dir: Path, out_dir: Path, config: CaseConfig) -> None:
        """Turn the Hugging Face checkpoint ``source_dir`` into ``export_format`` inside ``out_dir``
        (required when ``export_format`` is set)."""
        raise NotImplementedError(f"{cls.__module__}: export_format {cls.export_format!r} needs a build() classmethod")

    # ---- the contract -------------------------------------------------------------
    def prefill(self, input_ids: Any, max_new_tokens: int) -> Any:
        raise NotImplementedError

    def step(self, state: Any) -> Any:
        raise NotImplementedError

    def logits(self, state: Any) -> Any:
        raise NotImplementedError

    def release(self, state: Any) -> None:
        """Free the state's KV cache (the default: let it go with the state)."""

    def kv_cache_positions(self, batch: int, length: int) -> int:
        return batch * length

    # ---- what the base derives from it ---------------------------------------------
    @property
    def bytes_per_value(self) -> int:
        return BYTES_PER_VALUE.get(str(self.precision), 4)

    def generate(self, input_ids: Any, n: int) -> Any:
        import numpy as np

        state = self.prefill(input_ids, n)
        try:
            return np.stack([np.asarray(self.step(state)).reshape(-1) for _ in range(n)], axis=1)
        finally:
            self.release(state)

    def __call__(self, inputs: list) -> tuple[list, float]:
        import numpy as np
        import torch

        ids = inputs[0].numpy() if hasattr(inputs[0], "numpy") else np.asarray(inputs[0])
        state = self.prefill(ids.astype(np.int64), 1)
        try:
            logits = torch.from_numpy(np.array(self.logits(state), dtype=np.float32))
        finally:
            self.release(state)
        return [logits], 0.0


def read_hf_config(folder: str | Path, what: str) -> dict:
    """A Hugging Face checkpoint's ``config.json`` (EngineError naming the file when unreadable)."""
    path = Path(folder) / "config.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EngineError(f"{what}: cannot read {path}: {exc}") from None


class ServingEngineBase(LLMEngineBase):
    """An LLM served over HTTP by a server process that the engine starts (vLLM's or llama.cpp's
    OpenAI-compatible server): the engine step starts it and waits until it serves, the framework benchmarks it at
    ``url`` with its serving client (``tools/measure/serving_stage.py``: the greedy check through
    ``generate``, then closed-loop streams at each ``serving_concurrency``), and ``close`` stops it
    with nothing left running. A server has no per-step contract, so ``prefill``/``step``/``logits``
    stay unimplemented; ``generate`` returns the server's greedy token ids and ``__call__`` is built on it.

    A subclass sets ``url`` (``http://HOST:PORT/v1``), ``served_model`` and ``vocab`` (the model's
    vocabulary size) once its server serves, and implements ``generate``, ``close`` and ``failure``;
    ``prompt`` and ``request_extra`` say how its server takes a request of token ids."""

    url: str = ""
    served_model: str = ""
    vocab: int = 0

    def failure(self) -> str | None:
        """Why the server can no longer serve (it exited: its status and last log line), or None."""
        raise NotImplementedError

    def served_by(self) -> dict:
        """The server's facts for result.json (``llm.served_by``): command, version, url, ready time."""
        return {"url": self.url, "served_model": self.served_model}

    def prompt(self, ids: list[int]) -> Any:
        """What this server's ``/v1/completions`` takes as the prompt of the token ids ``ids``: the ids
        themselves (vLLM: this default), or their text where a server takes strings only (llama-cpp-python's)."""
        return ids

    def request_extra(self, max_tokens: int) -> dict:
        """The request fields that ask this server for exactly ``max_tokens`` greedy tokens, none of them the
        end-of-sequence token: vLLM's ``ignore_eos`` (this default)."""
        return {"ignore_eos": True, "temperature": 0.0}

    def __call__(self, inputs: list) -> tuple[list, float]:
        """FlagPerf's engine call: for each prompt, the served greedy next token (``generate(ids, 1)``) as a
        one-hot row of logits (a server returns no full logits; the case's evaluator reads only their argmax)."""
        import numpy as np
        import torch

        ids = inputs[0].numpy() if hasattr(inputs[0], "numpy") else np.asarray(inputs[0])
        chosen = self.generate(ids, 1)[:, 0]
        logits = torch.zeros((len(chosen), self.vocab), dtype=torch.float32)
        logits[torch.arange(len(chosen)), torch.as_tensor(chosen)] = 1.0
        return [logits], 0.0


@dataclass(frozen=True)
class ModelShape:
    """What FLOPs and KV-cache bytes depend on, read from a Hugging Face ``config.json``."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    params: int  # every parameter, tied embeddings counted once
    embedding_params: int  # the input embedding table (a lookup, no FLOPs)

    @classmethod
    def from_hf_config(cls, cfg: dict, params: int | None = None) -> "ModelShape":
        hidden, layers = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
        heads = int(cfg["num_attention_heads"])
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        head_dim = int(cfg.get("head_dim") or hidden // heads)
        inter, vocab = int(cfg["intermediate_size"]), int(cfg["vocab_size"])
        tied = bool(cfg.get("tie_word_embeddings", False))
        if params is None:  # Llama's layout: attention, gated MLP, two RMSNorms per layer, final norm
            attn = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
            per_layer = attn + 3 * hidden * inter + 2 * hidden
            params = layers * per_layer + hidden + vocab * hidden * (1 if tied else 2)
        # With tied embeddings the table is also the LM head, whose matmul does count.
        return cls(layers, hidden, heads, kv_heads, head_dim, inter, vocab, int(params), 0 if tied else vocab * hidden)

    @property
    def head_params(self) -> int:
        """The LM head's weights (the embedding table itself when tied)."""
        return self.vocab * self.hidden

    def flops_per_token(self, context: float, head: bool = True) -> float:
        """One token's forward attending to ``context`` positions; ``head``: with the LM head."""
        body = self.params - self.embedding_params - self.head_params
        return (
            2.0 * (body + (self.head_params if head else 0)) + 4.0 * self.layers * self.heads * self.head_dim * context
        )

    def prefill_flops(self, batch: int, length: int) -> float:
        """A causal prefill of ``length`` tokens, the LM head on the last position only (the
        only logits generation uses: an engine computing them everywhere does wasted work)."""
        return batch * (length * self.flops_per_token((length + 1) / 2, head=False) + 2.0 * self.head_params)

    def decode_flops(self, batch: int, input_length: int, output_length: int) -> float:
        """The forwards after the first token: tokens 1..N-1 attend to L+1..L+N-1 positions."""
        steps = max(output_length - 1, 0)
        mean_context = input_length + (steps + 1) / 2
        return batch * steps * self.flops_per_token(mean_context)

    def kv_cache_bytes(self, positions: int, bytes_per_value: int) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * bytes_per_value * positions

    def to_dict(self) -> dict:
        return dict(vars(self))
