"""result.json built by ``tools.results.result.build_result`` from hand-made phases, a config and a
performance report: every figure chosen so that rounding shows."""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace

from common.stats import LatencyStats
from contract.phase import ContentionReading, PhaseResult, Verdict
from tools.results.result import ResultInputs, build_result


def phase(name, samples, whole, core, accuracy, reasons=(), latencies=(1_000_000, 3_000_000), span=None, **extra):
    return PhaseResult(
        phase=name,
        samples=samples,
        batches=len(latencies),
        whole_time_s=whole,
        core_time_s=core,
        foo_time_s=0.25,
        warmup_batches=2,
        accuracy=accuracy,
        latency=LatencyStats.from_ns(list(latencies)),
        core_latencies_ns=list(latencies),
        passes=3,
        window_qps=[1.5, 2.5],
        contention=ContentionReading(0.125, 2, 4.0, None),
        verdict=Verdict(list(reasons)),
        span_unix=span,
        **extra,
    )


def config(**changes):
    values = dict(
        vendor="cpu",
        compiler="onnxruntime",
        fp16=False,
        device="cpu",
        batch_size=4,
        flops=2e9,
        accuracy_note=None,
        case="digits",
        framework="pytorch",
        framework_full=None,
    )
    values.update(changes)
    cfg = SimpleNamespace(**values)
    cfg.as_dict = lambda: {"the": "config"}
    return cfg


class Performance:
    def __init__(self, rows=(), engine_reasons=(), raw=()):
        self.rows = list(rows)
        self.engine_reasons = list(engine_reasons)
        self.raw_latencies_ns = list(raw)

    def to_dict(self):
        return {
            "rows": self.rows,
            "numeric": {"passed": True},
            "audits": [{"name": "a"}],
            "best": {"b": 1},
            "notes": ["a note"],
        }


STARTED = datetime(2026, 3, 4, 5, 6, 7, 890, tzinfo=timezone.utc)


def build(**kwargs):
    args = dict(
        config=config(),
        validation=None,
        inference=None,
        engine=None,
        engine_info={},
        e2e_time_s=1.0,
        steps={},
        cache={},
        env={},
        started_at=STARTED,
    )
    args.update(kwargs)
    record = build_result(ResultInputs(**args)).to_json()
    finished = datetime.fromisoformat(record.pop("finished_at"))
    assert finished.tzinfo is not None and abs((datetime.now(timezone.utc) - finished).total_seconds()) < 5
    return record
