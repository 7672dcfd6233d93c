"""The run's exports (``tools/serving/exports.py``): every request as a JSON line, every step as a CSV row,
and the timesliced figures (``tools/serving/figures.py::timeslices``), against real loopback servers and on
records with known times. Nothing is judged by the wall clock: the slices' sums are checked against the
step's own totals, and the slice arithmetic on records whose every time is given."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from tools.measure import serving_stage
from tools.serving.cli import main
from tools.serving.client import RequestRecord
from tools.serving.exports import STEP_COLUMNS, request_lines, steps_csv
from tools.serving.figures import timeslices
from tools.serving.loopback import LoopbackServer, Plan, steady


def _run(tmp_path: Path, url: str, *extra: str) -> int:
    return main(["--endpoint", url, "--served-model", "m", "--output-dir", str(tmp_path)] + list(extra))


def _run_dir(tmp_path: Path) -> Path:
    (run,) = [p for p in tmp_path.glob("run*") if p.is_dir()]
    return run


def _some_fail(index: int, body: dict, in_flight: int) -> Plan:
    if index % 4 == 3:
        return Plan(status=500)
    return Plan(gaps_s=[0.0] * (int(body["max_tokens"]) - 1))


def test_requests_jsonl_has_one_line_per_request_with_its_timings_tokens_and_error_kind(tmp_path):
    with LoopbackServer(_some_fail, model="m") as server:
        code = _run(
            tmp_path, server.url, "--concurrency", "1,2", "--num-requests", "8", "--output-len", "5",
            "--warmup", "0", "--max-error-rate", "0.5",
        )  # fmt: skip
    assert code == 0
    run = _run_dir(tmp_path)
    result = json.loads((run / "serving" / "result.json").read_text())
    lines = [json.loads(line) for line in (run / "serving" / "requests.jsonl").read_text().splitlines()]
    assert len(lines) == sum(s["requests"] for s in result["steps"]) == 16
    assert {line["step"] for line in lines} == {"concurrency 1", "concurrency 2"}
    assert {line["phase"] for line in lines} == {"step"}
    failed = [line for line in lines if not line["ok"]]
    assert len(failed) == sum(s["failed"] for s in result["steps"]) == 4
    assert {line["error_kind"] for line in failed} == {"http_500"} and all(line["error_detail"] for line in failed)
    done = [line for line in lines if line["ok"]]
    for line in done:
        assert line["error_kind"] is None and line["output_tokens"] == 5 and line["token_source"] == "usage"
        assert line["ttft_ms"] >= 0 and line["e2e_ms"] >= line["ttft_ms"] and len(line["itl_ms"]) == 4
        assert line["sent_ms"] >= 0 and line["finish_reason"] == "length" and line["answer_tokens"] == 5
    # the same requests as result.json's records, field for field
    for step in result["steps"]:
        ours = [line for line in lines if line["step"] == step["label"]]
        theirs = result["records"][step["label"]]
        assert [line["ttft_ms"] for line in ours] == [r["ttft_ms"] for r in theirs]
        assert [line["index"] for line in ours] == [r["index"] for r in theirs]
        assert min(line["sent_ms"] for line in ours) == 0.0


def test_steps_csv_has_one_row_per_step_matching_result_json(tmp_path):
    with LoopbackServer(steady(2.0, 1.0), model="m") as server:
        code = _run(
            tmp_path, server.url, "--concurrency", "1,3", "--num-requests", "6", "--output-len", "4",
            "--slo", "ttft_ms=1000",
        )  # fmt: skip
    assert code == 0
    run = _run_dir(tmp_path)
    result = json.loads((run / "serving" / "result.json").read_text())
    rows = list(csv.DictReader(io.StringIO((run / "serving" / "steps.csv").read_text())))
    assert list(rows[0]) == list(STEP_COLUMNS)
    assert [r["step"] for r in rows] == ["concurrency 1", "concurrency 3"]
    for row, step in zip(rows, result["steps"]):
        assert row["phase"] == "step" and int(row["concurrency"]) == step["load"]["concurrency"]
        assert int(row["requests"]) == step["requests"] and int(row["completed"]) == step["completed"]
        assert float(row["output_tokens_per_s"]) == pytest.approx(step["throughput"]["output_tokens_per_s"]["value"])
        assert float(row["ttft_ms_p50"]) == pytest.approx(step["ttft_ms"]["p50"])
        assert float(row["slo_attainment"]) == step["slo"]["attainment"] and row["valid"] in ("True", "False")
        assert row["server"] == "not exposed"  # the loopback without VllmMetrics serves no /metrics
        assert row["server_kv_cache_usage_mean"] == "not exposed"
    assert result["exports"] == {"requests": "serving/requests.jsonl", "steps": "serving/steps.csv"}


def test_capacity_probes_are_exported_as_their_own_phase(tmp_path):
    # one request in flight: TTFT 1 ms, 200 times under the SLO, so a busy machine cannot make it miss; two
    # or more: 401 ms and up, which only more delay could add to: at least two probes, whatever the load
    with LoopbackServer(steady(1.0, 0.0, slope_ms=400.0), model="m") as server:
        code = _run(
            tmp_path, server.url, "--capacity", "concurrency:1:3", "--slo", "ttft_ms=200,percentile=100",
            "--num-requests", "4", "--output-len", "2", "--warmup", "0",
        )  # fmt: skip
    assert code == 0
    run = _run_dir(tmp_path)
    result = json.loads((run / "serving" / "result.json").read_text())
    rows = list(csv.DictReader(io.StringIO((run / "serving" / "steps.csv").read_text())))
    probes = [r for r in rows if r["phase"] == "capacity"]
    assert len(probes) == len(result["capacity_steps"]) >= 2
    lines = [json.loads(line) for line in (run / "serving" / "requests.jsonl").read_text().splitlines()]
    assert {line["phase"] for line in lines} == {"capacity"}
    assert len(lines) == sum(s["requests"] for s in result["capacity_steps"])


def _record(sent_ms: float, token_ms: list[float], tokens: int, ok: bool = True) -> RequestRecord:
    ns = lambda ms: round(ms * 1e6)
    record = RequestRecord(0, sent_ns=ns(sent_ms), token_ns=[ns(t) for t in token_ms], output_tokens=tokens)
    record.end_ns = ns(token_ms[-1]) if token_ms else ns(sent_ms)
    if not ok:
        record.error = {"kind": "http_500", "detail": "x"}
    return record


def test_timeslices_count_each_token_where_it_arrived_and_each_ttft_where_it_was_sent():
    records = [
        _record(0, [10, 20, 30, 40], 4),  # window 0..100 ms in 4 slices of 25 ms
        _record(50, [60, 100], 8),  # two events of 4 tokens each
        _record(30, [35], 1, ok=False),  # failed: sent, not completed, no tokens
    ]
    out = timeslices(records, 4)
    assert out["slices"] == 4 and out["width_s"] == pytest.approx(0.025)
    items = out["items"]
    assert [i["output_tokens"] for i in items] == [2.0, 2.0, 4.0, 4.0]
    assert [i["output_tokens_per_s"] for i in items] == pytest.approx([80.0, 80.0, 160.0, 160.0])
    assert [i["requests_sent"] for i in items] == [1, 1, 1, 0]
    assert [i["requests_completed"] for i in items] == [0, 1, 0, 1]
    assert [i["ttft_ms"]["p50"] for i in items] == [10.0, None, 10.0, None]
    assert sum(i["output_tokens"] for i in items) == 12  # every completed token, once


def test_timeslices_of_nothing_and_of_one_instant():
    assert timeslices([], 5)["items"] == []
    assert timeslices([_record(0, [], 0, ok=False)], 5)["items"] == []


def test_timeslices_in_result_json_and_the_report_sum_to_the_step(tmp_path):
    with LoopbackServer(steady(3.0, 1.0), model="m") as server:
        code = _run(tmp_path, server.url, "--concurrency", "2", "--num-requests", "10", "--output-len", "6",
                    "--timeslices", "3")  # fmt: skip
    assert code == 0
    run = _run_dir(tmp_path)
    result = json.loads((run / "serving" / "result.json").read_text())
    step = result["steps"][0]
    sliced = step["timeslices"]
    assert result["timeslices"] == 3 and sliced["slices"] == 3 and len(sliced["items"]) == 3
    assert sum(i["output_tokens"] for i in sliced["items"]) == pytest.approx(step["output_tokens"])
    assert sum(i["requests_sent"] for i in sliced["items"]) == step["requests"]
    assert sum(i["requests_completed"] for i in sliced["items"]) == step["completed"]
    assert sum(i["ttft_ms"]["count"] for i in sliced["items"]) == step["completed"]
    assert sliced["width_s"] * 3 == pytest.approx(step["duration_s"])
    from utils.results.report import write_report

    (row,) = json.loads((run / "summary.json").read_text())["rows"]
    assert row["timeslices"] == sliced  # the row the run's report.html draws
    report = write_report(run).read_text()
    assert 'aria-label="output tokens/s per timeslice"' in report and 'aria-label="TTFT p50 per timeslice"' in report


@pytest.mark.parametrize("value", ["0", "1001"])
def test_a_bad_timeslice_count_is_refused_before_any_request(tmp_path, capsys, value):
    with LoopbackServer(steady(0.0, 0.0), model="m") as server:
        assert _run(tmp_path, server.url, "--timeslices", value) == 2
        assert server.requests == 0
    assert "--timeslices" in capsys.readouterr().err and not list(tmp_path.glob("run*"))


def test_request_lines_and_steps_csv_by_themselves():
    records = [_record(5, [7, 9], 2), _record(6, [], 0, ok=False)]
    lines = [json.loads(line) for line in request_lines("step", "concurrency 2", records)]
    assert [line["sent_ms"] for line in lines] == [0.0, 1.0]
    assert [line["error_kind"] for line in lines] == [None, "http_500"]
    text = steps_csv([("step", {"label": "x", "server_metrics": {"exposed": True, "preemptions": "not exposed"}})])
    (row,) = csv.DictReader(io.StringIO(text))
    assert row["step"] == "x" and row["server_preemptions"] == "not exposed" and row["requests_per_s"] == ""


def test_the_serving_vendor_writes_the_same_exports_into_the_case_log(tmp_path):
    block = {"label": "concurrency 1", "load": {"concurrency": 1}, "requests": 2, "_records": [_record(0, [1], 1)]}
    serving_stage.write_exports(str(tmp_path), [block])
    (line,) = (tmp_path / "serving_requests.jsonl").read_text().splitlines()
    assert json.loads(line)["step"] == "concurrency 1"
    rows = list(csv.DictReader(io.StringIO((tmp_path / "serving_steps.csv").read_text())))
    assert [r["step"] for r in rows] == ["concurrency 1"] and rows[0]["requests"] == "2"
