"""Many small run folders for the history's decision tests: summary.json built with the records' own
types (``SummaryRecord``, ``Summary``) and a result.json with the ``env`` and ``config`` that make
its series (utils/history/points.py), one core qps a run with the latencies following it, an hour
apart. tests/infra/history_runs.py writes one run through the host's whole summary path instead.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from common.record import Key, LatencyBlock, Verdict
from common.summary_record import Summary, SummaryRecord

ENV = {
    "hostname": "bench1",
    "python": "3.11.7",
    "platform": "Linux-6.1-x86_64",
    "cpu_model": "Test CPU 9000",
    "cpu_count": 8,
    "cpus_usable": 8,
    "accelerator": None,
    "packages": {"torch": "2.13.0+cpu", "onnxruntime": "1.31.1"},
}
CONFIG = {"case": "digits", "framework": "pytorch", "batch_size": 16, "compiler": "onnxruntime", "device": "cpu",
          "log_dir": "/somewhere/else", "data_dir": "/data/digits", "repetitions": 1}  # fmt: skip
T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)


def at(k: int, hours: float = 1.0) -> str:
    """The start of the k-th run of a series, ``hours`` apart."""
    return (T0 + timedelta(hours=k * hours)).isoformat(timespec="seconds")


def case_record(
    qps: float, p50: float, log_dir: Path, width: float = 0.02, valid: bool = True, baseline: dict | None = None
) -> SummaryRecord:
    """One case's summary record: core qps and latency percentiles, each with its window's interval."""
    ci = lambda v: [v * (1 - width), v * (1 + width)]  # noqa: E731
    return SummaryRecord(
        case="digits", framework="pytorch", host="bench1", noderank=0, status="success", log_dir=str(log_dir),
        vendor="cpu", compiler="onnxruntime", infer_core_qps=qps, ci95={Key.INFER_CORE_QPS: ci(qps)},
        latency_ms=LatencyBlock(p50=p50, p90=p50 * 1.2), latency_ci95={"p50": ci(p50), "p90": ci(p50 * 1.2)},
        verdict=Verdict(reasons=() if valid else ("inference: contention: other processes used 40 %",)),
        baseline=baseline,
    )  # fmt: skip


def write_series_run(
    root: Path,
    name: str,
    qps: float,
    started_at: str,
    valid: bool = True,
    env: dict[str, Any] | None = None,
    report: bool = True,
    baseline: dict | None = None,
) -> Path:
    """``root/name``: a finished run of one case (digits on bench1) at ``qps`` samples/s, p50 1000/qps ms."""
    run_dir = root / name
    log_dir = run_dir / "digits:pytorch" / "bench1_noderank0"
    log_dir.mkdir(parents=True)
    record = case_record(qps, 1000.0 / qps, log_dir, valid=valid, baseline=baseline)
    summary = Summary(results=(record,), run_id=name.removeprefix("run"), mode="local", vendor="cpu",
                      hosts=["bench1"], started_at=started_at)  # fmt: skip
    (run_dir / "summary.json").write_text(json.dumps(summary.to_json()), encoding="utf-8")
    result = {"env": env or ENV, "config": CONFIG, "engine": {"version": "onnxruntime 1.31.1"}}
    (log_dir / "result.json").write_text(json.dumps(result), encoding="utf-8")
    if report:
        (run_dir / "report.html").write_text("<html><body>report</body></html>", encoding="utf-8")
    return run_dir
