"""result.json: FlagPerf's keys plus the measurements FlagPerf lacks. Schema: docs/result_schema.md."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common.files import json_text, write_json_atomic
from common.mfu import achieved_flops
from common.record import (
    FAILURE_FILE,
    LATENCY_FILE,
    MAX_RAW_LATENCIES,
    RESULT_FILE,
    SCHEMA_VERSION,
    CaseResult,
    Key,
    PhaseBlock,
    capped,
    flagperf_view,
    write_latencies,
)

if TYPE_CHECKING:  # kept light: run_inference.py imports this module to report any failure
    from contract.config import CaseConfig
    from contract.phase import PhaseResult, Verdict

# The performance-data table is for people; the top of it says where time goes.
MAX_PERF_ROWS = 30


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def engine_precision(engine: Any, config: CaseConfig) -> str:
    """The precision the engine actually ran (its own word first)."""
    if engine is not None:
        from tools.compat.adapters import as_engine

        declared = as_engine(engine).precision
        return str(declared) if declared is not None else "fp16" if config.fp16 else "fp32"
    return "fp16" if config.fp16 and config.device != "cpu" else "fp32"


def _accuracy(phase: PhaseResult | None, note: str | None) -> float | None:
    """Accuracy, or None when the phase has none or the case says it means nothing (``accuracy_note``)."""
    if phase is None or note:
        return None
    return phase.accuracy


def _phase_block(phase: PhaseResult | None, note: str | None, judged: bool) -> PhaseBlock | None:
    if phase is None:
        return None
    return PhaseBlock(
        judged=judged,  # False: information only, its verdict is not the result's (overall_verdict)
        samples=phase.samples,
        batches=phase.batches,
        passes=phase.passes,
        warmup_batches=phase.warmup_batches,
        whole_time_s=phase.whole_time_s,
        core_time_s=phase.core_time_s,
        foo_time_s=phase.foo_time_s,
        whole_qps=phase.whole_qps,
        core_qps=phase.core_qps,
        accuracy=_accuracy(phase, note),
        accuracy_note=note if phase.accuracy is not None else None,
        core_qps_ci95=phase.core_qps_ci95,
        whole_qps_ci95=phase.whole_qps_ci95,
        latency_ms=phase.latency.to_dict() if phase.latency else None,
        latency_ci95=phase.latency.ci95 if phase.latency else None,
        precision=phase.precision,
        window_qps=phase.window_qps,
        contention=phase.contention.to_dict() if phase.contention else None,
        verdict=phase.verdict.record(),
        started_at_unix=phase.span_unix[0] if phase.span_unix else None,
        finished_at_unix=phase.span_unix[1] if phase.span_unix else None,
    )


def _rounded_interval(interval: list[float] | None) -> list[float] | None:
    return None if interval is None else [round(interval[0], 4), round(interval[1], 4)]


def flagperf_intervals(validation: PhaseResult | None, inference: PhaseResult | None) -> dict[str, list[float] | None]:
    """The FlagPerf throughputs' 95 % intervals, keyed and rounded as the figures are (``ci95``)."""
    pick = {
        Key.VAL_WHOLE_QPS: (validation, "whole_qps_ci95"),
        Key.VAL_CORE_QPS: (validation, "core_qps_ci95"),
        Key.INFER_WHOLE_QPS: (inference, "whole_qps_ci95"),
        Key.INFER_CORE_QPS: (inference, "core_qps_ci95"),
    }
    return {
        key: _rounded_interval(getattr(phase, name, None) if phase is not None else None)
        for key, (phase, name) in pick.items()
    }


def raw_latency_series(
    validation: PhaseResult | None, inference: PhaseResult | None, performance: Any
) -> dict[str, list[int]]:
    series: dict[str, list[int]] = {}
    for name, phase in (("validation", validation), ("inference", inference)):
        if phase is not None and phase.core_latencies_ns:
            series[name] = phase.core_latencies_ns
    for index, values in enumerate(getattr(performance, "raw_latencies_ns", None) or []):
        series[f"performance_{index}"] = values
    return series


def overall_verdict(validation: PhaseResult | None, inference: PhaseResult | None, performance: Any) -> Verdict:
    """Every judged phase's and row's reasons, each said once and labelled with where it applies.
    The validation phase is the framework model's accuracy pass: its throughputs are information
    (docs/measurement.md, "What is judged"), so its own reasons stay in its phase block only."""
    from contract.phase import Verdict

    del validation  # not judged: see the docstring
    engine_wide = list(performance.engine_reasons) if performance is not None else []
    verdict = Verdict()
    verdict.extend(f"engine: {r}" for r in engine_wide)
    if inference is not None:
        verdict.extend(f"inference: {r}" for r in inference.verdict.reasons if r not in engine_wide)
    for row in performance.rows if performance is not None else []:
        verdict.extend(f"{row.label}: {r}" for r in row.verdict.reasons if r not in engine_wide)
    for label, reasons in getattr(
        performance, "labelled_reasons", list
    )():  # an LLM case's cells (tools/measure/llm_stage.py)
        verdict.extend(f"{label}: {r}" for r in reasons if r not in engine_wide)
    # What was not judged, labelled the same way (docs/measurement.md, "Not judged"); an LLM cell's stays in its row.
    if inference is not None:
        verdict.skip(f"inference: {what}" for what in inference.verdict.not_judged)
    verdict.skip(f"engine: {what}" for what in getattr(performance, "engine_not_judged", []))
    for row in performance.rows if performance is not None else []:
        verdict.skip(f"{row.label}: {what}" for what in row.verdict.not_judged)
    return verdict


@dataclass(frozen=True)
class ResultInputs:
    """What result.json is built from: the case config, each phase's measurement, the engine, and the
    run's steps, caches, environment and times."""

    config: CaseConfig
    validation: PhaseResult | None
    inference: PhaseResult | None
    engine: Any
    engine_info: dict
    e2e_time_s: float
    steps: dict
    cache: dict
    env: dict
    started_at: datetime
    performance: Any = None


def build_result(inputs: ResultInputs) -> CaseResult:
    config, validation, inference, performance = inputs.config, inputs.validation, inputs.inference, inputs.performance
    precision = engine_precision(inputs.engine, config)
    engine_info = dict(inputs.engine_info)
    if "performance_data" in engine_info:
        engine_info["performance_data"] = engine_info["performance_data"][:MAX_PERF_ROWS]
    core_qps = inference.core_qps if inference else None
    achieved = achieved_flops(config.flops, core_qps)  # FLOP/s; MFU's numerator (common/mfu.py)
    note = config.accuracy_note
    report = performance.to_dict() if performance is not None else {}
    raw = raw_latency_series(validation, inference, performance)
    return CaseResult(
        # FlagPerf's keys, same names and meaning (common.record.Key).
        **_flagperf_fields(inputs, precision),
        # InferPerf's additions.
        ci95=flagperf_intervals(validation, inference),
        verdict=overall_verdict(validation, inference, performance).record(),
        case=config.case,
        framework=config.framework_full or config.framework,
        accuracy_note=note,
        achieved_tflops=achieved / 1e12 if achieved is not None else None,
        validation=_phase_block(validation, note, judged=False),
        inference=_phase_block(inference, note, judged=True),
        performance=tuple(report.get("rows", [])),
        best=report.get("best"),
        numeric=report.get("numeric"),
        audits=report.get("audits", []),
        performance_notes=report.get("notes", []),
        llm=report.get(
            "llm"
        ),  # an LLM case's prefill/decode table, server rows and greedy check (docs/result_schema.md)
        baseline=report.get(
            "baseline"
        ),  # a base-tier case's measured peaks (benchmarks/base_common.py, docs/result_schema.md)
        engine=engine_info or None,
        cache=inputs.cache,
        steps=inputs.steps,
        config=config.as_dict(),
        env=inputs.env,
        started_at=inputs.started_at.isoformat(timespec="seconds"),
        finished_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        raw_latencies=_raw_latencies_block(raw),
        status="success",
        schema_version=SCHEMA_VERSION,
    )


def _flagperf_fields(inputs: ResultInputs, precision: Any) -> dict[str, Any]:
    """FlagPerf's keys, with the same names and meaning (common.record.Key)."""
    config, validation, inference, note = (
        inputs.config,
        inputs.validation,
        inputs.inference,
        inputs.config.accuracy_note,
    )
    return dict(
        vendor=config.vendor,
        compiler=config.compiler,
        precision=precision,
        batchsize=config.batch_size,
        flops=config.flops,
        e2e_time_s=_round(inputs.e2e_time_s),
        val_whole_qps=_round(validation.whole_qps if validation else None),
        val_core_qps=_round(validation.core_qps if validation else None),
        infer_whole_qps=_round(inference.whole_qps if inference else None),
        infer_core_qps=_round(inference.core_qps if inference else None),
        val_average_acc=_round(_accuracy(validation, note), 6),
        infer_average_acc=_round(_accuracy(inference, note), 6),
    )


def _raw_latencies_block(raw: dict[str, list[int]]) -> dict | None:
    """What result.json says of latencies.npz: its file, unit, cap and each series' count."""
    if not raw:
        return None
    return {
        "file": LATENCY_FILE,
        "unit": "ns",
        "cap": MAX_RAW_LATENCIES,
        "series": {name: {"count": len(v), "stored": min(len(v), MAX_RAW_LATENCIES)} for name, v in raw.items()},
    }


def write_result(log_dir: Path, result: CaseResult, raw_latencies_ns: dict[str, list[int]] | None = None) -> Path:
    """result.json, with latencies.npz (``raw_latencies_ns``, each series capped) and bytemlperf.json
    written before it, so that result.json never names a missing file."""
    path = log_dir / RESULT_FILE
    if raw_latencies_ns:
        write_latencies(log_dir / LATENCY_FILE, {name: capped(v) for name, v in raw_latencies_ns.items()})
    record = result.to_json()
    from tools.compat.bytemlperf.report import write_report  # bytemlperf.json, ByteMLPerf's report shape

    write_report(log_dir, record)
    write_json_atomic(path, record)
    from loguru import logger  # imported here: reporting a failure needs this module, and nothing slow

    logger.info(f"Finish Info: {json_text(flagperf_view(record), indent=None)}")
    logger.info(f"result written to {path}")
    return path


def write_failure(log_dir: Path, *, step: str | None, error: str, exit_code: int, case: str, vendor: str) -> Path:
    path = log_dir / FAILURE_FILE
    write_json_atomic(
        path,
        {
            "schema_version": SCHEMA_VERSION,
            "status": "failed",
            "case": case,
            "vendor": vendor,
            "step": step,
            "error": error,
            "exit_code": exit_code,
        },
    )
    return path


def clear_previous(log_dir: Path) -> None:
    """A stale result from an earlier run must never pass for this run's."""
    from tools.compat.bytemlperf.report import BYTEMLPERF_FILE

    for name in (RESULT_FILE, FAILURE_FILE, LATENCY_FILE, BYTEMLPERF_FILE):
        (log_dir / name).unlink(missing_ok=True)
