"""LLM generation metrics, defined once for every LLM case and engine.

Terms (timestamps are ``time.perf_counter_ns`` on the issuing thread; an engine
call returns only when its work is done, ``contract/llm_base.py``):
  request     one prompt of ``input_length`` tokens that gets ``output_length``
              greedy tokens; a query is one engine generation over a batch of
              requests (the same length each), issued at ``issued``.
  arrival     when a request could have started: offline, its batch's issue (all
              requests are queued, a batch is issued as soon as the previous
              ends); server, its scheduled Poisson arrival, so queueing counts.
  prefill     the engine's ``prefill`` call: one forward over the prompts.
  TTFT        time to first token = first token's completion - arrival: the
              prefill plus the selection of the first token.
  TPOT        time per output token after the first, per request =
              (last token - first token) / (output_length - 1); undefined for 1.
  ITL         inter-token latency: the gap between two consecutive tokens of a
              request (output_length - 1 gaps per request).
  e2e         last token's completion - arrival.
  prefill tokens/s   prompt tokens / time in ``prefill`` calls: FlagPerf's
              ``p_inference_core`` for its LLM cases, whose sample is a token.
  decode tokens/s    tokens after the first / time between first and last tokens.
  output tokens/s    every generated token / the wall-clock window (first issue
              to last completion); requests/s the same for requests.
  FLOPs per token    2 x (parameters less the input embedding, a lookup)
              + 4 x layers x heads x head_dim x context (QK^T and AV), context =
              the positions attended: (L + 1) / 2 on average over a causal prefill
              of L tokens, L + k for the k-th generated token. A prefill counts the
              LM head (vocab x hidden) once per sequence, for the last position:
              the only logits generation needs (FlagPerf counts 2 x parameters for
              every token, the head included). MFU = FLOP/s / the device's peak
              (on the host: the peak comes from the vendor's analysis module).
  KV cache    2 (K and V) x layers x kv_heads x head_dim x bytes per value x
              the positions the engine allocates (``kv_cache_positions``).

Distributions (TTFT, TPOT, ITL, e2e, prefill) are ``common.stats.LatencyStats``:
p50/p90/p99 with LoadGen's sample floors (a percentile from too few samples is
null) and each percentile's 95 % order-statistic interval.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from common.stats import LatencyStats, percentile
from contract.llm_base import ModelShape

Clock = Callable[[], int]
# A distribution block's keys, beside its intervals (``ci95``).
STAT_KEYS = ("count", "mean", "p50", "p90", "p99")


@dataclass
class Generation:
    """One query: a batch of requests generated together, on the issuing clock (ns)."""

    batch: int
    input_length: int
    issued_ns: int
    prefill_end_ns: int
    token_ns: list[int]  # completion of each output token; [0] is the first
    tokens: Any = None  # [batch, output_length] greedy ids, when kept

    @property
    def output_length(self) -> int:
        return len(self.token_ns)

    def ttft_ns(self, arrival_ns: int | None = None) -> int:
        return self.token_ns[0] - (self.issued_ns if arrival_ns is None else arrival_ns)

    def tpot_ns(self) -> float | None:
        n = len(self.token_ns)
        return (self.token_ns[-1] - self.token_ns[0]) / (n - 1) if n > 1 else None

    def itl_ns(self) -> list[int]:
        return [b - a for a, b in zip(self.token_ns, self.token_ns[1:])]

    @property
    def prefill_ns(self) -> int:
        return self.prefill_end_ns - self.issued_ns

    @property
    def end_ns(self) -> int:
        return self.token_ns[-1]


def generate_timed(
    engine: Any, prompts: Any, output_length: int, clock: Clock = time.perf_counter_ns, keep_tokens: bool = False
) -> Generation:
    """Run one query through the engine contract and time it (the one timing of generation).

    ``prefill`` then ``output_length`` calls of ``step``: the first selects the
    first token from the prefill's logits, each later one runs the forward of
    the token chosen before it and selects the next."""
    batch, length = int(prompts.shape[0]), int(prompts.shape[1])
    token_ns: list[int] = []
    chosen: list = []
    step, stamp, keep = engine.step, token_ns.append, chosen.append  # the per-token path: locals, no lookups
    issued = clock()
    state = engine.prefill(prompts, output_length)
    prefill_end = clock()
    try:
        for _ in range(output_length):
            ids = step(state)
            stamp(clock())
            if keep_tokens:
                keep(ids)
    finally:
        engine.release(state)
    tokens = None
    if keep_tokens:
        import numpy as np

        tokens = (
            np.stack([np.asarray(t).reshape(batch) for t in chosen], axis=1)
            if chosen
            else np.zeros((batch, 0), dtype=np.int64)
        )
    return Generation(batch, length, issued, prefill_end, token_ns, tokens)


# ---- distributions ---------------------------------------------------------------
def stats_block(samples_ns: list[float]) -> dict:
    """A distribution in ms: ``count``, ``mean``, ``p50``/``p90``/``p99`` (null below
    LoadGen's floors) and ``ci95`` {percentile: [lo, hi]} beside each reported one."""
    stats = LatencyStats.from_ns([int(round(v)) for v in samples_ns])
    if stats is None:
        return {**{k: None for k in STAT_KEYS}, "count": 0, "ci95": {}}
    intervals = getattr(stats, "ci95", None) or {}
    block = {k: getattr(stats, k) for k in STAT_KEYS}
    block["ci95"] = {name: intervals.get(name) for name in ("p50", "p90", "p99") if block[name] is not None}
    return block


def median(values: list[float]) -> float | None:
    return percentile(sorted(values), 50.0) if values else None


# ---- one table cell or server row: figures from its generations -------------------
@dataclass
class GenerationFigures:
    """Every metric of a set of generations; ``arrivals_ns`` (server) sets TTFT's origin."""

    generations: list[Generation]
    window_start_ns: int
    arrivals_ns: list[int] | None = None
    shape: ModelShape | None = None

    def requests(self) -> int:
        return sum(g.batch for g in self.generations)

    def timeline(self):
        """Output tokens over the window, each query from its issue to its last token
        (``tools.measure.precision``: the throughput's interval and drift)."""
        from tools.measure.precision import Timeline

        gens = self.generations
        ends = [g.end_ns - self.window_start_ns for g in gens]
        return Timeline.spans(ends, [g.end_ns - g.issued_ns for g in gens], [g.batch * g.output_length for g in gens])

    def window_s(self) -> float:
        if not self.generations:
            return 0.0
        return (max(g.end_ns for g in self.generations) - self.window_start_ns) / 1e9

    def per_request(self) -> tuple[list[float], list[float], list[float], list[float]]:
        """TTFT, TPOT, ITL and e2e samples in ns, one per request (ITL: per gap)."""
        ttft: list[float] = []
        tpot: list[float] = []
        itl: list[float] = []
        e2e: list[float] = []
        for index, g in enumerate(self.generations):
            arrival = self.arrivals_ns[index] if self.arrivals_ns is not None else g.issued_ns
            per = g.tpot_ns()
            gaps = g.itl_ns()
            for _ in range(g.batch):  # every request of a batch saw the same times
                ttft.append(g.ttft_ns(arrival))
                e2e.append(g.end_ns - arrival)
                if per is not None:
                    tpot.append(per)
                itl.extend(gaps)
        return ttft, tpot, itl, e2e

    def to_dict(self) -> dict:
        """The figures of a cell or server row (``common.record.LLMRow``'s, in its key order);
        the two FLOP/s figures only with a ``shape``."""
        gens = self.generations
        ttft, tpot, itl, e2e = self.per_request()
        window = self.window_s()
        prompt_tokens = sum(g.batch * g.input_length for g in gens)
        prefill_s = sum(g.prefill_ns for g in gens) / 1e9
        decode_tokens = sum(g.batch * (g.output_length - 1) for g in gens)
        decode_s = sum(g.end_ns - g.token_ns[0] for g in gens) / 1e9
        output_tokens = sum(g.batch * g.output_length for g in gens)
        record = {
            "queries": len(gens),
            "requests": self.requests(),
            "duration_s": window,
            "ttft_ms": stats_block(ttft),
            "tpot_ms": stats_block(tpot),
            "itl_ms": stats_block(itl),
            "e2e_ms": stats_block(e2e),
            "prefill_ms": stats_block([g.prefill_ns for g in gens]),
            "prefill_tokens_per_s": prompt_tokens / prefill_s if prefill_s > 0 else None,
            "decode_tokens_per_s": decode_tokens / decode_s if decode_s > 0 else None,
            "output_tokens_per_s": output_tokens / window if window > 0 else None,
            "requests_per_s": self.requests() / window if window > 0 else None,
        }
        if self.shape is not None:
            record["prefill_flops_per_s"] = (
                sum(self.shape.prefill_flops(g.batch, g.input_length) for g in gens) / prefill_s
                if prefill_s > 0
                else None
            )
            record["decode_flops_per_s"] = (
                sum(self.shape.decode_flops(g.batch, g.input_length, g.output_length) for g in gens) / decode_s
                if decode_s > 0
                else None
            )
        return record
