"""The figures of a serving run (``run.py --endpoint``) that ``run.py compare`` decides on.

A serving run's ``summary.json`` is a ``common.serving_record.ServingSummary`` (``"kind": "serving"``):
one typed row (``ServingStep``) per load step. Each sweep step (``concurrency 4``, ``rate 2/s
poisson``) is a row, matched across runs by its label, and gives the figures of
``utils/results/figures.py::step_samples``, as a serving vendor's steps: output tokens/s and
requests/s (with their window's 95 % interval), goodput requests/s where an SLO was set (compared
only when both runs set the same SLO), and TTFT p50/p90, TPOT p50 and E2E p90 ms (with their
percentile intervals; a percentile below its floor, such as p90 under 64 requests, is left out).

Each figure's direction and unit are ``utils/results/figures.py``'s ``KINDS``. A serving run has
one repetition per step, made at another time than the other run's, so compare decides each figure
with the between-run noise of its series in the results history, as for any two runs made at
different times (every serving run lands in the history too). A step that is INVALID
(drift, no request completed, not precise enough) makes its figures "not comparable"; a step
whose requests failed in B, or a step of A that B lacks, is a problem (exit 3). The capacity
search's probes are not rows: they ran at loads the bisection chose, which differ between runs.

This module reads, it does not decide: ``compare.py`` decides the figures as for every run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.record import RecordError
from common.serving_record import SERVING, ServingStep, ServingSummary
from utils.results.decide import Sample
from utils.results.figures import step_samples


def is_serving_run(run_dir: Path) -> bool:
    """Whether ``run_dir``'s summary.json says it is a serving run (False when it cannot be read:
    compare then says why, as for any run)."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(summary, dict) and summary.get("kind") == SERVING


@dataclass
class ServingRun:
    """A serving run as compare reads it: where it measured, and each step's figures."""

    path: Path
    endpoint: str
    served_model: str
    slo: dict | None
    workload: dict
    figures: dict[tuple[str, str], Sample] = field(default_factory=dict)
    steps: list[str] = field(default_factory=list)  # the rows, in the run's order
    failed: dict[str, str] = field(default_factory=dict)  # step -> "3 of 64 requests failed (http_500: 3)"

    @property
    def name(self) -> str:
        return f"{self.served_model} at {self.endpoint}"


def read_serving_summary(run_dir: Path) -> ServingSummary:
    """``run_dir``'s summary.json, typed; ValueError (one line, naming the file and key) when it cannot be."""
    path = run_dir / "summary.json"
    try:
        return ServingSummary.from_json(json.loads(path.read_text(encoding="utf-8")), str(path))
    except FileNotFoundError:
        raise ValueError(f"{run_dir} is a serving run without summary.json") from None
    except (OSError, ValueError, RecursionError) as exc:  # RecordError is a ValueError: it names the key
        raise ValueError(str(exc) if isinstance(exc, RecordError) else f"{path} cannot be read: {exc}") from None


def read_serving_run(run_dir: Path) -> ServingRun:
    """``run_dir``'s summary.json as compare reads it; ValueError (one line) when it cannot be read."""
    summary = read_serving_summary(run_dir)
    run = ServingRun(
        run_dir / "summary.json",
        summary.endpoint,
        summary.served_model,
        summary.slo,
        {"api": summary.api, "seed": summary.seed} | dict(summary.workload),
    )
    for step in summary.steps:
        _read_step(run, step)
    return run


def _read_step(run: ServingRun, step: ServingStep) -> None:
    run.steps.append(step.label)
    if step.failed:
        kinds = ", ".join(f"{kind}: {count}" for kind, count in sorted(step.errors.items()))
        run.failed[step.label] = f"{step.failed} of {step.requests} requests failed" + (f" ({kinds})" if kinds else "")
    run.figures.update(step_samples(step))


Figures = dict[tuple[str, str], list[Sample]]  # (row, figure) -> its repetitions, as compare.py decides them


def serving_figures(a: ServingRun, b: ServingRun) -> tuple[Figures, Figures, list[str]]:
    """Both runs' figures as compare's repetition samples (one each), and notes on what was left
    out or differs. Goodput is compared only under the same SLO in both runs."""
    notes: list[str] = []
    same_slo = a.slo == b.slo

    def samples(run: ServingRun) -> Figures:
        return {key: [sample] for key, sample in run.figures.items() if same_slo or key[1] != "goodput requests/s"}

    if not same_slo and (a.slo or b.slo):
        notes.append(f"goodput not compared: the runs' SLOs differ (A: {_slo(a.slo)}; B: {_slo(b.slo)})")
    differ = [key for key in sorted(set(a.workload) | set(b.workload)) if a.workload.get(key) != b.workload.get(key)]
    if differ:
        shown = "; ".join(f"{key} {a.workload.get(key)!r} vs {b.workload.get(key)!r}" for key in differ)
        notes.append(f"the runs sent different requests ({shown}): their figures measure different work")
    return samples(a), samples(b), notes


def _slo(slo: Any) -> str:
    if not slo:
        return "none"
    return ", ".join(f"{k}={v:g}" for k, v in slo.items() if isinstance(v, (int, float)))
