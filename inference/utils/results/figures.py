"""The figures of a summary record that runs are compared on, and a record's repetitions merged.

A figure is one number a decision is made on, named by its row and its name:

- ``inference``: ``core qps`` (samples/s) and the ``p50``/``p90``/``p99 ms`` per batch;
- each performance row (``bs 8 offline x1``, ``bs 1 server x1 @40``): ``qps`` (not for a server row,
  whose rate is the target's) and its latency percentiles; a server row's p99 is its headline;
- each LLM row (``llm bs 1 in 128 out 64``, ``llm server @2``): ``TTFT p50 ms``, ``TPOT p50 ms``
  and ``output tokens/s``.
- each load step of a serving run (``concurrency 4``; ``utils/results/serving_compare.py``):
  ``output tokens/s``, ``requests/s``, ``goodput requests/s``, ``TTFT p50/p90 ms``, ``TPOT p50 ms``
  and ``E2E p90 ms``.

Whether higher is better, and the unit, are bound to the figure's name here, once (``KINDS``).
With ``run.py --repeat N`` a case runs N times; ``merge_repetitions`` turns the N records into
one whose headline figures are the repetitions' geometric means with their t-interval
(``decide.across``), and whose ``repetitions`` block keeps every repetition's figure with its
window's own interval (docs/result_schema.md, "repetitions").
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Iterable

from common.record import Key
from common.scenario import scenario
from utils.results.decide import Sample, across


@dataclass(frozen=True)
class Kind:
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
# a throughput missing in B is a missing figure
THROUGHPUTS = ("core qps", "qps", "output tokens/s", "requests/s", "goodput requests/s")


def row_key(row: dict) -> tuple:
    """A performance row's identity across runs."""
    return (
        row["batch_size"],
        row["scenario"],
        row["clients"],
        row.get("target_qps"),
        row.get("load_generator") or "inferperf",
    )


def row_label(row: dict) -> str:
    generator = row.get("load_generator") or "inferperf"
    rate = "" if row.get("target_qps") is None else f" @{row['target_qps']:g}"
    return f"bs {row['batch_size']} {row['scenario']} x{row['clients']}{rate}" + (
        "" if generator == "inferperf" else f" {generator}"
    )


def llm_label(row: dict) -> str:
    chosen = scenario(row["scenario"])
    if chosen.scheduled:
        return f"llm {chosen.name} @{row.get('target_qps', 0):g}"
    return f"llm bs {row.get('batch_size')} in {row.get('input_length')} out {row.get('output_length')}"


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


def _valid(verdict: Any) -> bool:
    return not isinstance(verdict, dict) or bool(verdict.get("valid", True))


def record_figures(record: dict) -> dict[tuple[str, str], Sample]:
    """Every figure of one record (one repetition), by (row, figure); figures without a value are left out."""
    found: dict[tuple[str, str], Sample] = {}

    def add(row: str, figure: str, value: Any, interval: Any, valid: bool) -> None:
        sample = figure_sample(value, interval, valid)
        if sample is not None:
            found[(row, figure)] = sample

    whole = _valid(record.get("verdict"))
    add(
        "inference",
        "core qps",
        record.get(Key.INFER_CORE_QPS),
        (record.get("ci95") or {}).get(Key.INFER_CORE_QPS),
        whole,
    )
    latency, intervals = record.get("latency_ms") or {}, record.get("latency_ci95") or {}
    for name in PERCENTILES:
        add("inference", f"{name} ms", latency.get(name), intervals.get(name), whole)
    for row in record.get("performance") or []:
        label, valid = row_label(row), _valid(row.get("verdict"))
        if scenario(row["scenario"]).judges_throughput:
            add(label, "qps", row.get("qps"), row.get("qps_ci95"), valid)
        latency, intervals = row.get("latency_ms") or {}, row.get("latency_ci95") or {}
        for name in PERCENTILES:
            add(label, f"{name} ms", latency.get(name), intervals.get(name), valid)
    llm = record.get("llm") or {}
    for row in [*(llm.get("table") or []), *(llm.get("server") or [])]:
        label, valid = llm_label(row), _valid(row.get("verdict"))
        for figure, block in (("TTFT p50 ms", row.get("ttft_ms")), ("TPOT p50 ms", row.get("tpot_ms"))):
            block = block or {}
            add(label, figure, block.get("p50"), (block.get("ci95") or {}).get("p50"), valid)
        add(label, "output tokens/s", row.get("output_tokens_per_s"), row.get("output_tokens_per_s_ci95"), valid)
    return found


def repetition_figures(record: dict) -> dict[tuple[str, str], list[Sample]]:
    """Every figure of a summary record as its repetitions' samples: the ``repetitions`` block's
    where the case ran more than once, else the record's own figures, one sample each."""
    block = record.get("repetitions")
    if not isinstance(block, dict) or not block.get("figures"):
        return {key: [sample] for key, sample in record_figures(record).items()}
    out: dict[tuple[str, str], list[Sample]] = {}
    for entry in block["figures"]:
        samples = [
            Sample(float(v), _interval(i), bool(ok))
            for v, i, ok in zip(entry["values"], entry["intervals"], entry["valid"])
            if _number(v) is not None
        ]
        if samples:
            out[(entry["row"], entry["figure"])] = samples
    return out


# ---- a case run N times: one record --------------------------------------------------------------
def merge_repetitions(records: list[dict]) -> dict:
    """The records of one case x host, one per repetition in order, as one record (module
    docstring). A repetition that failed fails the record (named with its number); any
    repetition's INVALID verdict makes it INVALID, its reasons prefixed with the repetition."""
    if len(records) == 1:
        return records[0]
    merged = copy.deepcopy(records[0])
    failed = [(k, r) for k, r in enumerate(records, 1) if r["status"] != "success"]
    block: dict[str, Any] = {
        "count": len(records),
        "log_dirs": [r.get("log_dir") for r in records],
        "wall_time_s": [r.get("wall_time_s") for r in records],
        "figures": [],
    }
    merged["repetitions"] = block
    if failed:
        k, first = failed[0]
        merged.update(
            status=first["status"],
            failed_step=first["failed_step"],
            error=f"repetition {k} of {len(records)}: {first['error']}",
        )
        merged["verdict"] = None
        return merged
    merged["verdict"] = _merged_verdict(records)
    per_rep = [record_figures(r) for r in records]
    keys = [key for key in per_rep[0] if all(key in figures for figures in per_rep)]
    for key in keys:
        samples = [figures[key] for figures in per_rep]
        mean, interval, spread = across(samples)
        block["figures"].append(
            {
                "row": key[0],
                "figure": key[1],
                "unit": KINDS[key[1]].unit,
                "higher_is_better": KINDS[key[1]].higher_is_better,
                "values": [s.value for s in samples],
                "intervals": [list(s.interval) if s.interval else None for s in samples],
                "valid": [s.valid for s in samples],
                "geomean": mean,
                "ci95": list(interval) if interval else None,
                "spread": spread,
            }
        )
        _set_headline(merged, key, mean, interval)
    return merged


def _merged_verdict(records: list[dict]) -> dict | None:
    verdicts = [r.get("verdict") for r in records]
    if all(v is None for v in verdicts):
        return None
    reasons = [f"repetition {k}: {reason}" for k, v in enumerate(verdicts, 1) if v for reason in v.get("reasons") or []]
    merged = dict(verdicts[0] or {})
    merged.update(valid=all(_valid(v) for v in verdicts), reasons=reasons)
    return merged


def _set_headline(record: dict, key: tuple[str, str], mean: float, interval: tuple[float, float] | None) -> None:
    """The record's figure becomes the repetitions' geometric mean, its ± their t-interval."""
    row, figure = key
    ci = list(interval) if interval else None
    if row == "inference":
        if figure == "core qps":
            record["MFU"] = _scaled(record.get("MFU"), mean, record.get(Key.INFER_CORE_QPS))
            record[Key.INFER_CORE_QPS] = mean
            record["ci95"] = {**(record.get("ci95") or {}), Key.INFER_CORE_QPS: ci}
        else:
            name = figure.split()[0]
            record["latency_ms"] = {**(record.get("latency_ms") or {}), name: mean}
            record["latency_ci95"] = {**(record.get("latency_ci95") or {}), name: ci}
        return
    for perf_row in _rows(record, row):
        if figure == "qps":
            perf_row.update(qps=mean, qps_ci95=ci, MFU=_scaled(perf_row.get("MFU"), mean, perf_row.get("qps")))
        elif figure.endswith(" ms") and figure.split()[0] in PERCENTILES:
            name = figure.split()[0]
            perf_row["latency_ms"] = {**(perf_row.get("latency_ms") or {}), name: mean}
            perf_row["latency_ci95"] = {**(perf_row.get("latency_ci95") or {}), name: ci}


def _scaled(mfu: Any, new: float, old: Any) -> Any:
    """MFU is FLOPs x throughput / peak: it follows the throughput it was computed from."""
    return mfu * new / old if isinstance(mfu, (int, float)) and isinstance(old, (int, float)) and old > 0 else mfu


def _rows(record: dict, label: str) -> Iterable[dict]:
    return [row for row in record.get("performance") or [] if row_label(row) == label]
