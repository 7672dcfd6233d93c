"""What a measured phase reports, the case API's result type: ``PhaseResult`` (a case's
``model_forward`` / ``engine_forward`` returns one, from ``contract.measuring``'s ``timed_forward``),
with its ``Verdict`` and the ``ContentionReading`` over its measured loop.

Pure records: the framework fills them (the timing loop ``tools/measure/loop.py``, the verdict
rules ``tools/measure/verdict.py``, the contention reading ``tools/measure/contention.py``), a case
may read or ``dataclasses.replace`` them (benchmarks/llama: the accuracy per question), and the
result writer reads them (``tools/results/result.py``). They sit in the contract because a case's
signature names them; they import only ``common/``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from common import record as recorded
from common.record import as_json
from common.stats import LatencyStats


@dataclass
class Verdict:
    """``reasons``: why the figure is INVALID; ``not_judged``: the checks that could not run on it,
    each with why (too few queries for drift, no CPU reading, audits off). A check that was not
    run never passes silently: ``run.py --strict`` counts it as a failure (docs/measurement.md)."""

    reasons: list[str] = field(default_factory=list)
    not_judged: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.reasons

    def add(self, reason: str | None) -> "Verdict":
        if reason and reason not in self.reasons:
            self.reasons.append(reason)
        return self

    def extend(self, reasons: Iterable[str | None]) -> "Verdict":
        for reason in reasons:
            self.add(reason)
        return self

    def skip(self, unjudged: Iterable[str | None]) -> "Verdict":
        """Record checks that were not run, each once."""
        for what in unjudged:
            if what and what not in self.not_judged:
                self.not_judged.append(what)
        return self

    def to_dict(self) -> dict:
        """The verdict's JSON (``common.record.Verdict.to_json``: ``not_judged`` only when some check did not run)."""
        return self.record().to_json()

    def record(self) -> recorded.Verdict:
        """The verdict as a result records it (``common.record.Verdict``, frozen)."""
        return recorded.Verdict(tuple(self.reasons), tuple(self.not_judged))

    @classmethod
    def of(cls, verdict: recorded.Verdict) -> "Verdict":
        """A builder that goes on from a recorded verdict."""
        return cls(list(verdict.reasons), list(verdict.not_judged))


@dataclass
class ContentionReading:
    share: float | None  # fraction of the CPUs' time used by other processes, in [0, 1]
    cpus: int
    seconds: float
    gpu_other_processes: int | None = None  # other processes on the benchmark's GPU; None: not a GPU run, or unknown

    def to_dict(self) -> dict:
        return as_json(self, (("other_processes_cpu_share", "share"), "cpus", "seconds", "gpu_other_processes"))


@dataclass
class PhaseResult:
    phase: str
    samples: int
    batches: int
    whole_time_s: float
    core_time_s: float
    foo_time_s: float
    warmup_batches: int
    accuracy: float | None
    latency: LatencyStats | None
    core_latencies_ns: list[int] = field(default_factory=list, repr=False)
    passes: int = 1
    window_qps: list[float] = field(default_factory=list)
    contention: ContentionReading | None = None
    verdict: Verdict = field(default_factory=Verdict)
    span_unix: tuple[float, float] | None = None  # wall-clock (time.time) start and end of the measured loop
    core_qps_ci95: list[float] | None = None
    whole_qps_ci95: list[float] | None = None
    precision: dict | None = None  # tools.measure.precision.precision_block

    @property
    def whole_qps(self) -> float | None:
        return self.samples / self.whole_time_s if self.whole_time_s > 0 else None

    @property
    def core_qps(self) -> float | None:
        return self.samples / self.core_time_s if self.core_time_s > 0 else None
