"""Audits that a measured result was earned honestly (MLPerf's compliance tests, adapted).

anti_caching
    An engine that memoises its answer for an input it has already seen runs
    a repeated input faster than a new one. The audit times calls that repeat
    one input (``same``) against calls whose inputs the engine has never seen
    (``distinct``), in interleaved blocks so that machine drift hits both
    alike, and fails when the median distinct call is more than ``threshold``
    slower than the median repeated one. A failure seen on fewer than
    ``CONFIRM_CALLS`` calls of each kind (a slow engine within the budget) is
    measured again on that many before it stands: medians of 4 calls on a
    noisy 2-core machine differ by 1.2x by chance. Distinct inputs cost the same to
    compute as the pool's: floating tensors get a different small constant
    added per call; integer-only inputs (token ids) get their rows shuffled
    across the pool's batches. Every distinct input differs, byte for byte,
    from every other and from every pool batch.

accuracy_in_performance_mode
    MLPerf's TEST01: outputs sampled while the timed load ran must match the
    outputs of an untimed accuracy-mode call on the same inputs, so that an
    engine cannot answer fast and wrong under load.

``passed`` is True or False, or None when the audit could not be run (the
reason is in ``detail``); None is not a failure.
"""

from __future__ import annotations

import hashlib
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from common.errors import EngineError
from tools.checks.numeric import compare_outputs

# At most this many calls of each kind, however fast the engine: medians of
# this many are stable and the constant added to float inputs stays small.
MAX_CALLS = 200
# Calls of one kind in a row before switching to the other kind.
BLOCK = 2
# A failure on fewer calls of each kind than this is confirmed on this many first.
CONFIRM_CALLS = 16
# Consecutive candidates that were not new before the maker gives up.
MAX_TRIES = 100
ANTI_CACHING = "anti_caching"  # the audit's name in AuditResult and result.json


@dataclass
class AuditResult:
    name: str  # "anti_caching" | "accuracy_in_performance_mode"
    passed: bool | None  # None: could not be run (why is in detail); not a failure
    detail: str  # one sentence for people
    figures: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def _as_list(x: Any) -> list:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _tensor_bytes(t) -> bytes:
    import torch

    t = t.detach().cpu().contiguous()
    try:
        return t.numpy().tobytes()
    except (TypeError, RuntimeError):  # dtypes numpy lacks (bfloat16, float8...)
        return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def input_key(batch: list) -> str:
    """A digest of a batch's bytes, dtypes and shapes: equal exactly when a bytes-keyed cache would hit."""
    h = hashlib.blake2b(digest_size=16)
    for t in batch:
        h.update(f"{t.dtype}{tuple(t.shape)}|".encode())
        h.update(_tensor_bytes(t))
    return h.hexdigest()


def _signature(batch: list) -> tuple:
    return tuple((t.dtype, tuple(t.shape)) for t in batch)


class DistinctInputs:
    """Makes, one at a time, inputs that no bytes-keyed cache of the pool or of earlier calls can answer.

    ``unavailable`` is None, or why no such input can be made. ``next()``
    returns None once no new input can be found.
    """

    def __init__(self, pool: list[list]):
        import torch

        self.unavailable: str | None = None
        self.made = 0
        first = pool[0]
        marker = self._find_marker(first)
        if marker is not None:
            self._init_float(pool, *marker)
            return
        self._float = False
        sig = _signature(first)
        if not first or any(t.dim() == 0 for t in first) or len({t.shape[0] for t in first}) != 1:
            self.unavailable = "the inputs have no common batch axis to rearrange and no floating tensor to offset"
            return
        sources = [b for b in pool if _signature(b) == sig]
        self._rows = [torch.cat([b[i] for b in sources]) for i in range(len(first))]
        self._n = int(first[0].shape[0])
        self._seen = {input_key(b) for b in pool}
        if self._rows[0].shape[0] <= 1:
            self.unavailable = (
                "the pool holds a single sample of integer inputs, which cannot be rearranged into a new one"
            )
        self._gen = torch.Generator().manual_seed(20240611)

    @staticmethod
    def _find_marker(batch: list):
        """(tensor index, flat position) of the first finite element of a floating tensor, or None."""
        import torch

        for i, t in enumerate(batch):
            if t.is_floating_point() and t.numel():
                finite = torch.isfinite(t.reshape(-1)).nonzero()
                if finite.numel():
                    return i, int(finite[0, 0])
        return None

    def _init_float(self, pool: list[list], index: int, position: int) -> None:
        import torch

        self._float = True
        self._index, self._position = index, position
        sig = _signature(pool[0])
        self._sources = [b for b in pool if _signature(b) == sig]
        self._uses = [0] * len(self._sources)
        # Per source tensor, a step large enough to move every element by a few
        # ulps of the tensor's largest magnitude (1e-3 suffices for fp32 data).
        self._deltas = []
        for b in self._sources:
            row: list[float | None] = []
            for t in b:
                if t.is_floating_point() and t.numel():
                    finite = t[torch.isfinite(t)]
                    peak = float(finite.abs().max()) if finite.numel() else 0.0
                    row.append(max(1e-3, 4 * torch.finfo(t.dtype).eps * peak))
                else:
                    row.append(None)
            self._deltas.append(row)
        self._seen = set()
        for b in pool:
            key = self._marker_key(b)
            if key is not None:
                self._seen.add(key)
        self._next_source = 0

    def _marker_key(self, batch: list):
        if len(batch) <= self._index:
            return None
        t = batch[self._index]
        if not t.is_floating_point() or t.numel() <= self._position:
            return None
        return str(t.dtype), _tensor_bytes(t.reshape(-1)[self._position : self._position + 1])

    def next(self) -> list | None:
        if self.unavailable:
            return None
        for _ in range(MAX_TRIES):
            candidate, key = self._candidate()
            if key not in self._seen:
                self._seen.add(key)
                self.made += 1
                return candidate
        return None

    def _candidate(self):
        if self._float:
            # A new value of the marker element makes the whole input new: checking
            # it is O(1), where hashing every candidate would cost a pass over it.
            s = self._next_source
            self._next_source = (s + 1) % len(self._sources)
            self._uses[s] += 1
            k = self._uses[s]
            batch = [t + k * d if d is not None else t for t, d in zip(self._sources[s], self._deltas[s])]
            return batch, self._marker_key(batch)
        import torch

        order = torch.randperm(self._rows[0].shape[0], generator=self._gen)[: self._n]
        batch = [rows[order] for rows in self._rows]
        return batch, input_key(batch)


def _timed_ms(step: Callable, inputs: list, sync: Callable[[], None], clock: Callable[[], int]) -> float:
    sync()
    t0 = clock()
    result = step(inputs)
    sync()
    t1 = clock()
    if not (isinstance(result, tuple) and len(result) == 2):
        raise EngineError(
            f"anti-caching audit: the engine call must return (outputs, foo_time), got {type(result).__name__}"
        )
    foo = result[1]
    if isinstance(foo, bool) or not isinstance(foo, (int, float)) or foo < 0:
        raise EngineError(
            f"anti-caching audit: the engine's foo_time must be a non-negative number of seconds, got {foo!r}"
        )
    return max(t1 - t0 - foo * 1e9, 0.0) / 1e6


def _fresh_copy(batch: list) -> list:
    return [t.clone() if hasattr(t, "clone") else t for t in batch]


def anti_caching_audit(
    step: Callable,
    pool: list[list],
    *,
    sync: Callable[[], None] = lambda: None,
    budget_s: float = 2.0,
    min_calls: int = 4,
    threshold: float = 0.10,
    clock: Callable[[], int] = time.perf_counter_ns,
) -> AuditResult:
    """Fail when repeating ``pool[0]`` runs more than ``threshold`` faster than inputs never seen before.

    Per-call time is the synchronised wall time minus the engine's foo_time;
    the medians of each kind are compared. At least ``min_calls`` of each kind
    run, and more while another round (``BLOCK`` calls of each kind, its
    cost estimated by the last round) still fits in ``budget_s``, up to
    ``MAX_CALLS`` each. A first call on ``pool[0]`` warms the engine (and
    primes any cache) and is not counted. Errors raised by the engine propagate.
    """
    batches = [_as_list(b) for b in pool]
    if not batches:
        return AuditResult(ANTI_CACHING, None, "anti-caching audit: not run, there is no input batch to repeat", {})
    maker = DistinctInputs(batches)
    if maker.unavailable:
        return AuditResult(ANTI_CACHING, None, f"anti-caching audit: not run, {maker.unavailable}", {})
    timed = _ArmTimes(step, batches[0], sync, clock)
    timed.run(maker, budget_s * 1e9, min_calls)
    if len(timed.distinct_ms) < min_calls:
        return AuditResult(
            ANTI_CACHING,
            None,
            f"anti-caching audit: not run, only {maker.made} inputs the engine had not seen could be made from the "
            f"pool (needs {min_calls})",
            {"distinct_inputs_made": maker.made},
        )
    result = _judge_arms(timed, threshold)
    if result.passed is False and len(timed.distinct_ms) < CONFIRM_CALLS:
        # Over the budget, but only when the few calls it allowed look like caching.
        timed.more(maker, CONFIRM_CALLS)
        result = _judge_arms(timed, threshold)
    return result


class _ArmTimes:
    """The audit's timed calls: a warm-up call on the repeated input (``first_ms``, reported,
    not judged), then rounds of both arms, ``same_ms`` and ``distinct_ms``."""

    def __init__(self, step: Callable, same: list, sync: Callable[[], None], clock: Callable[[], int]):
        self.step, self.same, self.sync, self.clock = step, same, sync, clock
        self.first_ms = 0.0
        self.same_ms: list[float] = []
        self.distinct_ms: list[float] = []

    def _timed(self, inputs: list) -> float:
        return _timed_ms(self.step, inputs, self.sync, self.clock)

    def run(self, maker: DistinctInputs, budget_ns: float, min_calls: int) -> None:
        """Rounds until the maker runs out, or, once both arms have ``min_calls``, until another
        round of the last one's cost would pass ``budget_ns`` or ``MAX_CALLS`` is reached."""
        clock = self.clock
        start = clock()
        self.first_ms = self._timed(self.same)  # warm-up; also primes any cache with pool[0]
        while True:
            round_start = clock()
            exhausted = self._round(maker)
            now = clock()
            round_ns = now - round_start
            enough = len(self.same_ms) >= min_calls and len(self.distinct_ms) >= min_calls
            if exhausted or (enough and (now - start + round_ns > budget_ns or len(self.distinct_ms) >= MAX_CALLS)):
                return

    def more(self, maker: DistinctInputs, calls: int) -> None:
        """Further rounds until both arms have ``calls`` timings, or the maker runs out."""
        while len(self.distinct_ms) < calls and not self._round(maker):
            pass

    def _round(self, maker: DistinctInputs) -> bool:
        """One round: ``BLOCK`` calls of each arm, interleaved; True when the maker ran out."""
        # Both arms' inputs are made before the round and the timed calls
        # interleave, so the harness's own work (making a new input evicts the
        # engine's working set from the caches) lands on neither arm.
        repeats = [_fresh_copy(self.same) for _ in range(BLOCK)]
        fresh = []
        exhausted = False
        for _ in range(BLOCK):
            inputs = maker.next()
            if inputs is None:
                exhausted = True
                break
            fresh.append(inputs)
        # ... and which arm goes first alternates, so neither always follows that work.
        for index, repeated in enumerate(repeats):
            pair = [(self.same_ms, repeated)] + ([(self.distinct_ms, fresh[index])] if index < len(fresh) else [])
            if (len(self.same_ms) // BLOCK + index) % 2:
                pair.reverse()
            for times, inputs in pair:
                times.append(self._timed(inputs))
        return exhausted


def _judge_arms(timed: _ArmTimes, threshold: float) -> AuditResult:
    """The verdict on the two arms' medians (``limit`` = 1 + ``threshold``)."""
    same_med = statistics.median(timed.same_ms)
    distinct_med = statistics.median(timed.distinct_ms)
    limit = 1 + threshold
    calls = min(len(timed.same_ms), len(timed.distinct_ms))
    figures = {
        "same_input_ms": same_med,
        "distinct_inputs_ms": distinct_med,
        "speedup": distinct_med / same_med if same_med > 0 else None,
        "limit": limit,
        "calls": calls,
        "first_call_ms": timed.first_ms,
    }
    if same_med <= 0:
        if distinct_med > 0:
            return AuditResult(
                ANTI_CACHING,
                False,
                f"anti-caching audit: repeating one input took no measurable time while distinct inputs took "
                f"{distinct_med:.3f} ms: the engine may cache results",
                figures,
            )
        return AuditResult(
            ANTI_CACHING, None, "anti-caching audit: not run, the engine calls took no measurable time", figures
        )
    speedup = figures["speedup"]
    if distinct_med > limit * same_med:
        return AuditResult(
            ANTI_CACHING,
            False,
            f"anti-caching audit: repeating one input ran {speedup:.1f}x faster than distinct inputs (limit "
            f"{limit:.2f}x): the engine may cache results",
            figures,
        )
    return AuditResult(
        ANTI_CACHING,
        True,
        f"anti-caching audit: repeating one input ran at {speedup:.2f}x the speed of distinct inputs over {calls} "
        f"calls each (limit {limit:.2f}x)",
        figures,
    )


def _compare_samples(
    samples: dict[int, tuple[int, list]], references: dict[int, list], precision: str, tolerances: dict[str, float]
) -> tuple[int, list[tuple[int, str]], int, float]:
    """Each sample against its pool batch's reference: how many were compared, the failures (query,
    first reason), how many had no reference, and the largest difference (of the RMS)."""
    compared = 0
    failures: list[tuple[int, str]] = []
    missing = 0
    worst = 0.0
    for query in sorted(samples):
        pool_index, outputs = samples[query]
        if pool_index not in references:
            missing += 1
            continue
        report = compare_outputs(
            [_as_list(references[pool_index])],
            [_as_list(outputs)],
            precision,
            tolerances,
            label=f"query {query} (pool batch {pool_index})",
            against="accuracy mode",
        )
        compared += 1
        worst = max([worst] + [d.max_rel for d in report.outputs])
        if not report.passed:
            failures.append((query, report.reasons[0]))
    return compared, failures, missing, worst


def accuracy_in_performance_mode(
    samples: dict[int, tuple[int, list]],
    references: dict[int, list],
    precision: str,
    tolerances: dict[str, float],
) -> AuditResult:
    """Compare outputs sampled under load with accuracy-mode outputs for the same pool batches.

    ``samples``: query index -> (pool index, outputs sampled during the timed
    run); ``references``: pool index -> outputs of an untimed call on that
    batch. Each sample is checked with ``numeric.compare_outputs`` at the
    given tolerances; samples whose pool batch has no reference are counted,
    not compared.
    """
    name = "accuracy_in_performance_mode"
    compared, failures, missing, worst = _compare_samples(samples, references, precision, tolerances)
    figures = {
        "compared": compared,
        "failed": len(failures),
        "max_rel": worst,
        "failed_queries": [q for q, _ in failures][:20],
        "without_reference": missing,
    }
    if compared == 0:
        why = (
            "no outputs were sampled during the performance run"
            if not samples
            else ("no sampled query has an accuracy-mode reference")
        )
        return AuditResult(name, None, f"accuracy in performance mode: not run, {why}", figures)
    if failures:
        return AuditResult(
            name,
            False,
            f"accuracy in performance mode: {len(failures)} of {compared} outputs sampled under load differ from "
            f"accuracy mode, e.g. {failures[0][1]}",
            figures,
        )
    return AuditResult(
        name,
        True,
        f"accuracy in performance mode: all {compared} outputs sampled under load match accuracy mode (largest "
        f"difference {worst:.1e} of the RMS, {precision})",
        figures,
    )
