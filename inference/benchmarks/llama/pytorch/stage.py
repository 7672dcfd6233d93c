"""The case's two pipeline hooks: ``configure`` (step 1) and ``performance_stage`` (step 6)."""

from __future__ import annotations

from typing import Any

from common.errors import ConfigError
from contract.config import CaseConfig, origin_of
from contract.llm_base import LLMEngineBase, ServingEngineBase, eos_token_ids
from contract.llm_workload import LLMWorkload, PromptSource
from contract.measuring import measuring
from contract.registry import load_engine_module

from .settings import LlamaSettings
from .weights import TOKENIZER_VOCAB_KEY, hf_config, load_tokenizer, model_dir, prompt_id_range


def configure(config: CaseConfig) -> None:
    """Check the keys, the engine and the checkpoint before any step reads them."""
    settings = LlamaSettings.from_config(config)
    if config.compiler is not None:
        engine_class = load_engine_module(config.vendor, config.compiler).InferModel
        if issubclass(engine_class, ServingEngineBase) and settings.weight_dir is None:
            config.extra[TOKENIZER_VOCAB_KEY] = True  # a served random model: its vocabulary the tokenizer's size
        if not issubclass(engine_class, LLMEngineBase):
            raise ConfigError(
                f"{origin_of(config, 'compiler')}: key 'compiler' is {config.compiler!r}: "
                f"inference_engine/{config.vendor}/{config.compiler}.py "
                "is not an LLM engine (contract/llm_base.py); the llama case needs one, e.g. cpu: "
                "onnxruntime_genai, nvidia: inductor_llm"
            )
    workload = LLMWorkload.from_config(config)
    folder = model_dir(config)  # checked (weight_dir) or built (random), once
    if settings.weight_dir is None:
        config.accuracy_note = "random weights"
    limit = hf_config(config).get("max_position_embeddings")
    if isinstance(limit, int) and workload.longest() > limit:
        raise ConfigError(
            f"{config.origin.get('input_lengths', 'parameters.yaml')}: key 'input_lengths' with output_length needs "
            f"{workload.longest()} positions; "
            f"the model in {folder} has {limit} (max_position_embeddings)"
        )


def performance_stage(engine: Any, model: Any, config: CaseConfig) -> Any:
    """The generation check, the prefill/decode table and the server rows (``run_llm_stage``); for a serving
    engine the greedy check and the load steps over HTTP (``run_serving_stage``): the framework's stages,
    reached through ``contract/measuring.py``."""
    from .model import model_shape, reference_logits

    shape = model_shape(config, model)
    low, high = prompt_id_range(load_tokenizer(config), shape.vocab)
    reference = reference_logits(model, config) if model is not None else None
    prompts = PromptSource(low, high, int(config.seed))
    framework = measuring()
    stage = framework.run_llm_stage
    if isinstance(engine, ServingEngineBase):  # a server the engine step started: measured over HTTP
        stage = framework.run_serving_stage
    precision = framework.engine_precision(engine, config)
    return stage(engine, reference, config, shape, prompts, precision, eos_token_ids(hf_config(config)))
