"""summary.json's records (common/summary_record.py): every recorded summary reads back into its types and
writes the same bytes; what a key left out becomes; the one line naming the file and key when a needed
key is missing or has the wrong type; an aggregate's and a repeated case's shape. The summaries are
written byte for byte in tests/test_golden_results.py; these are the read side and the edges."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.files import json_text
from common.record import FLAGPERF_KEYS, RecordError, Verdict
from common.summary_record import (
    AggregateRow,
    RepetitionFigure,
    Repetitions,
    Summary,
    SummaryLLM,
    SummaryLLMRow,
    SummaryRecord,
    SummaryRow,
    read_summary,
)
from utils.results.aggregate import aggregate_case
from utils.results.baselines import add_mbu
from utils.results.figures import merge_repetitions

SUMMARIES = Path(__file__).parent / "fixtures" / "golden" / "summaries"
GOLDEN = sorted(p.name for p in SUMMARIES.glob("*.summary.json"))
IDENTITY = {"case": "digits", "framework": "pytorch", "host": "h", "noderank": 0, "status": "success"}

# What each key left out becomes (null, lists empty, no rows); the defaults of SummaryRecord.
MINIMAL_RECORD = {
    **IDENTITY,
    "failed_step": None,
    "error": None,
    "exit_code": None,
    "wall_time_s": None,
    "log_dir": None,
    **dict.fromkeys(FLAGPERF_KEYS),  # vendor ... infer_average_acc, in FlagPerf's order
    "verdict": None,
    "accuracy_note": None,
    "latency_ms": None,
    "ci95": None,
    "latency_ci95": None,
    "precision_target": None,
    "latency_batches": None,
    "latency_notes": [],
    "sys_monitor": None,
    "vendor_usage(GiB)": None,
    "vendor_max_mem(GiB)": None,
    "peak_flops": None,
    "mfu_is_estimate": None,
    "peak_measured": None,
    "peak_flops_source": None,
    "baseline": None,
    "MFU": None,
    "MFU_note": None,
    "performance": [],
    "best": None,
    "numeric": None,
    "audits": [],
    "llm": None,
}


def golden(name: str) -> dict:
    return json.loads((SUMMARIES / name).read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", GOLDEN)
def test_every_recorded_summary_reads_into_its_types_and_writes_the_same_bytes(name):
    raw = (SUMMARIES / name).read_text(encoding="utf-8")
    summary = read_summary(SUMMARIES / name)
    assert json_text(summary.to_json()) == raw
    for record in summary.results:
        assert isinstance(record, SummaryRecord) and record.identity == (record.case, record.framework, 0)
        assert all(isinstance(row, SummaryRow) for row in record.performance)


def test_the_recorded_summaries_cover_rows_an_llm_block_a_verdict_and_a_failure():
    records = [r for name in GOLDEN for r in read_summary(SUMMARIES / name).results]
    assert any(r.performance for r in records) and any(r.llm for r in records)
    assert any(r.verdict is not None and r.verdict.valid for r in records)
    failed = [r for r in records if not r.succeeded]
    assert failed and all(r.verdict is None and r.failed_step and r.error for r in failed)
    row = next(row for r in records for row in r.performance)
    with_mfu = SummaryRow.from_json({**row.to_json(), "MFU": 0.25, "MFU_note": None})
    assert with_mfu.mfu == 0.25 and with_mfu.to_json()["MFU"] == 0.25  # the row's MFU under summary.json's key


def test_a_record_with_only_its_identity():
    record = SummaryRecord.from_json(IDENTITY)
    assert record.to_json() == MINIMAL_RECORD and SummaryRecord(**IDENTITY).to_json() == MINIMAL_RECORD
    assert not record.invalid and record.succeeded and record.name == "digits:pytorch"


def test_a_row_without_intervals_has_none_rather_than_unknown_ones():
    data = {"batch_size": 1, "scenario": "offline", "clients": 1, "verdict": {"valid": True, "reasons": []}}
    assert SummaryRow.from_json(data).latency_ci95 == {}
    with_them = SummaryRow.from_json({**data, "latency_ci95": {"p50": None}})
    assert with_them.latency_ci95 == {"p50": None}  # measured, no honest interval: summary.md's "± n/a"


@pytest.mark.parametrize("key", ["case", "framework", "host", "noderank", "status"])
def test_each_missing_identity_key_is_one_line(key):
    data = {k: v for k, v in IDENTITY.items() if k != key}
    with pytest.raises(RecordError) as info:
        SummaryRecord.from_json(data, "run/summary.json: results[0]")
    assert str(info.value) == f"run/summary.json: results[0]: no key {key!r}"


@pytest.mark.parametrize(
    "change, message",
    [
        ({"case": 3}, "key 'case' is not a string"),
        ({"status": None}, "key 'status' is null"),
        ({"noderank": "0"}, "key 'noderank' is not an integer"),
        ({"noderank": True}, "key 'noderank' is not an integer"),
        ({"*p_inference_core(qps)": "fast"}, "key '*p_inference_core(qps)' is not a number"),
        ({"latency_ms": [1.0]}, "key 'latency_ms' is not a JSON object"),
        ({"verdict": "valid"}, "key 'verdict' is not a JSON object"),
        ({"performance": {"bs": 1}}, "key 'performance' is not a list"),
        ({"performance": [1]}, "performance[0]: not a JSON object"),
        ({"performance": [{"batch_size": 1}]}, "performance[0]: no key 'scenario'"),
        ({"performance": [{"batch_size": 1, "scenario": "offline", "clients": 1}]}, "performance[0]: no key 'verdict'"),
        ({"repetitions": {"log_dirs": []}}, "repetitions: no key 'count'"),
        ({"repetitions": {"count": 2, "figures": [{"row": "inference"}]}}, "repetitions: figures[0]: no key 'figure'"),
        ({"mfu_is_estimate": 1}, "key 'mfu_is_estimate' is not true or false"),
        ([], "not a JSON object"),
    ],
)
def test_a_key_of_the_wrong_shape_is_one_line_naming_where(change, message):
    data = {**IDENTITY, **change} if isinstance(change, dict) else change
    with pytest.raises(RecordError) as info:
        SummaryRecord.from_json(data, "s.json: results[2]")
    assert str(info.value) == f"s.json: results[2]: {message}"


def test_a_summary_names_the_list_and_place_of_its_bad_record(tmp_path):
    data = golden("digits.summary.json")
    del data["results"][0]["host"]
    (tmp_path / "summary.json").write_text(json.dumps(data))
    with pytest.raises(RecordError) as info:
        read_summary(tmp_path / "summary.json")
    assert str(info.value) == f"{tmp_path / 'summary.json'}: results[0]: no key 'host'"
    with pytest.raises(RecordError, match=r"summary\.json: aggregates\[0\]: no key 'case'"):
        Summary.from_json({"results": [], "aggregates": [{}]}, "summary.json")
    with pytest.raises(RecordError, match=r"summary\.json: no key 'results'"):
        Summary.from_json({"schema_version": 1}, "summary.json")
    with pytest.raises(RecordError, match=r"summary\.json: schema_version 2, this InferPerf reads 1"):
        Summary.from_json({"schema_version": 2, "results": []}, "summary.json")
    (tmp_path / "summary.json").write_text("{")
    with pytest.raises(RecordError, match=r"summary\.json: unreadable"):
        read_summary(tmp_path / "summary.json")


def _digits() -> SummaryRecord:
    (record,) = read_summary(SUMMARIES / "digits.summary.json").results
    return record


def test_a_repeated_case_keeps_its_repetitions_and_reads_back_the_same():
    first = _digits()
    assert first.infer_core_qps is not None
    second = SummaryRecord.from_json({**first.to_json(), "*p_inference_core(qps)": first.infer_core_qps * 1.21})
    merged = merge_repetitions([first, second])
    assert isinstance(merged.repetitions, Repetitions) and merged.repetitions.count == 2
    core = next(f for f in merged.repetitions.figures if (f.row, f.figure) == ("inference", "core qps"))
    assert isinstance(core, RepetitionFigure) and core.unit == "samples/s" and core.higher_is_better
    assert merged.infer_core_qps == pytest.approx(first.infer_core_qps * 1.1)
    data = merged.to_json()
    assert list(data)[-1] == "repetitions" and list(data)[:-1] == list(first.to_json())
    assert SummaryRecord.from_json(json.loads(json_text(data))) == merged


def test_an_aggregate_writes_its_keys_after_a_host_records_and_reads_back_the_same():
    first = _digits()
    hosts = [
        SummaryRecord.from_json({**first.to_json(), "host": host, "noderank": rank, "log_dir": None})
        for rank, host in enumerate(("10.0.0.1", "10.0.0.2"))
    ]
    repeated = merge_repetitions([hosts[0], hosts[0]])
    aggregate = aggregate_case([repeated, hosts[1]], load=lambda _: (None, {}))
    data = aggregate.to_json()
    assert list(data) == [*MINIMAL_RECORD, "repetitions", "aggregate", "hosts", "concurrent"]
    assert data["repetitions"] is None and data["hosts"] == ["10.0.0.1", "10.0.0.2"] and data["aggregate"]
    assert all(isinstance(row, AggregateRow) for row in aggregate.performance) and aggregate.performance
    assert data["performance"][0]["latency_ms"] == {}  # no raw latencies from every host: no pooled percentile
    assert aggregate.verdict == Verdict() and aggregate.infer_core_qps == pytest.approx(2 * first.infer_core_qps)
    assert SummaryRecord.from_json(json.loads(json_text(data))) == aggregate
    single = aggregate_case([hosts[0], hosts[1]], load=lambda _: (None, {})).to_json()
    assert "repetitions" not in single  # only an aggregate of repeated cases keeps the null key


def test_an_llm_block_with_its_decode_mbu_reads_back_the_same():
    (record,) = read_summary(SUMMARIES / "llm_llama.summary.json").results
    assert record.llm is not None and record.llm.rows
    assert all(isinstance(row, SummaryLLMRow) and row.mbu is None for row in record.llm.rows)
    with_mbu = add_mbu(record.llm, {"triad": {"value": 40e9}})
    assert with_mbu is not None and all(cell.mbu is not None for cell in with_mbu.table)
    data = with_mbu.to_json()
    assert list(data)[-1] == "mbu_bandwidth" and "mbu_bandwidth" not in record.llm.to_json()
    assert list(data["table"][0])[-3:] == ["decode_bytes_per_token", "decode_mbu", "decode_mbu_note"]
    assert SummaryLLM.from_json(json.loads(json_text(data))) == with_mbu
    with pytest.raises(RecordError) as info:
        SummaryRecord.from_json({**IDENTITY, "llm": {**data, "table": [{"scenario": "offline"}]}}, "s.json")
    assert str(info.value) == "s.json: llm.table[0]: no key 'batch_size'"
