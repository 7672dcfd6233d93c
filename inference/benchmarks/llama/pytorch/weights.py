"""Where the llama case's checkpoint comes from: a Hugging Face folder, or a random one.

``weight_dir`` (FlagPerf's key; a relative path is looked up under ``data_dir``,
the only host folder mounted into the container) names a Hugging Face causal-LM
checkpoint: ``config.json``, the weights, and a tokenizer (``tokenizer.json`` or
``tokenizer.model``). A folder without its config or tokenizer is one line and
exit 2, before any work.

``weight_dir: null`` builds a random-weight Llama of the ``random_model`` shape
(by default 4 layers, hidden 256, 8 heads, 4 KV heads, vocabulary 32000: 19 M
parameters) from ``seed``, with a byte-level BPE tokenizer trained by
``tokenizers`` on ``tokenizer_corpus.txt`` (no download anywhere). Both are
deterministic: the same settings and package versions give the same files,
cached under ``<cache_dir>/weights/`` by a hash of what determines them.
"""

from __future__ import annotations

import json
import os
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loguru import logger

from common.errors import ConfigError
from common.files import fingerprint, hash_file, hash_tree
from contract.folder_cache import cached_folder

from .settings import LlamaSettings

if TYPE_CHECKING:
    from contract.config import CaseConfig

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "tokenizer_corpus.txt"
SPECIAL_TOKENS = ("<s>", "</s>", "<unk>")  # ids 0, 1, 2
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model")
CONFIG_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
RESOLVED_KEY = "resolved_model_dir"  # config.extra: the folder, once found or built
# config.extra, set by ``stage.configure`` for an engine that serves the model over HTTP: the random
# model's vocabulary is its tokenizer's size (``random_model``'s ``vocab_size`` is not used), so that
# every id it generates decodes to text (a server streams text; most ids past the tokenizer decode to
# nothing, and a client that counts tokens from the text counts too few).
TOKENIZER_VOCAB_KEY = "random_vocab_is_tokenizer"


def _versions() -> dict[str, str | None]:
    found = {}
    for name in ("torch", "transformers", "tokenizers", "safetensors"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def check_checkpoint(folder: Path, origin: str) -> None:
    """A usable Hugging Face checkpoint folder, or one ConfigError naming what is missing."""
    if not folder.is_dir():
        raise ConfigError(f"{origin}: {folder}: no such directory")
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise ConfigError(f"{origin}: {config_file}: no such file (a Hugging Face checkpoint needs its config.json)")
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise ConfigError(f"{origin}: {folder}: no tokenizer (tokenizer.json or tokenizer.model)")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{origin}: {config_file}: not readable JSON ({' '.join(str(exc).split())[:120]})") from None
    missing = [key for key in CONFIG_KEYS if not isinstance(config, dict) or key not in config]
    if missing:
        raise ConfigError(
            f"{origin}: {config_file}: missing key '{missing[0]}' (not a decoder-only transformer's config)"
        )


def train_tokenizer(vocab_size: int) -> Any:
    """A byte-level BPE trained on the shipped corpus; deterministic for a given tokenizers version."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS.read_text(encoding="utf-8").splitlines(), trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=SPECIAL_TOKENS[0],
        eos_token=SPECIAL_TOKENS[1],
        unk_token=SPECIAL_TOKENS[2],
    )


def build_random(folder: Path, settings: LlamaSettings, seed: int, tokenizer_vocab: bool = False) -> None:
    """The random checkpoint; ``tokenizer_vocab``: its vocabulary is the tokenizer's size (``TOKENIZER_VOCAB_KEY``)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    tokenizer = train_tokenizer(settings.tokenizer_vocab)
    shape = {**settings.random_model, **({"vocab_size": len(tokenizer)} if tokenizer_vocab else {})}
    llama = LlamaConfig(**shape, bos_token_id=0, eos_token_id=1, tie_word_embeddings=False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(llama).eval()
    model.save_pretrained(str(folder), safe_serialization=True)
    tokenizer.save_pretrained(str(folder))


def random_key(settings: LlamaSettings, seed: int, tokenizer_vocab: bool = False) -> str:
    shape = {**settings.random_model, **({"vocab_size": "tokenizer"} if tokenizer_vocab else {})}
    parts = {
        "shape": shape,
        "tokenizer_vocab": settings.tokenizer_vocab,
        "seed": seed,
        "corpus": hash_file(CORPUS).hexdigest(),
        "code": hash_tree([HERE / "weights.py", HERE / "settings.py"]),
        "packages": _versions(),
    }
    return fingerprint(parts)


def model_dir(config: CaseConfig) -> Path:
    """The checkpoint folder (checked, or built and cached), found once per run."""
    resolved = config.get(RESOLVED_KEY)
    if resolved:
        return Path(resolved)
    settings = LlamaSettings.from_config(config)
    if settings.weight_dir is not None:
        path = (
            settings.weight_dir
            if os.path.isabs(settings.weight_dir)
            else os.path.join(config.data_dir, settings.weight_dir)
        )
        folder = Path(path)
        check_checkpoint(folder, f"{config.origin.get('weight_dir', 'parameters.yaml')}: key 'weight_dir'")
    else:
        sized = bool(config.get(TOKENIZER_VOCAB_KEY))
        key = random_key(settings, int(config.seed), sized)
        parent = Path(config.cache_dir) / "weights"
        entry, status, _ = cached_folder(
            parent,
            f"llama_random_{key}",
            "config.json",
            lambda out: build_random(out, settings, int(config.seed), sized),
            "random Llama checkpoint",
        )
        folder = entry.parent
        logger.info(
            ("reusing the cached" if status == "hit" else "built the") + f" random-weight Llama checkpoint {folder}"
        )
    config.extra[RESOLVED_KEY] = str(folder)
    return folder


def hf_config(config: CaseConfig) -> dict:
    return json.loads((model_dir(config) / "config.json").read_text(encoding="utf-8"))


def load_tokenizer(config: CaseConfig) -> Any:
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    folder = model_dir(config)
    try:
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, ImportError) as exc:
        raise ConfigError(f"llama: cannot load the tokenizer in {folder}: {' '.join(str(exc).split())[:200]}") from None


def prompt_id_range(tokenizer: Any, vocab: int) -> tuple[int, int]:
    """[low, high) of the ids synthetic prompts use: no special token (Llama 2 keeps them at
    0..2, Llama 3 from 128000 on) and no id beyond the tokenizer or the model."""
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    high = min(vocab, len(tokenizer), *[s for s in special if s >= 256] or [vocab])
    low = 1 + max([s for s in special if s < 256], default=-1)
    if high - low < 2:
        raise ConfigError(
            f"llama: the tokenizer leaves no ordinary token ids for synthetic prompts (range {low}..{high})"
        )
    return low, high
