"""Golden files: result.json, summary.json and summary.md are byte-for-byte what they were before the
records were typed (common/record.py), on recorded results of every kind of case.

The fixtures in tests/fixtures/golden/results/ are real result.json files written by real runs
(``run.py`` and ``run_inference.py`` on this repository, before the typed records): a vision case
(resnet50, vit, digits), bert, the llama LLM case, a ByteMLPerf workload, a ``--model`` ONNX file, a
row under MLPerf LoadGen and a base-tier case. A failed case has no result: its outcome is spelled here.

The expected summaries in tests/fixtures/golden/summaries/ were written by the host code of that
same commit. ``INFERPERF_GOLDEN_WRITE=1`` writes them again; do that only for a change of bytes
that docs/result_schema.md lists ("Changes").
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest

from common.files import json_text
from common.record import CaseResult, PerformanceRow, RecordError, read_result
from utils.case_specs import CaseSpec
from utils.executors.base import CaseOutcome, read_outcome

GOLDEN = Path(__file__).parent / "fixtures" / "golden"
RESULTS = GOLDEN / "results"
SUMMARIES = GOLDEN / "summaries"
KINDS = sorted(p.name for p in RESULTS.iterdir() if (p / "result.json").is_file())
INFERENCE = Path(__file__).resolve().parents[1] / "inference"
STARTED = datetime(2026, 11, 27, 9, 0, 0, tzinfo=timezone.utc)
FINISHED = datetime(2026, 11, 27, 9, 5, 0, tzinfo=timezone.utc)
WRITE = os.environ.get("INFERPERF_GOLDEN_WRITE") == "1"


def test_every_kind_of_case_has_a_fixture():
    assert KINDS == [
        "base_gemm",
        "bert",
        "bytemlperf_workload",
        "digits",
        "llm_llama",
        "loadgen_digits",
        "model_cnn",
        "vision_resnet50",
        "vision_vit",
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_result_json_round_trips_byte_for_byte(kind):
    raw = (RESULTS / kind / "result.json").read_text(encoding="utf-8")
    result = CaseResult.from_json(json.loads(raw))
    assert json_text(result.to_json()) == raw


@pytest.mark.parametrize("kind", KINDS)
def test_rows_are_typed_and_keyed(kind):
    result = read_result(RESULTS / kind)
    assert result is not None
    for row in result.performance:
        assert isinstance(row, PerformanceRow)
        assert row.key == (row.batch_size, row.scenario, row.clients)
        assert row.label == f"bs {row.batch_size} {row.scenario} x{row.clients}"
        assert row.verdict.valid == (not row.verdict.reasons)
    assert result.flagperf("*p_inference_core(qps)") == result.infer_core_qps


def test_loadgen_rows_keep_their_block_and_inferperf_rows_have_none():
    mlperf = read_result(RESULTS / "loadgen_digits")
    own = read_result(RESULTS / "digits")
    assert mlperf and own and mlperf.performance and own.performance
    assert {r.load_generator for r in mlperf.performance} == {"mlperf"} and all(r.loadgen for r in mlperf.performance)
    assert {r.load_generator for r in own.performance} == {"inferperf"} and not any(r.loadgen for r in own.performance)
    assert all("loadgen" not in r.to_json() for r in own.performance)


def test_a_misshapen_result_is_one_line_naming_the_file_and_key(tmp_path):
    data = json.loads((RESULTS / "digits" / "result.json").read_text(encoding="utf-8"))
    (tmp_path / "result.json").write_text(json.dumps({**data, "schema_version": 1}))
    with pytest.raises(RecordError, match=r"result\.json: schema_version 1, this InferPerf reads 2"):
        read_result(tmp_path)
    del data["case"]
    (tmp_path / "result.json").write_text(json.dumps(data))
    with pytest.raises(RecordError, match=r"result\.json: no key 'case'"):
        read_result(tmp_path)
    (tmp_path / "result.json").write_text("{")
    with pytest.raises(RecordError, match=r"result\.json: unreadable"):
        read_result(tmp_path)
    assert read_result(tmp_path / "nothing") is None


class _Clock(datetime):
    @classmethod
    def now(cls, tz=None):  # summary.json's finished_at
        return FINISHED


def _outcome(kind: str | None, run_dir: Path) -> CaseOutcome:
    """The outcome the executor reads from a case's log dir (utils/executors/base.py ``read_outcome``)."""
    if kind is None:  # a failed case: the failure.json its pipeline wrote, no result
        local = run_dir / "resnet50:pytorch" / "127.0.0.1_noderank0"
        local.mkdir(parents=True)
        failure = {"schema_version": 2, "status": "failed", "case": "resnet50", "vendor": "cpu", "step": "engine"}
        failure.update(error="boom: out of memory", exit_code=4)
        (local / "failure.json").write_text(json.dumps(failure), encoding="utf-8")
        outcome = CaseOutcome(CaseSpec("resnet50", "pytorch", "/data/resnet50"), "127.0.0.1", 0, local, wall_time_s=3.5)
        return read_outcome(outcome, 4)
    local = run_dir / kind / "127.0.0.1_noderank0"
    shutil.copytree(RESULTS / kind, local)
    data = json.loads((local / "result.json").read_text(encoding="utf-8"))
    model = data["config"].get("model_path")
    spec = CaseSpec(data["case"], "pytorch", "/data", model=Path(model).name if model else None)
    return read_outcome(CaseOutcome(spec, "127.0.0.1", 0, local, wall_time_s=12.5), 0)


def _summary(kinds: list[str | None], tmp_path: Path, monkeypatch) -> tuple[str, str]:
    from utils.results import summary

    monkeypatch.setattr(summary, "datetime", _Clock)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    outcomes = [_outcome(kind, run_dir) for kind in kinds]
    host = SimpleNamespace(
        mode="local", vendor="cpu", hosts=[SimpleNamespace(label="127.0.0.1")], flagperf_path=INFERENCE
    )
    records = summary.summary_records(outcomes, INFERENCE, "cpu")
    json_path, md_path = summary.write_summary(run_dir, "rungolden", host, records, STARTED)
    place = str(run_dir)
    return json_path.read_text(encoding="utf-8").replace(place, "<RUN>"), md_path.read_text(encoding="utf-8").replace(
        place, "<RUN>"
    )


@pytest.mark.parametrize("kind", [*KINDS, "failed"])
def test_summary_json_and_md_are_byte_identical(kind, tmp_path, monkeypatch):
    summary_json, summary_md = _summary([None if kind == "failed" else kind], tmp_path, monkeypatch)
    expected_json, expected_md = SUMMARIES / f"{kind}.summary.json", SUMMARIES / f"{kind}.summary.md"
    if WRITE:
        SUMMARIES.mkdir(exist_ok=True)
        expected_json.write_text(summary_json, encoding="utf-8")
        expected_md.write_text(summary_md, encoding="utf-8")
    assert summary_json == expected_json.read_text(encoding="utf-8")
    assert summary_md == expected_md.read_text(encoding="utf-8")
