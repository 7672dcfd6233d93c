"""The capacity search: the largest load (concurrency, or request rate) whose step meets the SLO.

Bisection between ``low`` and ``high``. A probe runs one whole step at that load and answers
``meets``, ``misses`` or ``undecided`` (``figures.slo_verdict``); undecided counts as a miss,
so the capacity found is one the SLO was shown to hold at. Concurrency is searched over the
integers until the bracket closes (high = low + 1); a rate until high / low <= 1 + ``rtol``.

The answer: ``capacity`` (the largest load shown to meet, or None when even ``low`` did not),
``interval`` [capacity, the smallest load shown not to meet] (``above_range``: ``high`` still
met, the capacity is at least ``high``), and ``probes``, every probe in the order it ran.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

Probe = Callable[[float], str]  # load -> "meets" | "misses" | "undecided"


@dataclass
class Capacity:
    kind: str  # concurrency | rate
    capacity: float | None
    interval: list[float | None]
    probes: list[dict] = field(default_factory=list)
    above_range: bool = False

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "capacity": self.capacity,
            "interval": self.interval,
            "probes": len(self.probes),
            "probed": self.probes,
            "above_range": self.above_range,
        }


def search(kind: str, probe: Probe, low: float, high: float, rtol: float = 0.1, max_probes: int = 12) -> Capacity:
    integer = kind == "concurrency"
    probes: list[dict] = []

    def ask(load: float) -> bool:
        answer = probe(load)
        probes.append({"load": load, "answer": answer})
        return answer == "meets"

    if not ask(low):
        return Capacity(kind, None, [None, low], probes)
    if ask(high):
        return Capacity(kind, high, [high, None], probes, above_range=True)
    good, bad = low, high
    while len(probes) < max_probes:
        if integer:
            if bad - good <= 1:
                break
            mid = (good + bad) // 2
        else:
            if bad / good <= 1 + rtol:
                break
            mid = (good * bad) ** 0.5  # geometric: a rate's scale
        if ask(mid):
            good = mid
        else:
            bad = mid
    return Capacity(kind, good, [good, bad], probes)
