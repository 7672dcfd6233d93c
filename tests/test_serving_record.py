"""A serving step is a typed row (``common/serving_record.py``): a run against a real loopback server
writes one ``ServingStep`` per step into summary.json, summary.md's table is drawn from them, and
``run.py compare`` decides two serving runs from those rows alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.record import RecordError
from common.serving_record import ServingStep, ServingSummary, pareto
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
    text = (run / "summary.md").read_text()
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
        (lambda row: row.update(completed=1.5), "rows[0]: key 'completed' is float, not int"),
        (lambda row: row.update(verdict=["valid"]), "rows[0]: key 'verdict' is list, not dict"),
        (lambda row: row.update(ttft_ms="12 ms"), "rows[0]: key 'ttft_ms' is str, not dict"),
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

    steps = [step("a", 60, 20), step("b", 40, 50), step("c", 30, 40), step("d", 10, 90), step("e", 10, 90)]
    assert [s.label for s in pareto(steps)] == ["a", "b", "d", "e"]  # c: beaten by b; equal points both stay
