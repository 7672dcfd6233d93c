"""A serving run (``run.py --endpoint``) read as a run of cases, for ``run.py compare`` and the history.

A serving run's ``summary.json`` is a ``common.serving_record.ServingSummary`` (``"kind": "serving"``):
one typed row (``ServingStep``) per load step, and, where the step plan ran more than once
(``--repeat N``, each side of ``run.py ab``), its ``repetitions`` block. ``serving_run`` reads it as
one record of a run of cases (``common.serving_record.as_record``: ``serving:endpoint`` on its
endpoint, its sweep's steps as ``llm.serving`` rows), whose figures are read as every record's
(``utils/results/figures.py::repetition_figures``: each step's output tokens/s and requests/s, goodput
requests/s where an SLO was set, TTFT p50/p90, TPOT p50 and E2E p90 ms, with their repetitions).
Steps are matched across runs by their label (``concurrency 4``, ``rate 2/s poisson``); goodput is
compared only when both runs set the same SLO. The capacity search's probes are not rows: they ran
at loads the bisection chose, which differ between runs.

This module reads, it does not decide: ``compare.py`` decides the figures as for every run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from common.record import RecordError, Verdict
from common.serving_record import SERVING, ServingSummary, as_record
from common.summary_record import SummaryRecord
from utils.results.decide import Sample
from utils.results.figures import merge_repetitions, repetition_figures


def is_serving_run(run_dir: Path) -> bool:
    """Whether ``run_dir``'s summary.json says it is a serving run (False when it cannot be read:
    compare then says why, as for any run)."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(summary, dict) and summary.get("kind") == SERVING


def read_serving_summary(run_dir: Path) -> ServingSummary:
    """``run_dir``'s summary.json, typed; ValueError (one line, naming the file and key) when it cannot be."""
    path = run_dir / "summary.json"
    try:
        return ServingSummary.from_json(json.loads(path.read_text(encoding="utf-8")), str(path))
    except FileNotFoundError:
        raise ValueError(f"{run_dir} is a serving run without summary.json") from None
    except (OSError, ValueError, RecursionError) as exc:  # RecordError is a ValueError: it names the key
        raise ValueError(str(exc) if isinstance(exc, RecordError) else f"{path} cannot be read: {exc}") from None


@dataclass(frozen=True)
class ServingRun:
    """A serving run as compare and the history read it: its summary and its record of a run of cases."""

    summary: ServingSummary
    record: SummaryRecord

    @property
    def name(self) -> str:
        return self.record.host

    @property
    def steps(self) -> list[str]:
        return [step.label for step in self.summary.steps]

    @property
    def workload(self) -> dict:
        return {"api": self.summary.api, "seed": self.summary.seed} | dict(self.summary.workload)

    def failed(self) -> dict[str, str]:
        """step -> "3 of 64 requests failed (http_500: 3)", for each step with a failed request."""
        out = {}
        for step in self.summary.steps:
            if step.failed:
                kinds = ", ".join(f"{kind}: {count}" for kind, count in sorted(step.errors.items()))
                out[step.label] = f"{step.failed} of {step.requests} requests failed" + (f" ({kinds})" if kinds else "")
        return out


def read_serving_run(run_dir: Path) -> ServingRun:
    """``run_dir``'s summary.json as compare reads it; ValueError (one line) when it cannot be read."""
    summary = read_serving_summary(run_dir)
    return ServingRun(summary, as_record(summary, str(run_dir)))


Figures = dict[tuple[str, str], list[Sample]]  # (row, figure) -> its repetitions, as compare.py decides them


def serving_figures(a: ServingRun, b: ServingRun) -> tuple[Figures, Figures, list[str]]:
    """Both runs' figures as compare's repetition samples, and notes on what was left out or differs.
    Goodput is compared only under the same SLO in both runs."""
    notes: list[str] = []
    same_slo = a.summary.slo == b.summary.slo

    def samples(run: ServingRun) -> Figures:
        return {
            key: s for key, s in repetition_figures(run.record).items() if same_slo or key[1] != "goodput requests/s"
        }

    if not same_slo and (a.summary.slo or b.summary.slo):
        notes.append(
            f"goodput not compared: the runs' SLOs differ (A: {_slo(a.summary.slo)}; B: {_slo(b.summary.slo)})"
        )
    differ = [key for key in sorted(set(a.workload) | set(b.workload)) if a.workload.get(key) != b.workload.get(key)]
    if differ:
        shown = "; ".join(f"{key} {a.workload.get(key)!r} vs {b.workload.get(key)!r}" for key in differ)
        notes.append(f"the runs sent different requests ({shown}): their figures measure different work")
    return samples(a), samples(b), notes


def _slo(slo: Any) -> str:
    if not slo:
        return "none"
    return ", ".join(f"{k}={v:g}" for k, v in slo.items() if isinstance(v, (int, float)))


def merge_serving(summaries: list[ServingSummary], folders: list[Path], run_id: str) -> ServingSummary:
    """A serving run's repetitions (``--repeat N``: its step plan run N times, each in a folder) as one
    summary: each step's figures the repetitions' geometric means with their t-interval and its verdict
    every repetition's reasons (``utils/results/figures.py::merge_repetitions``, as a case's), the other
    figures, the capacity search and its probes the first repetition's, and the ``repetitions`` block."""
    first = summaries[0]
    merged = merge_repetitions([as_record(s, str(folder)) for s, folder in zip(summaries, folders)])
    steps = merged.llm.serving if merged.llm else ()
    if len(summaries) > 1:
        steps = tuple(replace(step, verdict=_verdict(step.label, summaries)) for step in steps)
    probes = tuple(row for row in first.rows if row.phase == "capacity")
    return replace(first, run_id=run_id, rows=(*steps, *probes), repetitions=merged.repetitions)


def _verdict(label: str, summaries: list[ServingSummary]) -> Verdict:
    """A step's verdict over its repetitions: every repetition's reasons, each named with its number."""
    verdicts = [(k, s.verdict) for k, summary in enumerate(summaries, 1) for s in summary.steps if s.label == label]
    return Verdict(
        reasons=tuple(f"repetition {k}: {reason}" for k, v in verdicts for reason in v.reasons),
        not_judged=tuple(dict.fromkeys(what for _, v in verdicts for what in v.not_judged)),
    )
