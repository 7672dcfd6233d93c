"""summary.json's records (common/summary_record.py): every recorded summary reads back into its types and
writes the same bytes; what a key left out becomes; the one line naming the file and key when a needed
key is missing or has the wrong type; an aggregate's and a repeated case's shape. The summaries are
written byte for byte in tests/test_golden_results.py; these are the read side and the edges."""

from __future__ import annotations

import json
from dataclasses import replace
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
    assert str(info.value) == "s.json: llm: table[0]: no key 'batch_size'"


# The edges one by one (found by mutation testing, docs/testing.md): each default place name, each
# default a key left out takes, the properties, and what stays out of the JSON unless it is there.


@pytest.mark.parametrize(
    "parse, message",
    [
        (lambda: SummaryRow.from_json({}), "performance row: no key 'batch_size'"),
        (lambda: AggregateRow.from_json({}), "aggregate row: no key 'batch_size'"),
        (lambda: RepetitionFigure.from_json([]), "figure: not a JSON object"),
        (lambda: RepetitionFigure.from_json({}), "figure: no key 'row'"),
        (lambda: Repetitions.from_json({}), "repetitions: no key 'count'"),
        (lambda: SummaryRecord.from_json({}), "summary record: no key 'case'"),
        (lambda: SummaryRecord.from_json(0), "summary record: not a JSON object"),
        (lambda: Summary.from_json([]), "summary.json: not a JSON object"),
        (lambda: Summary.from_json({}), "summary.json: no key 'results'"),
        (lambda: SummaryLLM.from_json({"model": {}, "workload": {}}), "llm: no key"),
    ],
)
def test_each_record_names_itself_when_no_place_is_given(parse, message):
    with pytest.raises(RecordError) as info:
        parse()
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"batchsize": 1.5}, "key 'batchsize' is not an integer or a string"),
        ({"batchsize": True}, "key 'batchsize' is not an integer or a string"),
        ({"log_dir": 3}, "key 'log_dir' is not a string"),
        ({"latency_notes": "slow"}, "key 'latency_notes' is not a list"),
        ({"wall_time_s": True}, "key 'wall_time_s' is not a number"),
        ({"aggregate": "yes"}, "key 'aggregate' is not true or false"),
        ({"hosts": "h"}, "key 'hosts' is not a list"),
        ({"concurrent": 1}, "key 'concurrent' is not true or false"),
        ({"repetitions": [2]}, "key 'repetitions' is not a JSON object"),
        ({"llm": {"model": {}, "workload": {}, "table": [], "server": [{}]}}, "llm: server[0]: no key"),
    ],
)
def test_more_keys_of_the_wrong_shape(change, message):
    with pytest.raises(RecordError) as info:
        SummaryRecord.from_json({**IDENTITY, **change}, "s.json")
    assert str(info.value).startswith(f"s.json: {message}")


def test_the_types_a_key_may_have_and_null():
    record = SummaryRecord.from_json(
        {**IDENTITY, "noderank": None, "batchsize": "mixed", "wall_time_s": 3, "latency_ms": {}, "hosts": None}
    )
    assert record.noderank is None and record.identity == ("digits", "pytorch", None)
    assert record.batchsize == "mixed" and record.wall_time_s == 3
    assert record.latency_ms is None  # an empty block is no latency, not a block of nulls
    assert SummaryRecord.from_json({**IDENTITY, "batchsize": 8}).batchsize == 8


def test_an_aggregate_row_with_only_its_identity_and_verdict():
    row = AggregateRow.from_json({"batch_size": 2, "scenario": "server", "clients": 4})
    assert row.key == (2, "server", 4) and row.latency_ci95 == {}
    assert (row.queries, row.samples, row.latency_notes, row.latency_ms) == (0, 0, [], None)
    assert row.verdict == Verdict() and row.verdict.valid
    assert (row.qps_ci95, row.duration_s, row.load_generator) == (None, None, "inferperf")
    data = row.to_json()
    assert data["latency_ms"] == {} and data["verdict"] == {"valid": True, "reasons": []}
    assert list(data) == [
        "batch_size",
        "scenario",
        "clients",
        "qps",
        "queries",
        "samples",
        "latency_ms",
        "latency_notes",
        "pooled_queries",
        "target_qps",
        "latency_bound_met",
        "MFU",
        "MFU_note",
        "verdict",
    ]
    full = {
        **data,
        "qps": 10.5,
        "queries": 7,
        "samples": 14,
        "latency_ms": {"p50": 1.0},
        "latency_notes": ["n"],
        "pooled_queries": 7,
        "target_qps": 9,
        "latency_bound_met": False,
        "MFU": 0.5,
        "MFU_note": "m",
        "verdict": {"valid": False, "reasons": ["r"]},
    }
    again = AggregateRow.from_json(full)
    assert again.to_json() == {**full, "latency_ms": again.latency_ms.to_json()}
    assert again.latency_ms.p50 == 1.0 and not again.verdict.valid and again.latency_bound_met is False


def test_a_repetition_figure_with_only_what_it_needs():
    data = {"row": "inference", "figure": "core qps", "values": [1.0], "intervals": [None], "valid": [True]}
    figure = RepetitionFigure.from_json({**data, "geomean": 1.0})
    assert (figure.unit, figure.higher_is_better, figure.ci95, figure.spread) == ("", False, None, None)
    assert RepetitionFigure.from_json({**data, "geomean": 1, "higher_is_better": True}).higher_is_better is True
    assert figure.to_json() == {
        **data,
        "unit": "",
        "higher_is_better": False,
        "geomean": 1.0,
        "ci95": None,
        "spread": None,
    } and list(figure.to_json())[:4] == ["row", "figure", "unit", "higher_is_better"]
    with pytest.raises(RecordError, match=r"^f: key 'geomean' is null$"):
        RepetitionFigure.from_json({**data, "geomean": None}, "f")
    block = Repetitions.from_json({"count": 1})
    assert (block.log_dirs, block.wall_time_s, block.figures) == ([], [], ())
    assert block.to_json() == {"count": 1, "log_dirs": [], "wall_time_s": [], "figures": []}


def test_a_record_s_verdict_decides_invalid_and_success_is_the_status():
    valid = SummaryRecord(**IDENTITY, verdict=Verdict())
    invalid = SummaryRecord(**IDENTITY, verdict=Verdict(reasons=("drift",)))
    failed = SummaryRecord(**{**IDENTITY, "status": "failed"})
    assert not valid.invalid and invalid.invalid and not failed.invalid
    assert valid.succeeded and not failed.succeeded
    summary = Summary(results=(valid, invalid, failed), aggregates=(valid,))
    assert (summary.succeeded, summary.failed, summary.invalid) == (2, 1, 1)
    data = summary.to_json()
    assert (data["succeeded"], data["failed"], data["invalid"]) == (2, 1, 1)
    assert list(data) == [
        "schema_version",
        "run_id",
        "mode",
        "vendor",
        "hosts",
        "started_at",
        "finished_at",
        "succeeded",
        "failed",
        "invalid",
        "results",
        "aggregates",
    ]
    assert len(data["aggregates"]) == 1 and data["schema_version"] == 1


def test_a_summary_with_only_its_results():
    summary = Summary.from_json({"results": []})
    assert summary == Summary(results=()) and summary.hosts == [] and summary.schema_version == 1
    full = Summary.from_json(
        {
            "schema_version": 1,
            "run_id": "r",
            "mode": "local",
            "vendor": "cpu",
            "hosts": ["h"],
            "started_at": "s",
            "finished_at": "f",
            "results": [IDENTITY],
        }
    )
    assert (full.run_id, full.mode, full.vendor, full.hosts, full.started_at, full.finished_at) == (
        "r",
        "local",
        "cpu",
        ["h"],
        "s",
        "f",
    )
    with pytest.raises(RecordError, match=r"^s: key 'run_id' is not a string$"):
        Summary.from_json({"results": [], "run_id": 1}, "s")
    with pytest.raises(RecordError, match=r"^s: key 'aggregates' is not a list$"):
        Summary.from_json({"results": [], "aggregates": {}}, "s")


def test_llm_rows_keep_their_summary_figures_and_the_optional_keys_stay_out():
    (record,) = read_summary(SUMMARIES / "llm_llama.summary.json").results
    llm = record.llm
    assert llm is not None and llm.rows == (*llm.table, *llm.server) and llm.table
    cell = llm.table[0]
    figures = {"prefill_mfu": 0.1, "prefill_mfu_note": "p", "decode_mfu": 0.2, "decode_mfu_note": "d"}
    data = {**cell.to_json(), **figures}
    again = SummaryLLMRow.from_json(data, "w")
    assert (again.prefill_mfu, again.prefill_mfu_note, again.decode_mfu, again.decode_mfu_note) == (0.1, "p", 0.2, "d")
    assert again.mbu is None and "decode_mbu" not in again.to_json()
    assert {k: again.to_json()[k] for k in figures} == figures
    with_mbu = SummaryLLMRow.from_json(
        {**data, "decode_bytes_per_token": 8.0, "decode_mbu": 0.3, "decode_mbu_note": None}, "w"
    )
    assert with_mbu.mbu is not None and (with_mbu.mbu.bytes_per_token, with_mbu.mbu.mbu) == (8.0, 0.3)
    with pytest.raises(RecordError, match=r"^w: key 'decode_mfu' is not a number$"):
        SummaryLLMRow.from_json({**data, "decode_mfu": "x"}, "w")
    assert "serving" not in llm.to_json() and "served_by" not in llm.to_json()
    served = SummaryLLM(model={}, workload={}, served_by={"engine": "vllm"})
    assert served.to_json()["serving"] == [] and served.to_json()["served_by"] == {"engine": "vllm"}
    with pytest.raises(RecordError, match=r"^llm: key 'mbu_bandwidth' is not a string$"):
        SummaryLLM.from_json({**llm.to_json(), "mbu_bandwidth": 5})


AGGREGATE_ROW = {"batch_size": 1, "scenario": "offline", "clients": 1}
FIGURE = {"row": "r", "figure": "f", "values": [1.0], "intervals": [None], "valid": [True], "geomean": 1.0}
EXPECTED = {
    int: ("an integer", 3, "3"),
    str: ("a string", "s", 3),
    bool: ("true or false", True, 1),
    list: ("a list", ["x"], "x"),
    dict: ("a JSON object", {"p50": 2.0}, ["x"]),
    float: ("a number", 2.5, "2.5"),  # int or float
}
# (what is parsed, its other keys, key, type of the key's value, the attribute it is read into)
KEYS = [
    *[
        ("aggregate", AGGREGATE_ROW, key, kind, name)
        for key, kind, name in [
            ("batch_size", int, "batch_size"),
            ("scenario", str, "scenario"),
            ("clients", int, "clients"),
            ("qps", float, "qps"),
            ("queries", int, "queries"),
            ("samples", int, "samples"),
            ("latency_notes", list, "latency_notes"),
            ("pooled_queries", int, "pooled_queries"),
            ("target_qps", float, "target_qps"),
            ("latency_bound_met", bool, "latency_bound_met"),
            ("MFU", float, "mfu"),
            ("MFU_note", str, "mfu_note"),
            ("latency_ms", dict, "latency_ms"),
            ("verdict", dict, "verdict"),
        ]
    ],
    ("row", {**AGGREGATE_ROW, "verdict": {"valid": True, "reasons": []}}, "MFU", float, "mfu"),
    ("row", {**AGGREGATE_ROW, "verdict": {"valid": True, "reasons": []}}, "MFU_note", str, "mfu_note"),
    *[
        ("figure", FIGURE, key, kind, key)
        for key, kind in [
            ("row", str),
            ("figure", str),
            ("unit", str),
            ("higher_is_better", bool),
            ("values", list),
            ("intervals", list),
            ("valid", list),
            ("geomean", float),
            ("ci95", list),
            ("spread", float),
        ]
    ],
    *[
        ("repetitions", {"count": 1}, key, kind, key)
        for key, kind in [("count", int), ("log_dirs", list), ("wall_time_s", list), ("figures", list)]
    ],
    *[
        ("summary", {"results": []}, key, kind, key)
        for key, kind in [
            ("run_id", str),
            ("mode", str),
            ("vendor", str),
            ("hosts", list),
            ("started_at", str),
            ("finished_at", str),
            ("results", list),
            ("aggregates", list),
        ]
    ],
]
PARSE = {
    "aggregate": AggregateRow.from_json,
    "row": SummaryRow.from_json,
    "figure": RepetitionFigure.from_json,
    "repetitions": Repetitions.from_json,
    "summary": Summary.from_json,
}


@pytest.mark.parametrize("parsed, others, key, kind, name", KEYS, ids=[f"{k[0]}-{k[2]}" for k in KEYS])
def test_each_key_is_read_into_its_attribute_and_refused_when_of_another_type(parsed, others, key, kind, name):
    expected, good, bad = EXPECTED[kind]
    with pytest.raises(RecordError) as info:
        PARSE[parsed]({**others, key: bad}, "w.json: x")
    assert str(info.value) == f"w.json: x: key {key!r} is not {expected}"
    good = GOOD.get((parsed, key), good)
    value = getattr(PARSE[parsed]({**others, key: good}), name)
    assert (READ[key](value) if key in READ else value) == good


# Values of a key a plain value cannot stand for, and how each is read back from its record.
GOOD = {
    ("figure", "figure"): "g",  # the other keys' "s" would not tell the two apart
    ("aggregate", "verdict"): {"valid": False, "reasons": ["r"]},
    ("summary", "results"): [IDENTITY],
    ("summary", "aggregates"): [IDENTITY],
    ("repetitions", "figures"): [{**FIGURE, "unit": "", "higher_is_better": False, "ci95": None, "spread": None}],
}
READ = {
    "latency_ms": lambda block: {"p50": block.p50},
    "verdict": lambda verdict: verdict.to_json(),
    "results": lambda records: [{k: r.to_json()[k] for k in IDENTITY} for r in records],
    "aggregates": lambda records: [{k: r.to_json()[k] for k in IDENTITY} for r in records],
    "figures": lambda figures: [f.to_json() for f in figures],
}


LLM_ROW_KEYS = {
    "prefill_mfu": float,
    "prefill_mfu_note": str,
    "decode_mfu": float,
    "decode_mfu_note": str,
    "decode_bytes_per_token": float,
    "decode_mbu": float,
    "decode_mbu_note": str,
}


@pytest.mark.parametrize("key", LLM_ROW_KEYS)
def test_each_summary_key_of_an_llm_row_is_read_and_refused_when_of_another_type(key):
    (record,) = read_summary(SUMMARIES / "llm_llama.summary.json").results
    assert record.llm is not None
    cell = record.llm.table[0]
    expected, good, bad = EXPECTED[LLM_ROW_KEYS[key]]
    data = {**cell.to_json(), "decode_bytes_per_token": 1.0}
    with pytest.raises(RecordError) as info:
        SummaryLLMRow.from_json({**data, key: bad}, "w.json: llm: table[0]")
    assert str(info.value) == f"w.json: llm: table[0]: key {key!r} is not {expected}"
    row = SummaryLLMRow.from_json({**data, key: good}, "w")
    assert row.to_json()[key] == good


def test_an_llm_block_served_over_http_keeps_its_optional_keys_each_alone():
    (record,) = read_summary(SUMMARIES / "llm_llama.summary.json").results
    assert record.llm is not None
    served = replace(record.llm, served_by={"engine": "vllm"})
    assert served.to_json()["serving"] == [] and served.to_json()["served_by"] == {"engine": "vllm"}
    assert SummaryLLM.from_json(json.loads(json_text(served.to_json()))) == served


def test_an_llm_block_s_server_rows_and_serving_steps_read_back_with_their_places():
    (record,) = read_summary(SUMMARIES / "llm_llama.summary.json").results
    assert record.llm is not None
    block = record.llm.to_json()
    server_row = {**block["table"][0], "decode_mfu": 0.125, "decode_mfu_note": "server"}
    step = {"label": "concurrency 4", "phase": "step", "concurrency": 4, "verdict": {"valid": True, "reasons": []},
            "requests": 9}  # fmt: skip
    data = {**block, "server": [server_row], "serving": [step], "served_by": None}
    llm = SummaryLLM.from_json(json.loads(json_text(data)), "s.json: llm")
    assert llm is not None and len(llm.server) == 1 and llm.rows[-1] is llm.server[0]
    assert (llm.server[0].decode_mfu, llm.server[0].decode_mfu_note) == (0.125, "server")
    assert [(s.concurrency, s.requests) for s in llm.serving] == [(4, 9)] and llm.served_by is None
    assert llm.to_json()["server"] == [server_row] and llm.to_json()["serving"][0]["requests"] == 9
    for rows in ("table", "server"):
        bad = {**data, rows: [{**server_row, "prefill_mfu": "x"}]}
        with pytest.raises(RecordError) as info:
            SummaryLLM.from_json(bad, "s.json: llm")
        assert str(info.value) == f"s.json: llm: {rows}[0]: key 'prefill_mfu' is not a number"


def test_an_aggregate_record_writes_whether_its_hosts_ran_together():
    record = SummaryRecord(**IDENTITY, aggregate=True, hosts=["a", "b"], concurrent=True)
    data = record.to_json()
    assert (data["aggregate"], data["hosts"], data["concurrent"]) == (True, ["a", "b"], True)
    assert SummaryRecord.from_json(data) == record
    with pytest.raises(RecordError, match=r"^s: key 'schema_version' is not an integer$"):
        Summary.from_json({"results": [], "schema_version": "1"}, "s")
