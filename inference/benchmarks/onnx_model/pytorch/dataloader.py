"""Synthetic samples from the input plans (benchmarks/onnx_model/inputs.py).

A sample is ``(tensors, index)``: one tensor per model input, in the model's
input order, without the batch axis; the DataLoader stacks them into batches.
Sample ``i`` is drawn from a generator seeded with ``(seed, i)``, so samples are
distinct (the anti-caching audit needs that) and every run feeds the same ones;
they are made when asked for, so a large data set costs no memory.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from benchmarks.onnx_model.inputs import InputPlan
from common.errors import ConfigError, shown
from contract.config import CaseConfig, origin_of

MAX_SAMPLES = 1_000_000


def sample_values(plan: InputPlan, rng: np.random.Generator) -> np.ndarray:
    shape, dtype = plan.sample_shape, np.dtype(plan.dtype)
    if plan.fill == "uniform":
        return rng.uniform(plan.low, plan.high, size=shape).astype(dtype)
    if plan.fill == "integers":
        return rng.integers(int(plan.low), int(plan.high), size=shape, dtype=np.int64).astype(dtype)
    if plan.fill == "ones":
        return np.ones(shape, dtype=dtype)
    if plan.fill == "zeros":
        return np.zeros(shape, dtype=dtype)
    if plan.fill == "positions":
        if not shape:
            return np.zeros(shape, dtype=dtype)
        positions = np.arange(shape[-1], dtype=np.int64)
        if plan.high:
            positions %= int(plan.high)
        return np.broadcast_to(positions, shape).astype(dtype)
    raise ValueError(f"input '{plan.name}': unknown fill {plan.fill!r}")


class SyntheticInputs(Dataset):
    def __init__(self, plans: list[InputPlan], count: int, seed: int) -> None:
        self.plans = plans
        self.count = count
        self.seed = seed

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> tuple[tuple[torch.Tensor, ...], int]:
        rng = np.random.default_rng([self.seed, index])
        return tuple(torch.from_numpy(sample_values(plan, rng)) for plan in self.plans), index


def _samples(config: CaseConfig) -> int:
    value = config.get("synthetic_samples", 64)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_SAMPLES:
        origin = origin_of(config, "synthetic_samples")
        raise ConfigError(
            f"{origin}: key 'synthetic_samples' must be a positive integer <= {MAX_SAMPLES}, got {shown(value)}"
        )
    sweep = config.batch_sizes if isinstance(config.batch_sizes, list) else []
    return max(value, config.batch_size, *sweep)  # at least one full batch of every size


def build_dataloader(config: CaseConfig) -> DataLoader:
    plans = [InputPlan.from_dict(item) for item in config.model_inputs]
    return DataLoader(
        SyntheticInputs(plans, _samples(config), int(config.seed)),
        batch_size=int(config.batch_size),
        shuffle=False,
        drop_last=False,
        num_workers=int(config.num_workers),
    )
