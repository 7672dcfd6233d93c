"""The records' parsing (common/record.py ``from_json``): what a key left out becomes, and the one line
that names the file and key when a needed one is missing. The recorded results round-trip in
tests/test_golden_results.py; these are the edges a real result never shows."""

from __future__ import annotations

import pytest

from common.record import CaseResult, LLMBlock, LLMRow, PerformanceRow, PhaseBlock, RecordError, Verdict

VERDICT = {"valid": True, "reasons": []}

# What each key left out becomes (numbers 0, lists empty, blocks null; the defaults in from_json).
MINIMAL_ROW = {
    "batch_size": 1,
    "scenario": "offline",
    "clients": 1,
    "qps": None,
    "qps_ci95": None,
    "queries": 0,
    "samples": 0,
    "duration_s": 0.0,
    "latency_ms": {"p50": None, "p90": None, "p99": None, "p99_9": None, "mean": None},
    "latency_ci95": {"p50": None, "p90": None, "p99": None, "p99_9": None},
    "latency_notes": [],
    "stop_reason": None,
    "window_qps": [],
    "contention": None,
    "target_qps": None,
    "issued_qps": None,
    "latency_bound_ms": None,
    "latency_bound_met": None,
    "server_search": None,
    "accuracy_in_performance_mode": None,
    "precision": None,
    "verdict": {"valid": True, "reasons": []},
    "started_at_unix": None,
    "finished_at_unix": None,
    "load_generator": "inferperf",
}
MINIMAL_RESULT = {
    "vendor": "cpu",
    "compiler": "ort",
    "precision": "fp32",
    "batchsize": None,
    "flops": None,
    "e2e_time(second)": None,
    "p_validation_whole(qps)": None,
    "p_validation_core(qps)": None,
    "p_inference_whole(qps)": None,
    "*p_inference_core(qps)": None,
    "val_average_acc": None,
    "infer_average_acc": None,
    "ci95": {},
    "schema_version": 2,
    "status": "success",
    "verdict": {"valid": True, "reasons": []},
    "case": "digits",
    "framework": "pytorch",
    "accuracy_note": None,
    "achieved_tflops": None,
    "validation": None,
    "inference": None,
    "performance": [],
    "best": None,
    "numeric": None,
    "audits": [],
    "performance_notes": [],
    "llm": None,
    "baseline": None,
    "engine": None,
    "cache": {},
    "steps": {},
    "config": {},
    "env": {},
    "started_at": "",
    "finished_at": "",
    "raw_latencies": None,
}
MINIMAL_CELL = {
    "queries": 0,
    "requests": 0,
    "duration_s": 0.0,
    "ttft_ms": {},
    "tpot_ms": {},
    "itl_ms": {},
    "e2e_ms": {},
    "prefill_ms": {},
    "prefill_tokens_per_s": None,
    "decode_tokens_per_s": None,
    "output_tokens_per_s": None,
    "requests_per_s": None,
    "scenario": "offline",
    "batch_size": 1,
    "input_length": 2,
    "output_length": 3,
    "kv_cache_mib": None,
    "contention": None,
    "stop_reason": None,
    "window_output_tokens_per_s": [],
    "output_tokens_per_s_ci95": None,
    "precision": None,
    "verdict": {"valid": True, "reasons": []},
}
MINIMAL_SERVER_ROW = {
    "queries": 0,
    "requests": 0,
    "duration_s": 0.0,
    "ttft_ms": {},
    "tpot_ms": {},
    "itl_ms": {},
    "e2e_ms": {},
    "prefill_ms": {},
    "prefill_tokens_per_s": None,
    "decode_tokens_per_s": None,
    "output_tokens_per_s": None,
    "requests_per_s": None,
    "prefill_flops_per_s": None,
    "decode_flops_per_s": 5.0,
    "scenario": "server",
    "target_qps": 2.0,
    "issued_qps": None,
    "input_length_range": None,
    "output_length_range": None,
    "length_distribution": None,
    "bound_percentile": None,
    "ttft_bound_ms": None,
    "tpot_bound_ms": None,
    "kv_cache_mib": None,
    "contention": None,
    "ttft_bound_met": None,
    "tpot_bound_met": None,
    "stop_reason": None,
    "window_output_tokens_per_s": [],
    "output_tokens_per_s_ci95": None,
    "precision": None,
    "verdict": {"valid": True, "reasons": []},
}


def test_a_row_with_only_its_identity_and_verdict():
    row = PerformanceRow.from_json({"batch_size": 1, "scenario": "offline", "clients": 1, "verdict": VERDICT})
    assert row.to_json() == MINIMAL_ROW


def test_a_result_with_only_the_keys_it_needs():
    needed = {"schema_version": 2, "vendor": "cpu", "compiler": "ort", "precision": "fp32", "case": "digits"}
    result = CaseResult.from_json({**needed, "framework": "pytorch", "verdict": {"reasons": []}})
    assert result.to_json() == MINIMAL_RESULT


def test_llm_rows_with_only_their_identity_and_verdict():
    cell = {"scenario": "offline", "batch_size": 1, "input_length": 2, "output_length": 3, "verdict": {"reasons": []}}
    assert LLMRow.from_json(cell).to_json() == MINIMAL_CELL
    # A server row's identity is its rate; one FLOP/s figure known is enough to write both keys.
    server = {"scenario": "server", "target_qps": 2.0, "verdict": {"reasons": []}, "decode_flops_per_s": 5.0}
    assert LLMRow.from_json(server).to_json() == MINIMAL_SERVER_ROW
    unshaped = LLMRow.from_json({**server, "decode_flops_per_s": None}).to_json()
    assert "decode_flops_per_s" in unshaped  # present, even null: the shape was known
    del server["decode_flops_per_s"]
    assert "prefill_flops_per_s" not in LLMRow.from_json(server).to_json()


@pytest.mark.parametrize(
    "parse, data, message",
    [
        (
            PerformanceRow.from_json,
            {"batch_size": 1, "scenario": "offline", "clients": 1},
            "performance row: no key 'verdict'",
        ),
        (PhaseBlock.from_json, {"samples": 1}, "phase: no key 'verdict'"),
        (LLMRow.from_json, {"batch_size": 1}, "llm row: no key 'scenario'"),
        (LLMRow.from_json, [], "llm row: not a JSON object"),
        (LLMRow.from_json, {"scenario": "server", "verdict": VERDICT}, "llm row: no key 'target_qps'"),
        (
            LLMRow.from_json,
            {"scenario": "offline", "batch_size": 1, "verdict": VERDICT},
            "llm row: no key 'input_length'",
        ),
        (LLMBlock.from_json, [], "llm: not a JSON object"),
        (LLMBlock.from_json, {"model": {}, "table": {"bs": 1}, "server": []}, "llm: key 'table' is not a list"),
        (LLMBlock.from_json, {"table": []}, "llm: no key 'model'"),
        (
            LLMRow.from_json,
            {"scenario": "batch", "verdict": VERDICT},
            "llm row: key 'scenario': unknown scenario 'batch': "
            "expected one of offline, single_stream, multi_stream, server",
        ),
        (CaseResult.from_json, [], "result.json: not a JSON object"),
        (CaseResult.from_json, {"vendor": "cpu"}, "result.json: no key 'schema_version'"),
    ],
)
def test_a_missing_key_is_one_line_naming_where(parse, data, message):
    with pytest.raises(RecordError) as info:
        parse(data)
    assert str(info.value) == message


def test_a_results_inner_records_are_named_by_their_place():
    base = dict(MINIMAL_RESULT)
    row = {"batch_size": 1, "scenario": "offline", "clients": 1}
    for key, value, where in [
        ("performance", [MINIMAL_ROW, row], "performance[1]"),
        ("inference", {"samples": 1}, "inference"),
        ("validation", {"samples": 1}, "validation"),
    ]:
        with pytest.raises(RecordError) as info:
            CaseResult.from_json({**base, key: value}, "run/result.json")
        assert str(info.value) == f"run/result.json: {where}: no key 'verdict'"
    # A status and a schema_version are read, not assumed.
    failed = CaseResult.from_json({**base, "status": "partial"})
    assert failed.status == "partial" and failed.to_json()["status"] == "partial"


class _WithFigure(PerformanceRow, where="row"):
    """A row with one more figure: the one line a new figure costs (docs/result_schema.md)."""

    peak_watts: float | None = None


def test_a_figure_added_in_one_line_is_written_read_and_type_checked():
    row = _WithFigure.from_json({**MINIMAL_ROW, "peak_watts": 120.5})
    assert row.peak_watts == 120.5 and row.to_json() == {**MINIMAL_ROW, "peak_watts": 120.5}
    assert _WithFigure.from_json(MINIMAL_ROW).peak_watts is None  # left out: null, its type allows it
    with pytest.raises(RecordError) as info:
        _WithFigure.from_json({**MINIMAL_ROW, "peak_watts": "hot"}, "r.json: performance[0]")
    assert str(info.value) == "r.json: performance[0]: key 'peak_watts' is not a number"


def test_a_verdicts_validity_is_written_from_its_reasons_and_never_read():
    verdict = Verdict.from_json({"valid": True, "reasons": ["drift"]})
    assert not verdict.valid and verdict.to_json() == {"valid": False, "reasons": ["drift"]}
    assert Verdict(("a",), ("b",)).to_json() == {"valid": False, "reasons": ["a"], "not_judged": ["b"]}


def test_a_needed_key_that_is_null_is_refused_and_another_null_reads_as_left_out():
    with pytest.raises(RecordError) as info:
        PerformanceRow.from_json({**MINIMAL_ROW, "batch_size": None}, "r")
    assert str(info.value) == "r: key 'batch_size' is null"
    assert PerformanceRow.from_json({**MINIMAL_ROW, "queries": None, "latency_notes": None}).to_json() == MINIMAL_ROW
