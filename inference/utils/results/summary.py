"""Merge every case x host outcome with its monitor analysis into summary.json and summary.md."""

from __future__ import annotations

import importlib
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from loguru import logger

from common import sys_monitor
from common.cells import figure_cell, fmt
from common.energy import energy_block, energy_cell, judged_windows
from common.files import atomic_path, write_json_atomic
from common.mfu import mfu, peak_for, plausible_mfu
from common.record import FLAGPERF_FIELDS, PERCENTILES, CaseResult, Key, LatencyBlock, Verdict
from common.sampler import read_samples
from common.serving_record import ServingSummary, as_record, is_endpoint
from common.stats import MIN_SAMPLES_FOR_PERCENTILE, relative_half_width
from common.summary_record import Summary, SummaryRecord, SummaryRow
from common.vendor_analysis import NO_ANALYSIS, VendorAnalysis
from utils.executors.base import CaseOutcome
from utils.host_config import HostConfig
from utils.results import baselines, llm_summary

# The modules loaded here by name, each formatted from its pattern here and nowhere else, so the
# import-circle test (tests/infra/imports.py) follows every load to the files the pattern matches.
DYNAMIC_IMPORTS = {"analysis": "docker_images.{vendor}.{vendor}_analysis"}


def vendor_analysis(perf_dir: Path, vendor: str, log_path: str) -> VendorAnalysis:
    """Call docker_images/<vendor>/<vendor>_analysis.analysis_log and check its contract.

    Its return shapes are read by ``VendorAnalysis.from_return`` (common/vendor_analysis.py).
    """
    source = f"docker_images/{vendor}/{vendor}_analysis.py"
    if not (perf_dir / source).is_file():
        return NO_ANALYSIS
    module = importlib.import_module(DYNAMIC_IMPORTS["analysis"].format(vendor=vendor))
    analysis = getattr(module, "analysis_log", None)
    if not callable(analysis):
        logger.error(f"{source}: must define analysis_log(path)")
        return NO_ANALYSIS
    try:
        value = analysis(log_path)
    except Exception as exc:
        logger.error(f"{source}: analysis_log({log_path}) failed: {type(exc).__name__}: {exc}")
        return NO_ANALYSIS
    try:
        return VendorAnalysis.from_return(value)
    except ValueError as exc:
        logger.error(f"{source}: {exc}")
        return NO_ANALYSIS


def memory_kind(perf_dir: Path, vendor: str) -> str:
    """What the vendor's memory figures measure (its analysis module's MEMORY_KIND), for the table header;
    a vendor of ``perf_dir`` without an analysis module measures "device memory"."""
    if not (perf_dir / "docker_images" / vendor / f"{vendor}_analysis.py").is_file():
        return "device memory"
    try:
        module = importlib.import_module(DYNAMIC_IMPORTS["analysis"].format(vendor=vendor))
    except ImportError:
        return "device memory"
    return str(getattr(module, "MEMORY_KIND", "device memory"))


def merge_outcome(
    outcome: CaseOutcome, perf_dir: Path, vendor: str, peaks: baselines.MeasuredPeaks | None = None
) -> SummaryRecord:
    """One case x host as a summary record. ``peaks``: the measured peaks cached per host
    fingerprint (utils/results/baselines.py); a match is MFU's denominator instead of the estimate."""
    result = outcome.result
    inference = result.inference if result is not None else None
    latency = (inference.latency_ms if inference else None) or {}
    sys_path = outcome.monitors.get("sys")
    sys_analysis = sys_monitor.analyse(sys_path) if sys_path else None
    used = total = peak = None
    vendor_path = outcome.monitors.get(vendor)
    if vendor_path:
        used, total, peak = vendor_analysis(perf_dir, vendor, vendor_path)
    precision = result.precision if result is not None else None
    peaks = peaks if peaks is not None else baselines.MeasuredPeaks.near(outcome.local_dir)
    peak_flops, estimate, peak_measured = _peak(result, vendor, peak, peaks)
    flops = result.flops if result is not None else None
    record_mfu, record_mfu_note = plausible_mfu(
        mfu(flops, result.infer_core_qps if result is not None else None, peak_flops), estimate, peak_measured
    )
    if record_mfu is None and outcome.status == "success" and flops and vendor_path and not peak_flops:
        logger.warning(
            f"{outcome.case.key} on {outcome.host}: peak FLOPS unknown for precision {precision}; MFU is null"
        )
    bandwidth = peaks.bandwidth(result, vendor) if peaks is not None and result is not None else None
    llm = baselines.add_mbu(  # an LLM case's table and server rows, decode MBU against the measured bandwidth
        llm_summary.llm_record(result, peak_flops, estimate), bandwidth
    )
    return SummaryRecord(
        **_outcome_fields(outcome),
        **_result_fields(outcome),
        latency_ms=LatencyBlock(**{q: latency.get(q) for q in (*PERCENTILES, "mean")}) if latency else None,
        latency_ci95=inference.latency_ci95 if inference else None,
        precision_target=((inference.precision if inference else None) or {}).get("target"),  # the ± asked for
        latency_batches=latency.get("count") if latency else None,
        latency_notes=latency.get("notes", []) if latency else [],
        sys_monitor=sys_analysis,
        vendor_usage_gib=used,
        vendor_max_mem_gib=total,
        peak_flops=peak_flops,
        mfu_is_estimate=estimate,
        peak_measured=peak_measured,
        peak_flops_source=peak_measured or _source(peak),
        mfu=record_mfu,
        mfu_note=record_mfu_note,
        performance=tuple(
            SummaryRow.of(row, *plausible_mfu(mfu(flops, row.qps, peak_flops), estimate, peak_measured))
            for row in (result.performance if result is not None else ())
        ),
        llm=llm,
        energy=record_energy(outcome, vendor),
    )


def _peak(
    result: CaseResult | None, vendor: str, peak: Any, peaks: baselines.MeasuredPeaks | None
) -> tuple[float | None, bool | None, str | None]:
    """The peak FLOPS MFU is taken against (this host's measured one, else the vendor's figure), whether
    it is an estimate, and the measured peak's source."""
    precision = result.precision if result is not None else None
    peak_flops = peak_for(peak, precision)
    measured = peaks.compute_peak(result, vendor, precision) if peaks is not None and result is not None else None
    if measured is not None:
        peak_flops = float(measured["value"])
    estimate = (False if measured else bool(isinstance(peak, dict) and peak.get("estimate"))) if peak_flops else None
    peak_measured = baselines.measured_source(measured, str(precision)) if measured else None
    return peak_flops, estimate, peak_measured


def _outcome_fields(outcome: CaseOutcome) -> dict[str, Any]:
    """A summary record's fields that say how the case ended on its host."""
    return dict(
        case=outcome.case.label,  # the case, or a model entry's file name (docs/onnx_models.md)
        framework=outcome.case.framework,
        host=outcome.host,
        noderank=outcome.noderank,
        status=outcome.status,
        failed_step=outcome.step,
        error=outcome.error,
        exit_code=outcome.exit_code,
        wall_time_s=outcome.wall_time_s,
        log_dir=str(outcome.local_dir),
    )


def _result_fields(outcome: CaseOutcome) -> dict[str, Any]:
    """A summary record's fields taken as they are from the case's result.json (None without one)."""
    result = outcome.result
    fields: dict[str, Any] = {
        name: getattr(result, name) if result is not None else None for _, name in FLAGPERF_FIELDS
    }
    return fields | dict(
        verdict=result.verdict if result is not None and outcome.status == "success" else None,
        accuracy_note=result.accuracy_note if result is not None else None,
        ci95=result.ci95 if result is not None else None,  # the FlagPerf throughputs' intervals, by FlagPerf key
        baseline=result.baseline if result is not None else None,
        best=result.best if result is not None else None,
        numeric=result.numeric if result is not None else None,
        audits=result.audits if result is not None else [],
    )


def record_energy(outcome: CaseOutcome, vendor: str) -> dict | None:
    """The energy of each judged window, from the monitors' counters (common/energy.py); None where no
    monitor ran or the case has no result."""
    if outcome.result is None:
        return None
    sys_path, vendor_path = outcome.monitors.get("sys"), outcome.monitors.get(vendor)
    sys_samples = read_samples(sys_path) if sys_path else []
    # a FlagPerf daemon monitor writes its own log, not JSON samples
    vendor_samples = read_samples(vendor_path) if vendor_path and vendor_path.endswith(".jsonl") else []
    return energy_block(judged_windows(outcome.result), sys_samples, vendor_samples, vendor)


def energy_lines(records: list[SummaryRecord]) -> list[str]:
    """summary.md's energy table: each judged window's joules per query and per sample, from a counter;
    one n/a line per result whose monitors found none."""
    measured = [r for r in records if r.energy]
    if not measured:
        return []

    def counted(r: SummaryRecord) -> bool:
        energy = r.energy or {}
        return energy.get("source") is not None or any(w.get("estimate") for w in energy.get("windows") or [])

    if not any(counted(r) for r in measured):  # no counter anywhere: one line, not a table of n/a
        reasons = sorted({energy_cell({"reason": (r.energy or {}).get("reason")}) for r in measured})
        return ["", f"Energy: {'; '.join(reasons)}."]
    lines = [
        "",
        "Energy per judged window (a hardware counter's difference over the window: NVML on a GPU, RAPL on a "
        "CPU; docs/result_schema.md):",
        "",
        "| case | host | window | J | W | J/query | J/sample | source |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in measured:
        energy = r.energy or {}
        windows = energy.get("windows") or []
        if energy.get("source") is None and not any(w.get("estimate") for w in windows):
            lines.append(
                f"| {r.name} | {r.host} | all | {energy_cell({'reason': energy.get('reason')})} | - | - | - | - |"
            )
            continue
        for w in windows:
            lines.append(
                f"| {r.name} | {r.host} | {w.get('label')} | {_fmt(w.get('joules'), 4)} | {_fmt(w.get('watts'), 4)} | "
                f"{energy_cell(w)} | {energy_cell(w, 'per_sample')} | {w.get('source') or '-'} |"
            )
    return lines


def _source(peak: Any) -> str | None:
    """Where the vendor's peak comes from (its ``source``), when it says."""
    source = peak.get("source") if isinstance(peak, dict) else None
    return source if isinstance(source, str) else None


def summary_records(outcomes: list[CaseOutcome], perf_dir: Path, vendor: str) -> list[SummaryRecord]:
    """One record per case x host, in order: a case run N times (run.py --repeat) is merged from its
    repetitions' records, given in the order they ran (utils/results/figures.py)."""
    from utils.results.figures import merge_repetitions

    groups: dict[tuple, list[SummaryRecord]] = {}
    for outcome in outcomes:
        record = merge_outcome(outcome, perf_dir, vendor)
        groups.setdefault(record.identity, []).append(record)
    records = [merge_repetitions(group) for group in groups.values()]
    records.sort(key=lambda r: r.identity)
    return records


def repetition_lines(records: list[SummaryRecord]) -> list[str]:
    """summary.md's table of the cases run more than once: every figure across its repetitions."""
    rows = [(r, f) for r in records if r.repetitions for f in r.repetitions.figures]
    if not rows:
        return []
    lines = [
        "",
        "Repetitions (run.py --repeat: each a fresh process; the headline above is their geometric mean, its ± their "
        "95 % t-interval, which holds this run's minutes only: a run made at another time differs by this host's "
        "between-run noise, which the results history learns and `run.py history` shows; docs/history.md):",
        "",
        "| case | host | row | figure | n | geometric mean | ± across repetitions | spread between "
        "repetitions | each repetition (± of its own window) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r, f in rows:
        # every repeated figure had its window's interval estimated: a null one was refused, "± n/a"
        each = ", ".join(figure_cell(v, {"window": i}, "window") for v, i in zip(f.values, f.intervals))
        width = relative_half_width(f.geomean, f.ci95)
        spread = "-" if f.spread is None else f"{f.spread:.1%}"
        lines.append(
            f"| {r.name} | {r.host} | {f.row} | {f.figure} | {len(f.values)} | {_fmt(f.geomean)} | "
            f"{'-' if width is None else f'±{width:.1%}'} | {spread} | {each} |"
        )
    return lines


# ---- the tables' cells: one formatting for summary.md and report.html (utils/results/report/) ----
# Public: the report formats its cells with these (the figures and their ± in common/cells.py).
# A new kind of cell (an interval, a unit) is one more function here or there, used by both.
def percentile_cell(latency: dict, name: str, count: int | None, intervals: dict | None = None) -> str:
    """Latency percentile ``name`` (``p50``, ``p90``, ``p99``) of ``latency`` (ms) as a cell with its ±
    (``figure_cell``); when it is missing, ``n/a (<N queries)`` if ``count`` queries were measured (too
    few for it), else ``-``."""
    value = latency.get(name)
    if value is not None:
        return figure_cell(value, intervals, name)
    return f"n/a (<{MIN_SAMPLES_FOR_PERCENTILE[name][1]} queries)" if count is not None else "-"


def mfu_cell(mfu: float | None, estimate: bool | None, note: str | None = None, measured: str | None = None) -> str:
    """MFU (a fraction) as ``12.34%``, ``est.`` when the peak is an estimate, ``of measured fp32 GEMM
    peak (...)`` when it is a measured baseline; n/a with the reason when None."""
    if mfu is None:
        if note and measured:
            return "n/a (over 100% of the measured peak: the baseline is wrong, see below)"
        return "n/a (over 100%: peak too low)" if note else "n/a (peak unknown)"
    return f"{mfu * 100:.2f}%" + (f" of {measured}" if measured else " est." if estimate else "")


def record_mfu_cell(r: SummaryRecord) -> str:
    """A record's MFU cell: the one text summary.md and report.html both show for it; ``-`` for a
    base-tier case, which measures the peak itself (its figures are in the base tier's table)."""
    if not r.succeeded or r.baseline:
        return "-"
    return mfu_cell(r.mfu, r.mfu_is_estimate, r.mfu_note, r.peak_measured)


def _verdict_cell(verdict: Verdict | None) -> str:
    """``valid``, ``INVALID (n)``, and how many checks were not judged (``valid, 2 not judged``)."""
    if verdict is None:
        return "-"
    unjudged = len(verdict.not_judged)
    cell = "valid" if verdict.valid else f"INVALID ({len(verdict.reasons)})"
    return cell + (f", {unjudged} not judged" if unjudged else "")


def accuracy_cell(value: Any, note: str | None) -> str:
    """An accuracy to 4 decimals, or ``n/a (note)`` when the case says its accuracy means nothing
    (``accuracy_note``)."""
    return f"n/a ({note})" if note else fmt(value, 4)


# summary's own call sites, by their earlier private names
_fmt, _percentile_cell, _mfu_cell, _accuracy_cell = fmt, percentile_cell, mfu_cell, accuracy_cell


def _percentiles(latency: LatencyBlock | None) -> dict[str, float | None]:
    return latency.to_json() if latency is not None else {}


def markdown_table(records: list[SummaryRecord], memory_kind: str = "device memory") -> str:
    cases = [r for r in records if not is_endpoint(r)]  # a serving run's record has no case figures
    lines = _headline_lines(cases, memory_kind) if cases or not records else []
    lines += _performance_lines(records)
    lines += _precision_lines(records)
    lines += llm_summary.markdown_lines(records)
    lines += repetition_lines(records)
    lines += baselines.markdown_lines(records)
    lines += energy_lines(records)
    lines += _mfu_lines(records)
    lines += _verdict_lines(records)
    return "\n".join(lines) + "\n"


def _headline_lines(records: list[SummaryRecord], memory_kind: str) -> list[str]:
    """The table of every case x host's headline figures."""
    header = (
        "| case | host | status | verdict | dtype | bs | infer core qps (samples/s) | infer whole qps (samples/s) | "
        "val core qps (samples/s) | p50 ms/batch | p90 ms/batch | p99 ms/batch | val acc | infer acc | "
        f"{memory_kind} used/total GiB | MFU |"
    )
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for r in records:
        latency = _percentiles(r.latency_ms)
        intervals = r.latency_ci95 or {}
        ci95 = r.ci95 or {}
        count = r.latency_batches
        status = r.status if r.succeeded else f"{r.status} at {r.failed_step}"
        memory = f"{_fmt(r.vendor_usage_gib)}/{_fmt(r.vendor_max_mem_gib)}" if r.vendor_usage_gib is not None else "-"
        mfu = record_mfu_cell(r)
        lines.append(
            f"| {r.name} | {r.host} | {status} | {_verdict_cell(r.verdict)} | "
            f"{_fmt(r.precision)} | "
            f"{_fmt(r.batchsize)} | {figure_cell(r.infer_core_qps, ci95, Key.INFER_CORE_QPS)} | "
            f"{figure_cell(r.infer_whole_qps, ci95, Key.INFER_WHOLE_QPS)} | "
            f"{figure_cell(r.val_core_qps, ci95, Key.VAL_CORE_QPS)} | "
            f"{_percentile_cell(latency, 'p50', count, intervals)} | "
            f"{_percentile_cell(latency, 'p90', count, intervals)} | "
            f"{_percentile_cell(latency, 'p99', count, intervals)} | "
            f"{_accuracy_cell(r.val_average_acc, r.accuracy_note)} | "
            f"{_accuracy_cell(r.infer_average_acc, r.accuracy_note)} | "
            f"{memory} | {mfu} |"
        )
    return lines


def _performance_lines(records: list[SummaryRecord]) -> list[str]:
    """The LoadGen-style performance rows, when any case measured them."""
    lines: list[str] = []
    rows = [(r, row) for r in records for row in r.performance]
    if rows:
        lines += [
            "",
            "Performance rows (LoadGen-style, queries from a preloaded pool; latency per query = one batch):",
            "",
            "| case | host | bs | scenario | clients | qps (samples/s) | p50 ms/query | p90 ms/query | p99 ms/query | "
            "queries | MFU | verdict |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r, row in rows:
            latency = _percentiles(row.latency_ms)
            intervals = row.latency_ci95 or {}
            scenario = row.scenario
            if row.target_qps is not None:
                scenario += f" @{row.target_qps:.4g}"
                if row.latency_bound_met is not None:
                    scenario += f", bound {'met' if row.latency_bound_met else 'MISSED'}"
            qps = "n/a (no queries)" if row.qps is None else figure_cell(row.qps, {"qps": row.qps_ci95}, "qps")
            lines.append(
                f"| {r.name} | {r.host} | {row.batch_size} | {scenario} | {row.clients} | "
                f"{qps} | "
                f"{_percentile_cell(latency, 'p50', row.queries, intervals)} | "
                f"{_percentile_cell(latency, 'p90', row.queries, intervals)} | "
                f"{_percentile_cell(latency, 'p99', row.queries, intervals)} | "
                f"{row.queries} | "
                f"{_mfu_cell(row.mfu, r.mfu_is_estimate, row.mfu_note, r.peak_measured)} | "
                f"{_verdict_cell(row.verdict)} |"
            )
    return lines


def _precision_lines(records: list[SummaryRecord]) -> list[str]:
    """What ± means, and the precision each case asked, when any figure has one."""
    lines: list[str] = []
    if any(r.ci95 or r.latency_ci95 or any(row.qps_ci95 for row in r.performance) for r in records):
        targets = ", ".join(
            f"{r.case} ±{r.precision_target:.0%}" for r in records if isinstance(r.precision_target, (int, float))
        )
        lines += [
            "",
            "±: half the 95% confidence interval's width over the figure (docs/measurement.md): inside one window "
            "unless the case "
            "ran repetitions (then across them; the spread between runs is in the Repetitions table)."
            + (f" Precision asked: {targets}." if targets else ""),
        ]
    return lines


def _mfu_lines(records: list[SummaryRecord]) -> list[str]:
    """Where a peak is an estimate, and each measured peak's MFU note."""
    lines: list[str] = []
    estimates = {r.peak_flops_source for r in records if r.mfu_is_estimate}
    if estimates:
        lines += [
            "",
            "MFU est.: the peak FLOPS is an estimate, not a datasheet figure: "
            + "; ".join(sorted(e for e in estimates if e)),
        ]
        base = sorted({r.name for r in records if r.case.startswith("base_")})
        lines.append(
            f"This run's {', '.join(base)} measured no VALID peak for these (its verdicts say why): an INVALID "
            "figure is never a peak. A later run here takes MFU against a VALID one."
            if base
            else "Measure this host's peaks with `run.py --cases base`: later runs here then take MFU against them."
        )
    for r in records:
        if r.peak_measured and r.mfu_note:
            lines.append(f"- **{r.name} on {r.host}: MFU {r.mfu_note}**")
    return lines


def _verdict_lines(records: list[SummaryRecord]) -> list[str]:
    """The INVALID results with their reasons, the checks not judged, and the failures."""
    lines: list[str] = []
    invalid = [(r, r.verdict) for r in records if r.verdict is not None and not r.verdict.valid]
    if invalid:
        lines.append("")
        for r, verdict in invalid:
            lines.append(f"- **{r.name} on {r.host} is INVALID:** " + "; ".join(verdict.reasons))
    unjudged = [(r, r.verdict) for r in records if r.verdict is not None and r.verdict.not_judged]
    if unjudged:
        lines.append("")
        for r, verdict in unjudged:
            lines.append(
                f"- {r.name} on {r.host}, not judged (run.py --strict fails on these): " + "; ".join(verdict.not_judged)
            )
    failures = [r for r in records if not r.succeeded]
    if failures:
        lines.append("")
        for r in failures:
            lines.append(f"- **{r.name} on {r.host}** {r.status} at step `{r.failed_step}`: {r.error}")
    return lines


def write_summary(
    run_dir: Path, run_id: str, host_config: HostConfig, records: list[SummaryRecord], started_at: datetime
) -> tuple[Path, Path]:
    from utils.results.aggregate import aggregate_records, with_aggregates

    aggregates = aggregate_records(records)  # multi-host cases: summed throughput, pooled percentiles
    summary = Summary(
        tuple(records),
        tuple(aggregates),
        run_id=run_id,
        mode=host_config.mode,
        vendor=host_config.vendor,
        hosts=[h.label for h in host_config.hosts],
        started_at=started_at.isoformat(timespec="seconds"),
        finished_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    json_path = run_dir / "summary.json"
    md_path = run_dir / "summary.md"
    write_json_atomic(json_path, summary.to_json())
    with atomic_path(md_path) as tmp:
        tmp.write_text(
            f"# InferPerf run {run_id} ({host_config.vendor}, {host_config.mode})\n\n"
            + markdown_table(
                with_aggregates(records, aggregates), memory_kind(host_config.flagperf_path, host_config.vendor)
            ),
            encoding="utf-8",
        )
    return json_path, md_path


def serving_markdown(summary: ServingSummary, blocks: list[dict], metrics_url: str | None) -> str:
    """A serving run's summary.md (run.py --endpoint): its title and notes, the capacity found, its record's
    tables (``markdown_table``: the step table, the repetitions, the INVALID steps), the capacity probes and
    the server's own figures. ``blocks``: serving/result.json's steps (of every repetition), for the notes."""
    tokens = sorted({source for step in summary.rows for source in step.token_source})
    text = (
        f"# serving: {summary.served_model} at {summary.endpoint} (tokens counted by {', '.join(tokens) or 'nothing'})"
    )
    text += "".join(f"\n\nnote: {note}" for note in llm_summary.serving_notes(blocks))
    found = summary.capacity
    if found is not None:
        above = ", above the range" if found.get("above_range") else ""
        text += (
            f"\n\ncapacity ({found.get('kind')}): {found.get('capacity')} "
            f"(interval {found.get('interval')}, {found.get('probes')} probes{above})"
        )
    record = as_record(summary)
    text += "\n" + (markdown_table([record]) if summary.steps else "\n(no steps)\n")
    probes = [row for row in summary.rows if row.phase == "capacity"]
    lines = ["", "Capacity probes:", "", *llm_summary.table(llm_summary.step_rows(probes))] if probes else []
    lines += llm_summary.server_lines(summary.rows, metrics_url)
    return text + "\n".join(lines) + ("\n" if lines else "")


def write_serving_summary(run_dir: Path, summary: ServingSummary, blocks: list[dict], metrics_url: str | None) -> Path:
    """``run_dir``'s summary.md of a serving run (``serving_markdown``), written atomically."""
    md_path = run_dir / "summary.md"
    with atomic_path(md_path) as tmp:
        tmp.write_text(serving_markdown(summary, blocks, metrics_url), encoding="utf-8")
    return md_path
