"""tools.results.result: result.json built from hand-made phases, key by key (mutation testing, docs/testing.md).

Every figure is chosen so that rounding to 4 (qps, seconds) or 6 (accuracy)
digits shows, and the whole record is compared at once; accuracy with an
``accuracy_note`` is null with the note, never a number.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from common.record import PerformanceRow, read_latencies, read_result
from contract.phase import PhaseResult
from tests.infra.result_builders import Performance, build, config, phase
from tools.results.result import (
    MAX_RAW_LATENCIES,
    capped,
    clear_previous,
    engine_precision,
    flagperf_view,
    overall_verdict,
    raw_latency_series,
    write_failure,
    write_result,
)

GOLDEN_DIGITS = Path(__file__).parent / "fixtures" / "golden" / "results" / "digits"


def test_build_result_whole_record():
    validation = phase(
        "validation",
        10,
        3.0,
        2.0,
        0.123456789,
        reasons=["slow"],
        span=(100.5, 103.5),
        core_qps_ci95=[4.876543219, 5.1],
        precision={"target": 0.02},
    )
    inference = phase("inference", 100, 7.0, 4.0, 0.5, reasons=["numeric bad", "contended"], latencies=(2_000_000,) * 3)
    rows = [
        PerformanceRow.from_json(
            {"batch_size": 8, "scenario": "offline", "clients": 2, "verdict": {"reasons": ["numeric bad", "row"]}}
        )
    ]
    performance = Performance(rows, engine_reasons=["numeric bad"], raw=[[5, 6], [7]])
    engine = SimpleNamespace(precision="int8")
    record = build(
        config=config(framework_full="pytorch_2.1"),
        validation=validation,
        inference=inference,
        engine=engine,
        engine_info={"name": "ort", "performance_data": list(range(35))},
        e2e_time_s=12.3456789,
        steps={"s": 1},
        cache={"c": 2},
        env={"e": 3},
        performance=performance,
    )
    block = lambda p, acc: {
        "judged": p.phase == "inference",
        "samples": p.samples,
        "batches": p.batches,
        "passes": 3,
        "warmup_batches": 2,
        "whole_time_s": p.whole_time_s,
        "core_time_s": p.core_time_s,
        "foo_time_s": 0.25,
        "whole_qps": p.samples / p.whole_time_s,
        "core_qps": p.samples / p.core_time_s,
        "accuracy": acc,
        "accuracy_note": None,
        "core_qps_ci95": p.core_qps_ci95,
        "whole_qps_ci95": None,
        "latency_ms": p.latency.to_dict(),
        "latency_ci95": p.latency.ci95,
        "precision": p.precision,
        "window_qps": [1.5, 2.5],
        "contention": {"other_processes_cpu_share": 0.125, "cpus": 2, "seconds": 4.0, "gpu_other_processes": None},
        "verdict": p.verdict.to_dict(),
        "started_at_unix": p.span_unix[0] if p.span_unix else None,
        "finished_at_unix": p.span_unix[1] if p.span_unix else None,
    }
    assert record == {
        "vendor": "cpu",
        "compiler": "onnxruntime",
        "precision": "int8",
        "batchsize": 4,
        "flops": 2e9,
        "e2e_time(second)": 12.3457,
        "p_validation_whole(qps)": 3.3333,
        "p_validation_core(qps)": 5.0,
        "p_inference_whole(qps)": 14.2857,
        "*p_inference_core(qps)": 25.0,
        "val_average_acc": 0.123457,
        "infer_average_acc": 0.5,
        # the intervals of the FlagPerf throughputs, rounded as the figures are
        "ci95": {
            "p_validation_whole(qps)": None,
            "p_validation_core(qps)": [4.8765, 5.1],
            "p_inference_whole(qps)": None,
            "*p_inference_core(qps)": None,
        },
        "schema_version": 2,
        "status": "success",
        "verdict": {
            "valid": False,
            "reasons": [
                "engine: numeric bad",
                "inference: contended",
                "bs 8 offline x2: row",
            ],
        },
        "case": "digits",
        "framework": "pytorch_2.1",
        "accuracy_note": None,
        "achieved_tflops": 2e9 * 25.0 / 1e12,
        "validation": block(validation, 0.123456789),
        "inference": block(inference, 0.5),
        "performance": [r.to_json() for r in rows],
        "best": {"b": 1},
        "numeric": {"passed": True},
        "audits": [{"name": "a"}],
        "performance_notes": ["a note"],
        "llm": None,
        "baseline": None,
        "engine": {"name": "ort", "performance_data": list(range(30))},
        "cache": {"c": 2},
        "steps": {"s": 1},
        "config": {"the": "config"},
        "env": {"e": 3},
        "started_at": "2026-03-04T05:06:07+00:00",
        "raw_latencies": {
            "file": "latencies.npz",
            "unit": "ns",
            "cap": 100_000,
            "series": {
                "validation": {"count": 2, "stored": 2},
                "inference": {"count": 3, "stored": 3},
                "performance_0": {"count": 2, "stored": 2},
                "performance_1": {"count": 1, "stored": 1},
            },
        },
    }
    raw = raw_latency_series(validation, inference, performance)
    assert raw == {
        "validation": [1_000_000, 3_000_000],
        "inference": [2_000_000] * 3,
        "performance_0": [5, 6],
        "performance_1": [7],
    }


def test_nothing_measured():
    record = build(engine_info={})
    assert record["engine"] is None and record["verdict"] == {"valid": True, "reasons": []}
    for key in (
        "p_validation_whole(qps)",
        "p_validation_core(qps)",
        "p_inference_whole(qps)",
        "*p_inference_core(qps)",
        "val_average_acc",
        "infer_average_acc",
        "achieved_tflops",
        "validation",
        "inference",
        "best",
        "numeric",
        "raw_latencies",
    ):
        assert record[key] is None, key
    assert record["performance"] == [] and record["audits"] == [] and record["performance_notes"] == []
    assert record["framework"] == "pytorch" and record["precision"] == "fp32"


def test_accuracy_note_nulls_accuracy_and_is_said_where_there_was_one():
    validation = phase("validation", 10, 1.0, 1.0, 0.75)
    inference = phase("inference", 10, 1.0, 1.0, 0.25)
    record = build(config=config(accuracy_note="random weights"), validation=validation, inference=inference)
    assert record["val_average_acc"] is None and record["infer_average_acc"] is None
    assert record["accuracy_note"] == "random weights"
    assert record["validation"]["accuracy"] is None and record["validation"]["accuracy_note"] == "random weights"
    assert record["inference"]["accuracy"] is None and record["inference"]["accuracy_note"] == "random weights"
    no_accuracy = phase("inference", 10, 1.0, 1.0, None)
    block = build(config=config(accuracy_note="random weights"), inference=no_accuracy)["inference"]
    assert block["accuracy"] is None and block["accuracy_note"] is None


def test_inference_accuracy_rounds_to_six_digits():
    record = build(inference=phase("inference", 10, 1.0, 1.0, 0.1234567891))
    assert record["infer_average_acc"] == 0.123457 and record["inference"]["accuracy"] == 0.1234567891


def test_phase_block_without_latency_or_contention():
    bare = PhaseResult(
        phase="inference",
        samples=0,
        batches=0,
        whole_time_s=0.0,
        core_time_s=0.0,
        foo_time_s=0.0,
        warmup_batches=0,
        accuracy=None,
        latency=None,
    )
    block = build(inference=bare)["inference"]
    assert block["latency_ms"] is None and block["contention"] is None and block["whole_qps"] is None
    assert block["started_at_unix"] is None and block["finished_at_unix"] is None and block["passes"] == 1


def test_achieved_tflops_needs_flops_and_a_core_rate():
    inference = phase("inference", 10, 1.0, 0.0, None)  # no core time: no core qps
    assert build(inference=inference)["achieved_tflops"] is None
    assert build(config=config(flops=None), inference=phase("inference", 10, 1.0, 2.0, None))["achieved_tflops"] is None


@pytest.mark.parametrize(
    "engine, fp16, device, expected",
    [
        (SimpleNamespace(precision="int8"), False, "cpu", "int8"),
        (SimpleNamespace(), True, "cpu", "fp16"),
        (SimpleNamespace(), False, "cuda", "fp32"),
        (None, True, "cuda:0", "fp16"),
        (None, True, "cpu", "fp32"),
        (None, False, "cuda", "fp32"),
    ],
)
def test_engine_precision(engine, fp16, device, expected):
    assert engine_precision(engine, config(fp16=fp16, device=device)) == expected


def test_overall_verdict_labels_and_engine_wide_reasons_once():
    validation = phase("validation", 1, 1.0, 1.0, None, reasons=["v", "e"])
    inference = phase("inference", 1, 1.0, 1.0, None, reasons=["e", "i"])
    rows = [
        PerformanceRow.from_json(
            {"batch_size": 1, "scenario": "server", "clients": 4, "verdict": {"reasons": ["e", "r", "i"]}}
        )
    ]
    verdict = overall_verdict(validation, inference, Performance(rows, engine_reasons=["e"]))
    # the validation phase is information (docs/measurement.md, "What is judged"): its reasons are not the result's
    assert verdict.reasons == ["engine: e", "inference: i", "bs 1 server x4: r", "bs 1 server x4: i"]
    assert overall_verdict(None, inference, None).reasons == ["inference: e", "inference: i"]
    assert overall_verdict(validation, None, None).reasons == [] and overall_verdict(validation, None, None).valid


def test_capped_keeps_order_and_is_seeded():
    values = list(range(1000, 1010))
    assert capped(values, cap=10) == values and capped(values, cap=10) is not values
    four = capped(values, cap=4)
    assert len(four) == 4 and four == sorted(four) and set(four) <= set(values)
    assert four == capped(values, cap=4, seed=0)
    assert [capped(values, cap=4, seed=s) for s in range(1, 6)] != [four] * 5
    expected = [values[i] for i in sorted(random.Random(0).sample(range(10), 4))]
    assert four == expected
    big = list(range(MAX_RAW_LATENCIES + 1))
    assert len(capped(big)) == MAX_RAW_LATENCIES and len(capped(big[:-1])) == MAX_RAW_LATENCIES


def test_raw_series_skip_empty_phases():
    empty = phase("validation", 1, 1.0, 1.0, None, latencies=())
    assert raw_latency_series(empty, None, SimpleNamespace()) == {}
    assert raw_latency_series(None, empty, Performance(raw=[[1]])) == {"performance_0": [1]}


def test_long_series_are_counted_and_capped():
    long = phase("inference", 1, 1.0, 1.0, None, latencies=range(MAX_RAW_LATENCIES + 5))
    record = build(inference=long)
    assert record["raw_latencies"]["series"] == {
        "inference": {"count": MAX_RAW_LATENCIES + 5, "stored": MAX_RAW_LATENCIES}
    }


def test_write_result_caps_each_series(tmp_path):
    result = read_result(GOLDEN_DIGITS)
    write_result(tmp_path, result, {"inference": list(range(MAX_RAW_LATENCIES + 5))})
    assert read_latencies(tmp_path)["inference"].tolist() == capped(list(range(MAX_RAW_LATENCIES + 5)))


def test_flagperf_view():
    record = {"vendor": "v", "*p_inference_core(qps)": 3.0, "extra": 1}
    assert flagperf_view(record) == {
        "vendor": "v",
        "compiler": None,
        "precision": None,
        "batchsize": None,
        "flops": None,
        "e2e_time(second)": None,
        "p_validation_whole(qps)": None,
        "p_validation_core(qps)": None,
        "p_inference_whole(qps)": None,
        "*p_inference_core(qps)": 3.0,
        "val_average_acc": None,
        "infer_average_acc": None,
    }


def test_write_result_latencies_and_log(tmp_path, caplog_loguru):
    result = read_result(GOLDEN_DIGITS)
    path = write_result(tmp_path, result, {"inference": [3, 1, 2], "performance_0": [7]})
    assert path == tmp_path / "result.json"
    assert path.read_text() == (GOLDEN_DIGITS / "result.json").read_text()
    raw = read_latencies(tmp_path)
    assert sorted(raw) == ["inference", "performance_0"]
    assert raw["inference"].dtype == np.int64 and raw["inference"].tolist() == [3, 1, 2]
    finish = json.dumps(flagperf_view(result.to_json()))
    assert [r["message"] for r in caplog_loguru] == [f"Finish Info: {finish}", f"result written to {path}"]
    clear_previous(tmp_path)
    assert list(tmp_path.iterdir()) == [] and read_latencies(tmp_path) == {}
    write_result(tmp_path, result, {})
    # No latency file for an empty series; every result has its ByteMLPerf report beside it.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bytemlperf.json", "result.json"]
    write_result(tmp_path, result)  # no raw series
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bytemlperf.json", "result.json"]
    write_result(tmp_path, result, {"empty": [], "one": [5]})
    raw = read_latencies(tmp_path)
    assert raw["empty"].dtype == np.int64 and raw["empty"].shape == (0,) and raw["one"].dtype == np.int64


def test_write_failure(tmp_path):
    path = write_failure(tmp_path, step="engine", error="boom", exit_code=4, case="digits", vendor="cpu")
    assert path == tmp_path / "failure.json"
    assert json.loads(path.read_text()) == {
        "schema_version": 2,
        "status": "failed",
        "case": "digits",
        "vendor": "cpu",
        "step": "engine",
        "error": "boom",
        "exit_code": 4,
    }
    clear_previous(tmp_path)
    assert not path.exists()
