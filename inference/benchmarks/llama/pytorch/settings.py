"""The llama case's own keys (``configs/llama/parameters.yaml``), checked once.

The LLM workload keys (``input_lengths``, ``output_length``, the server keys, the
greedy check's) belong to the framework: ``tools/measure/llm_stage.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from common.errors import ConfigError

if TYPE_CHECKING:
    from contract.config import CaseConfig

# The random model's shape (parameters.yaml random_model), as LlamaConfig's names.
RANDOM_MODEL_KEYS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
    "max_position_embeddings",
)


@dataclass
class LlamaSettings:
    weight_dir: str | None = None  # FlagPerf's key: a Hugging Face checkpoint folder; None = the random model
    mmlu_dir: str = "mmlu"  # FlagPerf's key: MMLU-style CSVs under data_dir
    few_shots: int = 5  # FlagPerf's key: dev examples before each question
    max_prompt_tokens: int = 2048  # shots are dropped until a prompt fits (FlagPerf: 2048)
    random_model: dict = field(default_factory=dict)
    tokenizer_vocab: int = 1024  # the random model's byte-level BPE: at most this many tokens
    synthetic_prompts: int = 24  # prompts of the FlagPerf prefill pass without MMLU data
    origin: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.weight_dir is not None and (not isinstance(self.weight_dir, str) or not self.weight_dir):
            self._fail("weight_dir", f"must be null or a folder path, got {self.weight_dir!r}")
        if not isinstance(self.mmlu_dir, str) or not self.mmlu_dir:
            self._fail("mmlu_dir", f"must be a folder name under data_dir, got {self.mmlu_dir!r}")
        for key, low, high in (
            ("few_shots", 0, 64),
            ("max_prompt_tokens", 8, 1 << 20),
            ("tokenizer_vocab", 300, 1 << 20),
            ("synthetic_prompts", 1, 1 << 16),
        ):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                self._fail(key, f"must be an integer in {low}..{high}, got {value!r}")
        self._check_random_model()

    def _check_random_model(self) -> None:
        shape = self.random_model
        if not isinstance(shape, dict) or set(shape) != set(RANDOM_MODEL_KEYS):
            self._fail(
                "random_model", f"must map exactly {', '.join(RANDOM_MODEL_KEYS)} to positive integers, got {shape!r}"
            )
        if any(isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1 << 20 for v in shape.values()):
            self._fail("random_model", f"values must be positive integers, got {shape!r}")
        if (
            shape["hidden_size"] % shape["num_attention_heads"]
            or shape["num_attention_heads"] % shape["num_key_value_heads"]
        ):
            self._fail(
                "random_model",
                "num_attention_heads must divide hidden_size, and num_key_value_heads num_attention_heads",
            )
        if (shape["hidden_size"] // shape["num_attention_heads"]) % 2:
            self._fail(
                "random_model", "hidden_size / num_attention_heads (the head size) must be even for rotary embeddings"
            )

    def _fail(self, key: str, message: str) -> None:
        raise ConfigError(f"{self.origin.get(key, 'parameters.yaml')}: key '{key}' {message}")

    @classmethod
    def from_config(cls, config: CaseConfig) -> "LlamaSettings":
        names = (
            "weight_dir",
            "mmlu_dir",
            "few_shots",
            "max_prompt_tokens",
            "random_model",
            "tokenizer_vocab",
            "synthetic_prompts",
        )
        missing = [name for name in names if config.get(name, KeyError) is KeyError]
        if missing:
            raise ConfigError(f"configs/llama/parameters.yaml: missing key '{missing[0]}'")
        return cls(**{name: config.get(name) for name in names}, origin=dict(config.origin))
