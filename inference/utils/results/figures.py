"""The figures of a summary record that runs are compared on, and a record's repetitions merged.

A figure is one number a decision is made on, named by its row and its name:

- ``inference``: ``core qps`` (samples/s) and the ``p50``/``p90``/``p99 ms`` per batch;
- each performance row (``bs 8 offline x1``, ``bs 1 server x1 @40``): ``qps`` (not for a server row,
  whose rate is the target's) and its latency percentiles; a server row's p99 is its headline;
- each LLM row (``llm bs 1 in 128 out 64``, ``llm server @2``): ``TTFT p50 ms``, ``TPOT p50 ms``
  and ``output tokens/s``.
- each load step (``common.record.ServingStep``, ``concurrency 4``) of a serving run
  (``utils/results/serving_compare.py``) and of a serving vendor's case (``llm.serving``): ``output
  tokens/s``, ``requests/s``,
  ``goodput requests/s`` (a serving run's, under an SLO), ``TTFT p50/p90 ms``, ``TPOT p50 ms`` and
  ``E2E p90 ms`` (``common.record.step_figures``).

Whether higher is better, and the unit, are bound to the figure's name here, once (``KINDS``).
With ``run.py --repeat N`` a case runs N times; ``merge_repetitions`` turns the N records into
one whose headline figures are the repetitions' geometric means with their t-interval
(``decide.across``), and whose ``repetitions`` block keeps every repetition's figure with its
window's own interval (docs/result_schema.md, "repetitions"). A serving run repeated (``run.py
--endpoint --repeat N``) is merged the same way, each repetition read as a record
(``common.serving_record.as_record``), its steps' headline figures the geometric means.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from common.record import LATENCY_FIGURES, THROUGHPUT_FIGURES, Key, LatencyBlock, LLMRow, ServingStep, Verdict
from common.scenario import scenario
from common.stats import relative_half_width
from common.summary_record import RepetitionFigure, Repetitions, Row, SummaryRecord, SummaryRow
from utils.results.decide import Sample, across


@dataclass(frozen=True)
class Kind:
    """A figure's direction and unit, bound once to its name."""

    higher_is_better: bool
    unit: str


KINDS: dict[str, Kind] = {
    "core qps": Kind(True, "samples/s"),
    "qps": Kind(True, "samples/s"),
    "p50 ms": Kind(False, "ms"),
    "p90 ms": Kind(False, "ms"),
    "p99 ms": Kind(False, "ms"),
    "TTFT p50 ms": Kind(False, "ms"),
    "TPOT p50 ms": Kind(False, "ms"),
    "output tokens/s": Kind(True, "tokens/s"),
    # a serving run's load step (utils/results/serving_compare.py)
    "requests/s": Kind(True, "requests/s"),
    "goodput requests/s": Kind(True, "requests/s"),
    "TTFT p90 ms": Kind(False, "ms"),
    "E2E p90 ms": Kind(False, "ms"),
}
PERCENTILES = ("p50", "p90", "p99")
CORE_QPS = Key.INFER_CORE_QPS
# a throughput missing in B is a missing figure
THROUGHPUTS = ("core qps", "qps", "output tokens/s", "requests/s", "goodput requests/s")


def row_label(row: Row) -> str:
    generator = row.load_generator or "inferperf"
    rate = "" if row.target_qps is None else f" @{row.target_qps:g}"
    return f"bs {row.batch_size} {row.scenario} x{row.clients}{rate}" + (
        "" if generator == "inferperf" else f" {generator}"
    )


def llm_label(row: LLMRow) -> str:
    chosen = scenario(row.scenario)
    if chosen.scheduled:
        return f"llm {chosen.name} @{row.target_qps or 0:g}"
    return f"llm bs {row.batch_size} in {row.input_length} out {row.output_length}"


def _interval(value: Any) -> tuple[float, float] | None:
    """``[lo, hi]`` as a pair of positive finite numbers with lo <= hi, else None."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return None
    if not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf") for v in value
    ):
        return None
    return (float(value[0]), float(value[1])) if value[0] <= value[1] else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value == float("inf"):
        return None
    return float(value)


def figure_sample(value: Any, interval: Any, valid: bool) -> Sample | None:
    """One repetition's figure: ``value`` with its 95 % interval when both are well formed; None
    without a positive, finite value."""
    number = _number(value)
    return None if number is None else Sample(number, _interval(interval), valid)


def _valid(verdict: Verdict | None) -> bool:
    return verdict is None or verdict.valid


def _percentile(latency: LatencyBlock | None, name: str) -> float | None:
    return getattr(latency, name) if latency is not None else None


def step_samples(step: ServingStep) -> dict[tuple[str, str], Sample]:
    """A served LLM's load step's figures (``ServingStep.figures``), by (its label, figure): a serving
    vendor's case's and a serving run's (``serving_compare.py``) alike; figures without a value left out."""
    found = {}
    for figure, (value, interval) in step.figures().items():
        sample = figure_sample(value, interval, step.verdict.valid)
        if sample is not None:
            found[(step.label, figure)] = sample
    return found


def record_figures(record: SummaryRecord) -> dict[tuple[str, str], Sample]:
    """Every figure of one record (one repetition), by (row, figure); figures without a value are left out."""
    found: dict[tuple[str, str], Sample] = {}

    def add(row: str, figure: str, value: Any, interval: Any, valid: bool) -> None:
        sample = figure_sample(value, interval, valid)
        if sample is not None:
            found[(row, figure)] = sample

    whole = _valid(record.verdict)
    add("inference", "core qps", record.infer_core_qps, (record.ci95 or {}).get(CORE_QPS), whole)
    intervals = record.latency_ci95 or {}
    for name in PERCENTILES:
        add("inference", f"{name} ms", _percentile(record.latency_ms, name), intervals.get(name), whole)
    for row in record.performance:
        label, valid = row_label(row), row.verdict.valid
        if scenario(row.scenario).judges_throughput:
            add(label, "qps", row.qps, row.qps_ci95, valid)
        intervals = row.latency_ci95 or {}
        for name in PERCENTILES:
            add(label, f"{name} ms", _percentile(row.latency_ms, name), intervals.get(name), valid)
    for llm_row in record.llm.rows if record.llm else ():
        label, valid = llm_label(llm_row), llm_row.verdict.valid
        for figure, block in (("TTFT p50 ms", llm_row.ttft_ms), ("TPOT p50 ms", llm_row.tpot_ms)):
            add(label, figure, (block or {}).get("p50"), ((block or {}).get("ci95") or {}).get("p50"), valid)
        add(label, "output tokens/s", llm_row.output_tokens_per_s, llm_row.output_tokens_per_s_ci95, valid)
    for step in record.llm.serving if record.llm else ():  # a serving vendor's load steps: run.py --endpoint's rows
        found.update(step_samples(step))
    return found


def repetition_figures(record: SummaryRecord) -> dict[tuple[str, str], list[Sample]]:
    """Every figure of a summary record as its repetitions' samples: the ``repetitions`` block's
    where the case ran more than once, else the record's own figures, one sample each."""
    block = record.repetitions
    if block is None or not block.figures:
        return {key: [sample] for key, sample in record_figures(record).items()}
    out: dict[tuple[str, str], list[Sample]] = {}
    for entry in block.figures:
        samples = [
            Sample(float(v), _interval(i), bool(ok))
            for v, i, ok in zip(entry.values, entry.intervals, entry.valid)
            if _number(v) is not None
        ]
        if samples:
            out[(entry.row, entry.figure)] = samples
    return out


# ---- a case run N times: one record --------------------------------------------------------------
def merge_repetitions(records: list[SummaryRecord]) -> SummaryRecord:
    """The records of one case x host, one per repetition in order, as one record (module
    docstring). A repetition that failed fails the record (named with its number); any
    repetition's INVALID verdict makes it INVALID, its reasons prefixed with the repetition."""
    if len(records) == 1:
        return records[0]
    first = records[0]
    block = Repetitions(
        count=len(records), log_dirs=[r.log_dir for r in records], wall_time_s=[r.wall_time_s for r in records]
    )
    failed = [(k, r) for k, r in enumerate(records, 1) if not r.succeeded]
    if failed:
        k, first_failed = failed[0]
        return replace(
            first,
            status=first_failed.status,
            failed_step=first_failed.failed_step,
            error=f"repetition {k} of {len(records)}: {first_failed.error}",
            verdict=None,
            repetitions=block,
        )
    merged = replace(first, verdict=_merged_verdict(records))
    per_rep = [record_figures(r) for r in records]
    keys = [key for key in per_rep[0] if all(key in figures for figures in per_rep)]
    figures: list[RepetitionFigure] = []
    for key in keys:
        samples = [figures_of[key] for figures_of in per_rep]
        mean, interval, spread = across(samples)
        kind = KINDS[key[1]]
        figures.append(
            RepetitionFigure(
                row=key[0],
                figure=key[1],
                unit=kind.unit,
                higher_is_better=kind.higher_is_better,
                values=[s.value for s in samples],
                intervals=[list(s.interval) if s.interval else None for s in samples],
                valid=[s.valid for s in samples],
                geomean=mean,
                ci95=list(interval) if interval else None,
                spread=spread,
            )
        )
        merged = _set_headline(merged, key, mean, interval)
    return replace(merged, repetitions=replace(block, figures=tuple(figures)))


def _merged_verdict(records: list[SummaryRecord]) -> Verdict | None:
    verdicts = [r.verdict for r in records]
    if all(v is None for v in verdicts):
        return None
    reasons = tuple(f"repetition {k}: {reason}" for k, v in enumerate(verdicts, 1) if v for reason in v.reasons)
    return Verdict(reasons=reasons, not_judged=verdicts[0].not_judged if verdicts[0] else ())


def _set_headline(
    record: SummaryRecord, key: tuple[str, str], mean: float, interval: tuple[float, float] | None
) -> SummaryRecord:
    """The record's figure becomes the repetitions' geometric mean, its ± their t-interval."""
    row, figure = key
    ci = list(interval) if interval else None
    if row == "inference":
        if figure == "core qps":
            return replace(
                record,
                mfu=_scaled(record.mfu, mean, record.infer_core_qps),
                infer_core_qps=mean,
                ci95={**(record.ci95 or {}), CORE_QPS: ci},
            )
        name = figure.split()[0]
        return replace(
            record,
            latency_ms=replace(record.latency_ms or LatencyBlock(), **{name: mean}),
            latency_ci95={**(record.latency_ci95 or {}), name: ci},
        )
    rows = [_row_headline(r, figure, mean, ci) if row_label(r) == row else r for r in record.performance]
    record = replace(record, performance=tuple(rows))
    if record.llm and any(step.label == row for step in record.llm.serving):
        steps = tuple(_step_headline(s, figure, mean, ci) if s.label == row else s for s in record.llm.serving)
        record = replace(record, llm=replace(record.llm, serving=steps))
    return record


def _step_headline(step: ServingStep, figure: str, mean: float, ci: list[float] | None) -> ServingStep:
    """A served LLM's load step with ``figure`` the repetitions' geometric mean, its interval theirs."""
    if figure in THROUGHPUT_FIGURES:
        key = THROUGHPUT_FIGURES[figure]
        width = relative_half_width(mean, ci)
        block = {**step.throughput.get(key, {}), "value": mean, "ci95": ci, "plus_minus": width}
        return replace(step, throughput={**step.throughput, key: block})
    if figure in LATENCY_FIGURES:
        key, name = LATENCY_FIGURES[figure]
        old = getattr(step, key)
        changes: dict[str, Any] = {key: {**old, name: mean, "ci95": {**(old.get("ci95") or {}), name: ci}}}
        return replace(step, **changes)
    return step


def _row_headline(row: Row, figure: str, mean: float, ci: list[float] | None) -> Row:
    if not isinstance(row, SummaryRow):  # an aggregate is summed from merged records, never merged itself
        return row
    if figure == "qps":
        return replace(row, qps=mean, qps_ci95=ci, mfu=_scaled(row.mfu, mean, row.qps))
    if figure.endswith(" ms") and figure.split()[0] in PERCENTILES:
        name = figure.split()[0]
        return replace(
            row,
            latency_ms=replace(row.latency_ms, **{name: mean}),
            latency_ci95={**(row.latency_ci95 or {}), name: ci},
        )
    return row


def _scaled(mfu: Any, new: float, old: Any) -> Any:
    """MFU is FLOPs x throughput / peak: it follows the throughput it was computed from."""
    return mfu * new / old if isinstance(mfu, (int, float)) and isinstance(old, (int, float)) and old > 0 else mfu
