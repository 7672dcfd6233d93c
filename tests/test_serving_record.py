"""A serving step is a typed row (``common/serving_record.py``): a run against a real loopback server
writes one ``ServingStep`` per step into summary.json, summary.md's table is drawn from them, and
``run.py compare`` decides two serving runs from those rows alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.record import RecordError
from common.serving_record import ServingStep, ServingSummary, pareto
from tests.infra.serving_summary import summary_md
from tools.serving.cli import main
from tools.serving.loopback import LoopbackServer, steady
from utils.results.compare import compare_runs


def _serving_run(out: Path, url: str) -> Path:
    argv = ["--endpoint", url, "--served-model", "m", "--concurrency", "1,2", "--num-requests", "6",
            "--warmup", "0", "--input-len", "4", "--output-len", "3", "--slo", "ttft_ms=5000",
            "--output-dir", str(out)]  # fmt: skip
    assert main(argv) == 0
    (run,) = out.iterdir()
    return run


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("serving")
    with LoopbackServer(steady(2.0, 1.0), model="m") as server:
        return _serving_run(out / "a", server.url), _serving_run(out / "b", server.url)


def test_summary_json_holds_a_typed_row_per_step_with_the_steps_figures(two_runs):
    run, _ = two_runs
    written = json.loads((run / "summary.json").read_text())
    summary = ServingSummary.from_json(written, "summary.json")
    assert summary.to_json() == written  # read back as written: one encoding
    assert [row.label for row in summary.rows] == ["concurrency 1", "concurrency 2"]
    assert [row.concurrency for row in summary.rows] == [1, 2] and summary.served_model == "m"
    steps = json.loads((run / "serving" / "result.json").read_text())["steps"]
    for row, step in zip(summary.rows, steps):
        assert isinstance(row, ServingStep) and row == ServingStep.of(step)
        assert (row.requests, row.completed, row.failed, row.output_tokens) == (6, 6, 0, 18)
        assert row.rate("output_tokens_per_s") == step["throughput"]["output_tokens_per_s"]["value"] > 0
        assert row.slo is not None and row.slo["met"] == 6 and row.verdict.valid


def test_summary_md_draws_its_table_from_the_rows(two_runs):
    run, _ = two_runs
    summary = ServingSummary.from_json(json.loads((run / "summary.json").read_text()))
    text = summary_md(run)
    for row in summary.rows:
        (line,) = [line for line in text.splitlines() if line.startswith(f"| {row.label} |")]
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        assert cells[1] == f"{row.completed}/{row.requests}"
        assert cells[5].startswith(f"{row.rate('output_tokens_per_s'):.1f} ±")
        assert cells[-1] == "VALID"


def test_compare_decides_two_serving_runs_from_their_rows_alone(two_runs, tmp_path):
    import shutil

    copies = []
    for run in two_runs:
        copy = tmp_path / run.parent.name
        shutil.copytree(run, copy)
        shutil.rmtree(copy / "serving")  # result.json gone: compare reads summary.json's rows
        copies.append(copy)
    comparison = compare_runs(copies[0], copies[1], 5.0, 0.5, allow_invalid=True)
    decided = {(line.row, line.figure) for line in comparison.lines}
    assert {row for row, _ in decided} == {"concurrency 1", "concurrency 2"}
    assert ("concurrency 2", "output tokens/s") in decided and ("concurrency 1", "TTFT p50 ms") in decided
    # B's rows doubled in output tokens/s: the comparison sees it, so the figures come from the rows
    path = copies[1] / "summary.json"
    data = json.loads(path.read_text())
    for row in data["rows"]:
        row["throughput"]["output_tokens_per_s"]["value"] *= 2  # (6 requests: no interval to move)
    path.write_text(json.dumps(data))
    moved = compare_runs(copies[0], copies[1], 5.0, 0.5, allow_invalid=True)
    before = {(line.row, line.figure): line.ratio for line in comparison.lines}
    for line in moved.lines:
        doubled = line.figure == "output tokens/s"
        assert line.ratio == pytest.approx(before[(line.row, line.figure)] * (2 if doubled else 1))


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda row: row.pop("label"), "rows[0]: no key 'label'"),
        (lambda row: row.update(completed=1.5), "rows[0]: key 'completed' is not an integer"),
        (lambda row: row.update(verdict=["valid"]), "rows[0]: key 'verdict' is not a JSON object"),
        (lambda row: row.update(ttft_ms="12 ms"), "rows[0]: key 'ttft_ms' is not a JSON object"),
    ],
)
def test_a_row_of_the_wrong_shape_is_one_line_naming_the_file_and_key(two_runs, edit, words):
    data = json.loads((two_runs[0] / "summary.json").read_text())
    edit(data["rows"][0])
    with pytest.raises(RecordError) as caught:
        ServingSummary.from_json(data, "run/summary.json")
    assert str(caught.value) == f"run/summary.json: {words}"


def test_the_pareto_front_keeps_the_steps_no_other_beats_on_both_figures():
    def step(label: str, per_user: float, total: float) -> ServingStep:
        block = {"label": label, "requests": 1, "completed": 1, "failed": 0, "errors": {},
                 "verdict": {"valid": True, "reasons": []}, "tokens_per_s_per_user": per_user,
                 "throughput": {"output_tokens_per_s": {"value": total}}}  # fmt: skip
        return ServingStep.of(block)

    steps = [step("a", 60, 20), step("b", 40, 50), step("c", 30, 40), step("d", 10, 90), step("e", 10, 80)]
    assert [s.label for s in pareto(steps)] == ["a", "b", "d"]  # c: beaten by b; e: by d (as fast per user)


def _specs(page: str) -> dict[str, dict]:
    """The page's plot specs by their figure caption."""
    import re

    found = re.findall(
        r'<script type="application/json" id="plot\d+-spec">(.*?)</script><figcaption>(.*?)</figcaption>', page
    )
    return {caption: json.loads(spec) for spec, caption in found}


def test_report_html_draws_the_rows_with_the_report_s_chart_stack(two_runs, tmp_path):
    import shutil

    from utils.results.report import write_report
    from utils.results.report.charts import rounded

    run = tmp_path / "run"
    shutil.copytree(two_runs[0], run)
    summary = ServingSummary.from_json(json.loads((run / "summary.json").read_text()))
    page = write_report(run).read_text()
    assert 'id="serving-steps"' in page and "InferPerf serving run " + summary.run_id in page
    for row in summary.rows:
        assert f'<td class="l">{row.label}</td><td>{row.completed}/{row.requests}</td>' in page
    specs = _specs(page)
    assert {"latency against load", "throughput against load"} <= set(specs)
    (tokens,) = [t for t in specs["throughput against load"]["data"] if t["name"] == "output tokens/s"]
    assert tokens["x"] == ["concurrency 1", "concurrency 2"]
    assert tokens["y"] == [round(row.rate("output_tokens_per_s"), 5) for row in summary.rows]
    # the frontier needs two steps with a TPOT (a busy machine can merge a reply's tokens into one event)
    if all(row.tpot_ms.get("p50") for row in summary.rows):
        frontier = specs["throughput-latency frontier"]["data"]
        assert [t["name"] for t in frontier] == ["steps", "frontier"] and len(frontier[0]["x"]) == 2
        assert frontier[0]["x"] == rounded(row.tpot_ms["p50"] for row in summary.rows)
    else:
        assert "throughput-latency frontier" not in specs
    assert "Plotly.newPlot" in page  # drawn by the page's one script, as every run's report


def test_run_py_endpoint_writes_the_run_s_report_html_from_its_rows(tmp_path):
    from run import main as run_main

    with LoopbackServer(steady(1.0, 0.5), model="m") as server:
        argv = ["--endpoint", server.url, "--served-model", "m", "--concurrency", "1,2", "--num-requests", "4",
                "--warmup", "0", "--output-len", "3", "--output-dir", str(tmp_path / "out")]  # fmt: skip
        assert run_main(argv) == 0
    (run,) = (tmp_path / "out").glob("run*")
    page = (run / "report.html").read_text()
    rows = ServingSummary.from_json(json.loads((run / "summary.json").read_text())).rows
    # the frontier needs two steps with a TPOT (a busy machine can merge a reply's tokens into one event)
    frontier = {"throughput-latency frontier"} if all(row.tpot_ms.get("p50") for row in rows) else set()
    timeslices = {"output tokens/s per timeslice", "TTFT p50 per timeslice"}  # no /metrics: no server plots
    assert set(_specs(page)) == {"latency against load", "throughput against load"} | frontier | timeslices
    assert "concurrency 2" in page
    from utils.history.store import Store

    store = Store.open(f"sqlite:///{tmp_path / 'out' / 'history.sqlite'}", create=False)
    try:  # the history links each step's points to the run's report.html
        reports = {p.report for points in store.points(store.all_series()).values() for p in points}
    finally:
        store.close()
    assert reports == {str(run / "report.html")}


# A serving vendor's load step (result.json's llm.serving[]): the same row as run.py --endpoint's.
VENDOR_STEP = {"label": "concurrency 4", "phase": "step", "concurrency": 4, "input_length": 128, "output_length": 64,
               "requests": 32, "completed": 32, "failed": 0,
               "ttft_ms": {"p50": 15.0, "ci95": {"p50": [14.0, 16.0]}}, "tpot_ms": {"p50": 3.0},
               "e2e_ms": {"p50": 200.0, "p90": 240.0},
               "throughput": {"requests_per_s": {"value": 4.4, "ci95": [4.0, 4.8]},
                              "output_tokens_per_s": {"value": 281.6, "ci95": [270.0, 290.0]}},
               "verdict": {"valid": True, "reasons": []}}  # fmt: skip


def _vendor_record(scale: float):
    """The recorded LLM case's summary record, served over HTTP: one load step, its throughputs x ``scale``."""
    from dataclasses import replace

    from common.summary_record import SummaryLLM, read_summary

    golden = Path(__file__).parent / "fixtures" / "golden" / "summaries" / "llm_llama.summary.json"
    (record,) = read_summary(golden).results
    assert record.llm is not None
    tokens = {"value": 281.6 * scale, "ci95": [270.0 * scale, 290.0 * scale]}
    step = {**VENDOR_STEP, "throughput": {**VENDOR_STEP["throughput"], "output_tokens_per_s": tokens}}
    data = {**record.llm.to_json(), "table": [], "server": [], "serving": [step], "served_by": {"engine": "vllm"}}
    return replace(record, llm=SummaryLLM.from_json(data), repetitions=None)


def test_a_serving_vendor_s_steps_are_figures_for_compare_repeat_and_the_history():
    from utils.results.figures import merge_repetitions, record_figures

    figures = record_figures(_vendor_record(1.0))
    assert figures[("concurrency 4", "output tokens/s")].value == 281.6
    assert figures[("concurrency 4", "output tokens/s")].interval == (270.0, 290.0)
    assert figures[("concurrency 4", "TTFT p50 ms")].interval == (14.0, 16.0)
    assert {figure for row, figure in figures if row == "concurrency 4"} == {
        "output tokens/s", "requests/s", "TTFT p50 ms", "TPOT p50 ms", "E2E p90 ms"}  # fmt: skip
    merged = merge_repetitions([_vendor_record(1.0), _vendor_record(2.0)])
    assert merged.repetitions is not None
    (tokens,) = [f for f in merged.repetitions.figures if (f.row, f.figure) == ("concurrency 4", "output tokens/s")]
    assert tokens.values == [281.6, 563.2] and tokens.higher_is_better and tokens.unit == "tokens/s"


def test_a_serving_vendor_writes_run_py_endpoint_s_row_with_the_lengths_it_asked(two_runs):
    from common.record import LLMBlock
    from tools.measure.serving_stage import ServingWorkload, _row

    endpoint_rows = json.loads((two_runs[0] / "summary.json").read_text())["rows"]
    steps = json.loads((two_runs[0] / "serving" / "result.json").read_text())["steps"]
    asked = ServingWorkload(input_length=4, output_length=3)
    rows = tuple(_row(step, asked, ["greedy check failed"]) for step in steps)
    written = LLMBlock({}, {}, serving=rows, served_by={"server": "loopback"}).to_json()["serving"]
    for vendor, endpoint in zip(written, endpoint_rows):
        assert (vendor["input_length"], vendor["output_length"]) == (4, 3)
        assert set(vendor) - set(endpoint) == {"input_length", "output_length"} and set(endpoint) <= set(vendor)
        assert vendor["verdict"]["reasons"] == [*endpoint["verdict"]["reasons"], "greedy check failed"]
        same = {key for key in endpoint if key != "verdict"}
        assert {key: vendor[key] for key in same} == {key: endpoint[key] for key in same}
    block = {"model": {}, "table": [], "server": [], "serving": written}
    assert isinstance(LLMBlock.from_json(json.loads(json.dumps(block))).serving[0], ServingStep)


def test_summary_md_draws_a_serving_vendor_s_line_from_the_row_s_throughput_block():
    from utils.results.llm_summary import serving_lines

    lines = serving_lines([_vendor_record(1.0)])
    (line,) = [line for line in lines if line.startswith("| concurrency 4 (in 128, out 64) |")]
    assert "| 281.6 ±" in line and "| 4.4 ±" in line and line.endswith("| VALID |")


def test_a_serving_vendor_s_case_section_draws_its_rows_as_an_endpoint_run_s(tmp_path):
    from dataclasses import replace

    from common.summary_record import read_summary
    from tools.serving.loopback import VllmMetrics
    from utils.results.report.sections import case_section

    with LoopbackServer(steady(5.0, 0.5), model="m", metrics=VllmMetrics(kv_cache_usage=0.5)) as server:
        run = _serving_run(tmp_path / "out", server.url)
    rows = json.loads((run / "summary.json").read_text())["rows"]
    golden = Path(__file__).parent / "fixtures" / "golden"
    result = json.loads((golden / "results" / "llm_llama" / "result.json").read_text())
    result["llm"] = {**result["llm"], "table": [], "server": [], "serving": rows, "served_by": {"server": "loopback"}}
    (tmp_path / "case").mkdir()
    (tmp_path / "case" / "result.json").write_text(json.dumps(result))
    (record,) = read_summary(golden / "summaries" / "llm_llama.summary.json").results
    section = case_section(replace(record, log_dir=str(tmp_path / "case")))
    names = {plot["name"] for plot in section["plots"]}
    assert {"latency against load", "throughput against load", "output tokens/s per timeslice",
            "server kv-cache use over each step"} <= names  # fmt: skip
    (table,) = section["tables"]
    assert [row["step"] for row in table["rows"]] == ["concurrency 1", "concurrency 2"]
    assert table["rows"][0]["kv_cache_mean_peak"] == "50.0 % / 50.0 %"
    assert any(note.startswith("TTFT cross-check, concurrency 1: client mean") for note in table["notes"])
