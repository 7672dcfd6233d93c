"""What a run runs, in which order: every case, variant and repetition, interleaved.

``run.py --repeat N`` (or a case config's ``repetitions``) runs each case N times, each time a
fresh ``run_inference.py`` process (a fresh container in MODE docker): the noise between runs
(docs/measurement.md, "Between runs") is only seen by separate processes, so a repetition is
never a second window inside the same one. Repetitions are interleaved across the run's cases
(repetition 1 of every case, then repetition 2 ...), so that a slow minute of the machine falls
on all of them rather than on one case's repetitions.

``run.py ab`` runs two variants of the same cases (``--set-a``/``--set-b``): in each repetition
every case runs as A then B, and the next repetition as B then A (ABBA), so that a machine that
drifts steadily during the run favours neither.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from common.errors import ConfigError
from common.values import MAX_REPETITIONS
from utils.case_specs import CaseSpec

T = TypeVar("T")
MAX_REPEAT = MAX_REPETITIONS  # --repeat: the case config's key repetitions has the same bound
# run.py ab's repetitions per side where neither --repeat nor a case config says: the smallest N at which
# its paired decision found a 15 % slower engine in >= 90 % of decisions with <= 5 % false alarms on the
# 2-core machine (bench/calibration_analysis.py; docs/measurement.md, "Calibration"). A plain run's is 1.
AB_REPETITIONS = 8


@dataclass(frozen=True)
class Variant:
    """One variant of the run's cases and the run folder its results go to."""

    name: str  # "" for a plain run; "A" or "B" for run.py ab
    run_dir: Path
    cases: list[CaseSpec]


@dataclass(frozen=True)
class Planned:
    """One case run: which variant's spec, into which run folder, as which repetition (from 1)."""

    spec: CaseSpec
    run_dir: Path
    repetition: int
    variant: str = ""


def parse_repeat(text: str | None) -> int | None:
    """``--repeat N``: a whole number from 1 to MAX_REPEAT, else one line (exit 2)."""
    if text is None:
        return None
    try:
        value = int(text, 10)
    except ValueError:
        raise ConfigError(f"--repeat: must be a whole number of repetitions, got {text!r}") from None
    if not 1 <= value <= MAX_REPEAT:
        raise ConfigError(f"--repeat: must be from 1 to {MAX_REPEAT}, got {value}")
    return value


def variant_order(variants: list[T], repetition: int) -> list[T]:
    """The order the variants run in repetition ``repetition`` (from 1): as given, then reversed in the
    next (ABBA for two variants; module docstring)."""
    return variants if repetition % 2 else list(reversed(variants))


def build_plan(variants: list[Variant], repetitions: dict[str, int], default: int = 1) -> list[Planned]:
    """Every case run in order (module docstring). ``repetitions`` maps a case key to its count
    (``default`` when missing: 1, or ``AB_REPETITIONS`` for run.py ab); a case with fewer repetitions
    than another drops out of the later rounds."""
    rounds = max([repetitions.get(spec.key, default) for v in variants for spec in v.cases], default=1)
    plan: list[Planned] = []
    for repetition in range(1, rounds + 1):
        order = variant_order(variants, repetition)
        for index in range(len(variants[0].cases)):
            for variant in order:
                spec = variant.cases[index]
                if repetition <= repetitions.get(spec.key, default):
                    plan.append(Planned(spec, variant.run_dir, repetition, variant.name))
    return plan


def with_sets(cases: list[CaseSpec], sets: list[str]) -> list[CaseSpec]:
    """The cases with a variant's ``--set`` items added to each case's own (they win over the run's)."""
    return [dataclasses.replace(spec, workload_overrides=spec.workload_overrides + tuple(sets)) for spec in cases]


def check_variants(set_a: list[str], set_b: list[str]) -> None:
    """``run.py ab`` needs two different variants: the same ``--set`` items in any order are one."""
    if not set_a and not set_b:
        raise ConfigError("ab: give the variants with --set-a KEY=VALUE and --set-b KEY=VALUE")
    if sorted(set_a) == sorted(set_b):
        raise ConfigError(
            f"ab: --set-a and --set-b are the same variant ({' '.join(sorted(set_a)) or 'no --set'}): nothing to "
            "compare"
        )
