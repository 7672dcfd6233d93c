"""An LLM case's ``llm`` block as records (common/record.py ``LLMBlock``, ``LLMRow``): built by the
stage (tools/measure/llm_stage.py), each kind of row round-trips in its own key order, and a
misshapen one is one line naming the file and key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.files import json_text
from common.record import LLMBlock, LLMRow, RecordError, Verdict, read_result
from contract.llm_workload import LLMWorkload, PromptSource
from tests.infra.clocks import FakeClock
from tests.infra.llm_rig import SleepyEngine, llm_config
from tools.measure.llm import GenerationFigures, ModelShape
from tools.measure.llm_stage import Limits, LLMReport, Schedule, run_server, run_table

LLAMA = Path(__file__).parent / "fixtures" / "golden" / "results" / "llm_llama"
SHAPE = ModelShape(1, 8, 2, 1, 4, 16, 32, 1000, 256)
FIGURES = [
    "queries",
    "requests",
    "duration_s",
    "ttft_ms",
    "tpot_ms",
    "itl_ms",
    "e2e_ms",
    "prefill_ms",
    "prefill_tokens_per_s",
    "decode_tokens_per_s",
    "output_tokens_per_s",
    "requests_per_s",
    "prefill_flops_per_s",
    "decode_flops_per_s",
    "scenario",
]
TAIL = ["stop_reason", "window_output_tokens_per_s", "output_tokens_per_s_ci95", "precision", "verdict"]
CELL_KEYS = [*FIGURES, "batch_size", "input_length", "output_length", "kv_cache_mib", "contention", *TAIL]
SERVER_KEYS = [
    *FIGURES,
    "target_qps",
    "issued_qps",
    "input_length_range",
    "output_length_range",
    "length_distribution",
    "bound_percentile",
    "ttft_bound_ms",
    "tpot_bound_ms",
    "kv_cache_mib",
    "contention",
    "ttft_bound_met",
    "tpot_bound_met",
    *TAIL,
]


def _round_trip(row: LLMRow) -> dict:
    data = json.loads(json.dumps(row.to_json()))
    again = LLMRow.from_json(data)
    assert again == row and json_text(again.to_json()) == json_text(data)
    return data


@pytest.fixture(scope="module")
def rows() -> tuple[LLMRow, LLMRow]:
    """An offline cell and a server row as the stage builds them (engines with no delay / a fake clock)."""
    config = llm_config(batch_sizes=[2], precision=10.0)
    workload, limits = LLMWorkload.from_config(config), Limits.from_config(config)
    prompts = PromptSource(3, 50, 0)
    (cell,) = run_table(SleepyEngine(0.0, 0.0), SHAPE, prompts, workload, limits, ["engine says no"])
    clock = FakeClock()
    server = run_server(
        SleepyEngine(0.02, 0.005, sleep=clock.sleep),
        SHAPE,
        prompts,
        workload,
        2.0,
        limits,
        [],
        Schedule(clock=clock, sleep=clock.sleep),
    )
    return cell, server


def test_an_offline_cell_and_a_server_row_round_trip_each_in_its_own_order(rows):
    cell, server = rows
    assert list(_round_trip(cell)) == CELL_KEYS
    assert list(_round_trip(server)) == SERVER_KEYS
    assert (cell.batch_size, cell.input_length, cell.output_length, cell.target_qps) == (2, 16, 4, None)
    assert not cell.scheduled and server.scheduled and server.target_qps == 2.0 and server.ttft_bound_met is True
    assert cell.label == "llm bs 2 in 16 out 4" and server.label == "llm server @2 req/s"
    assert isinstance(cell.verdict, Verdict) and "engine says no" in cell.verdict.reasons


def test_the_report_hands_result_json_a_block_and_labels_its_reasons(rows):
    cell, server = rows
    report = LLMReport(model={"layers": 1}, workload={"output_length": 4}, table=[cell], server=[server])
    block = report.to_dict()["llm"]
    assert isinstance(block, LLMBlock) and block.rows == (cell, server)
    assert list(block.to_json()) == ["model", "workload", "table", "server", "greedy"]
    assert LLMBlock.from_json(json.loads(json.dumps(block.to_json()))) == block
    assert report.labelled_reasons() == [(cell.label, list(cell.verdict.reasons)), (server.label, [])]


def test_figures_without_a_shape_have_no_flops_keys_and_stay_without(rows):
    cell, _ = rows
    data = cell.to_json()
    del data["prefill_flops_per_s"], data["decode_flops_per_s"]
    row = LLMRow.from_json(data)
    assert not row.flops_known and json_text(row.to_json()) == json_text(data)
    assert "prefill_flops_per_s" not in GenerationFigures([], 0).to_dict()


def test_the_recorded_llm_case_is_typed():
    result = read_result(LLAMA)
    assert result is not None and isinstance(result.llm, LLMBlock)
    assert [(c.batch_size, c.input_length, c.output_length) for c in result.llm.table] == [(1, 16, 4), (2, 16, 4)]
    raw = json.loads((LLAMA / "result.json").read_text(encoding="utf-8"))["llm"]
    assert json_text(result.llm.to_json()) == json_text(raw)


@pytest.mark.parametrize(
    "spoil, message",
    [
        (lambda llm: llm["table"][1].pop("verdict"), r"llm: table\[1\]: no key 'verdict'"),
        (lambda llm: llm["table"][0].pop("input_length"), r"llm: table\[0\]: no key 'input_length'"),
        (lambda llm: llm["table"][0].update(scenario="batchy"), r"llm: table\[0\]: key 'scenario': unknown scenario"),
        (
            lambda llm: llm["server"].append({"scenario": "server", "verdict": {}}),
            r"llm: server\[0\]: no key 'target_qps'",
        ),
        (lambda llm: llm.pop("table"), r": llm: no key 'table'"),
        (lambda llm: llm.update(server=[3]), r"llm: server\[0\]: not a JSON object"),
    ],
)
def test_a_misshapen_llm_block_is_one_line_naming_the_file_and_key(tmp_path, spoil, message):
    data = json.loads((LLAMA / "result.json").read_text(encoding="utf-8"))
    spoil(data["llm"])
    (tmp_path / "result.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(RecordError, match=message) as info:
        read_result(tmp_path)
    assert str(tmp_path / "result.json") in str(info.value) and "\n" not in str(info.value)
