"""summary.json's records for the table and report tests, built with the records' own constructors
(``SummaryRecord``, ``SummaryRow``, ``LatencyBlock``, ``Verdict``): every figure a table shows, chosen
so that its rounding and its interval's width show."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from common.record import LatencyBlock, PerformanceRow, Verdict
from common.summary_record import SummaryRecord, SummaryRow


def typed_row(
    batch_size: int, scenario: str, clients: int, kind: type[PerformanceRow] = PerformanceRow, **figures: Any
):
    """A performance row of ``kind``: its identity and ``figures`` (the fields), every other figure as
    a row that leaves it out reads (not measured)."""
    identity = {"batch_size": batch_size, "scenario": scenario, "clients": clients, "verdict": {}}
    return replace(kind.from_json(identity), **figures)


def summary_row(batch_size: int, scenario: str, clients: int, **figures: Any) -> SummaryRow:
    """A host's summary row (no intervals unless given)."""
    return typed_row(batch_size, scenario, clients, SummaryRow, **figures)


def records() -> list[SummaryRecord]:
    """Three hosts' records: resnet50 INVALID with three rows, digits valid with no rows, bert failed."""
    resnet50 = SummaryRecord(
        case="resnet50",
        framework="pytorch",
        host="h1",
        noderank=0,
        status="success",
        verdict=Verdict(("r1", "r2")),
        precision="fp16",
        batchsize=8,
        infer_core_qps=123.456,
        infer_whole_qps=100.0,
        ci95={"*p_inference_core(qps)": [120.987, 125.925], "p_inference_whole(qps)": None},  # ±2.0 %
        latency_ms=LatencyBlock(p50=1.234),
        latency_ci95={"p50": [1.2, 1.25], "p90": None},  # ±2.0 %
        latency_batches=40,
        val_average_acc=0.91234567,
        vendor_usage_gib=1.5,
        vendor_max_mem_gib=16.0,
        mfu=0.123456,
        mfu_is_estimate=True,
        peak_flops_source="zen4 (src)",
        performance=(
            summary_row(
                8,
                "offline",
                2,
                qps=50.5,
                qps_ci95=[50.0, 51.0],  # ±1.0 %
                queries=70,
                latency_ms=LatencyBlock(p50=2.0, p90=3.0),
                latency_ci95={"p50": None, "p90": [2.97, 3.0]},  # ±0.5 %
                mfu=0.01,
            ),
            summary_row(1, "server", 1, target_qps=12.3456, latency_bound_met=True, verdict=Verdict(("x",))),
            summary_row(
                1,
                "server",
                1,
                qps=9.0,
                queries=700,
                latency_ms=LatencyBlock(p50=1.0, p90=2.0, p99=3.0),
                target_qps=10.0,
                latency_bound_met=False,
                mfu=0.002,
                verdict=Verdict(("y",)),
            ),
        ),
    )
    digits = SummaryRecord(
        case="digits",
        framework="pytorch",
        host="h2",
        noderank=0,
        status="success",
        verdict=Verdict(),
        precision="fp32",
        batchsize=16,
        infer_core_qps=2000.0,
        val_core_qps=1500.5,
        val_average_acc=0.99,
        infer_average_acc=0.98,
        accuracy_note="random weights",
        mfu_is_estimate=True,
        peak_flops_source="generic (g)",
    )
    bert = SummaryRecord(
        case="bert",
        framework="onnx",
        host="h3",
        noderank=0,
        status="failed",
        failed_step="vendor_compile",
        error="boom",
        mfu_is_estimate=True,
    )
    return [resnet50, digits, bert]


def record_dicts() -> list[dict]:
    """:func:`records` as summary.json holds them, for a test that changes a key before reading them back."""
    return [record.to_json() for record in records()]


def typed(dicts: list[dict]) -> list[SummaryRecord]:
    """summary.json's records read back as the summary reads them."""
    return [SummaryRecord.from_json(d) for d in dicts]
