"""The LLM case's workload, what a case reads and the LLM stage measures: ``LLMWorkload`` (the
LLM keys of a case config, checked once: the offline table's shapes, the server rows' rates
and lengths, their latency bounds, the greedy check) and ``PromptSource`` (seeded, distinct
prompts of token ids).

The stage that measures them is the framework's (``tools/measure/llm_stage.py``,
``tools/measure/serving_stage.py``), reached by a case through ``contract/measuring.py``; the
keys' meaning: docs/running.md. Pure: imports only ``common/`` and the contract.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from common.errors import ConfigError
from contract.config import CaseConfig, origin_of, setting

PERCENTILES = ("p50", "p90", "p99")


def _fail(config: CaseConfig, key: str, message: str) -> None:
    raise ConfigError(f"{origin_of(config, key)}: key '{key}' {message}")


def _ints(config: CaseConfig, key: str, value: Any, low: int, high: int, count: tuple[int, int]) -> list[int]:
    items = value if isinstance(value, list) else [value]
    if not count[0] <= len(items) <= count[1] or any(
        isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high for v in items
    ):
        what = (
            f"a list of {count[0]} to {count[1]} integers" if count[0] != count[1] else f"a list of {count[0]} integers"
        )
        _fail(config, key, f"must be {what} in {low}..{high}, got {value!r}")
    return [int(v) for v in items]


def _int(config: CaseConfig, key: str, default: int | None, low: int, high: int) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        _fail(config, key, f"must be an integer in {low}..{high}, got {value!r}")
    return int(value)


@dataclass
class LLMWorkload:
    """The LLM keys of a case config (parameters.yaml), checked once."""

    batch_sizes: list[int]
    input_lengths: list[int]
    output_length: int
    server_target_qps: list[float] = field(default_factory=list)
    server_requests: int = 64
    server_input_length: list[int] = field(default_factory=lambda: [32, 256])
    server_output_length: list[int] = field(default_factory=lambda: [8, 64])
    ttft_bound_ms: float = 2000.0
    tpot_bound_ms: float = 200.0
    server_bound_percentile: str = "p90"
    greedy_prompts: int = 4
    greedy_tokens: int = 32
    greedy_agreement_target: float = 0.99

    def __post_init__(self) -> None:
        if self.output_length < 2:
            raise ValueError("output_length must be at least 2 (TPOT is the time per token after the first)")
        if self.server_bound_percentile not in PERCENTILES:
            raise ValueError(
                f"server_bound_percentile must be one of {', '.join(PERCENTILES)}, got {self.server_bound_percentile!r}"
            )
        for name in ("server_input_length", "server_output_length"):
            low, high = getattr(self, name)
            if low > high:
                raise ValueError(f"{name} must be [min, max] with min <= max, got {[low, high]}")
        if self.server_output_length[0] < 2:
            raise ValueError("server_output_length must have a min of at least 2 (TPOT needs two tokens)")
        if not 0 < self.greedy_agreement_target <= 1:
            raise ValueError(f"greedy_agreement_target must be in (0, 1], got {self.greedy_agreement_target!r}")

    @classmethod
    def from_config(cls, config: CaseConfig) -> "LLMWorkload":
        get = config.get
        rates = get("server_target_qps", []) or []
        rates = rates if isinstance(rates, list) else [rates]
        if (
            any(isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 < r <= 1e6 for r in rates)
            or len(rates) > 16
        ):
            _fail(
                config,
                "server_target_qps",
                f"must be a list of at most 16 positive request rates (requests/s), got {get('server_target_qps')!r}",
            )
        percentile = get("server_bound_percentile", "p90")
        try:
            workload = cls(
                batch_sizes=list(config.batch_sizes),
                input_lengths=_ints(config, "input_lengths", get("input_lengths"), 1, 1 << 20, (1, 16)),
                output_length=_int(config, "output_length", None, 1, 1 << 20),
                server_target_qps=[float(r) for r in rates],
                server_requests=_int(config, "server_requests", 64, 1, 1 << 20),
                server_input_length=_ints(
                    config, "server_input_length", get("server_input_length", [32, 256]), 1, 1 << 20, (2, 2)
                ),
                server_output_length=_ints(
                    config, "server_output_length", get("server_output_length", [8, 64]), 1, 1 << 20, (2, 2)
                ),
                ttft_bound_ms=_bound(config, "ttft_bound_ms", 2000.0),
                tpot_bound_ms=_bound(config, "tpot_bound_ms", 200.0),
                server_bound_percentile=percentile,
                greedy_prompts=_int(config, "greedy_prompts", 4, 1, 256),
                greedy_tokens=_int(config, "greedy_tokens", 32, 1, 1 << 16),
                greedy_agreement_target=float(get("greedy_agreement_target", 0.99)),
            )
        except ValueError as exc:
            key, message = str(exc).split(" ", 1)
            raise ConfigError(f"{origin_of(config, key)}: key '{key}' {message}") from None
        cap = float(setting(config, "max_duration_s"))
        if rates and workload.server_requests / min(rates) > cap:
            _fail(
                config,
                "server_requests",
                f"is {workload.server_requests}: at {min(rates):g} requests/s they arrive over "
                f"{workload.server_requests / min(rates):.3g} s, "
                f"more than max_duration_s {cap:g} (raise max_duration_s, or the rate)",
            )
        return workload

    def longest(self) -> int:
        """The most positions one request needs (prompt + generated)."""
        table = max(self.input_lengths) + self.output_length
        server = self.server_input_length[1] + self.server_output_length[1] if self.server_target_qps else 0
        return max(table, server)


def _bound(config: CaseConfig, key: str, default: float) -> float:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 3.6e6:
        _fail(config, key, f"must be a positive number of milliseconds, got {value!r}")
    return float(value)


class PromptSource:
    """Distinct, seeded prompts of token ids in [low, high): query ``index`` of a shape
    always gets the same prompts, and no two queries of a run the same ones."""

    def __init__(self, low: int, high: int, seed: int) -> None:
        self.low, self.high, self.seed = low, high, seed

    MEASURED, WARMUP, SETTLE, CHECK, PASS = range(5)  # streams: no two uses share prompts

    def batch(self, batch: int, length: int, index: int, stream: int = MEASURED):
        import numpy as np

        rng = np.random.default_rng([self.seed, stream, batch, length, index])
        return rng.integers(self.low, self.high, size=(batch, length), dtype=np.int64)
