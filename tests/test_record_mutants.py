"""The records, the cache's seals, the ONNX external-data reader and the log sink at the edges the
rest of the fast suite left open (mutation testing, docs/testing.md): what a result.json row keeps
through a read and a write, the one line a misshapen serving row gets, which checksum file a cache
accepts, what eviction removes, where an ONNX model's weights are found, and how a log file fails."""

from __future__ import annotations

import errno
import hashlib
import json
import locale
from pathlib import Path
from typing import Iterator

import pytest

from common.files import LogFileSink
from common.onnx_files import has_external_marker, onnx_external_locations
from common.record import RESULT_FILE, LLMBlock, LLMRow, PerformanceRow, RecordError, ServingStep, read_result
from contract.cache import evict, onnx_digests, onnx_external_files, probe, reuse, seal, seal_path
from tests.result_records import performance_row, result_json

FULL = Path("/dev/full")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def ascii_locale() -> Iterator[None]:
    """A host whose locale encodes text as ASCII (LC_CTYPE=C, as a bare container may have it)."""
    before = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    try:
        yield
    finally:
        locale.setlocale(locale.LC_CTYPE, before)


def reread(data: dict) -> dict:
    """``data`` through a file's bytes, as the host reads what the container wrote."""
    return json.loads(json.dumps(data))


# ---- result.json's rows ------------------------------------------------------------------------
def test_a_multi_stream_rows_batches_per_query_and_a_server_rows_search_are_kept():
    search = {"upper_qps": 40.0, "trials": [{"target_qps": 20.0, "p99_ms": 12.5, "met": True}]}
    data = performance_row(scenario="multi_stream", samples_per_query=8, server_search=search)
    written = PerformanceRow.from_json(reread(data)).to_json()
    assert written["samples_per_query"] == 8 and written["server_search"] == search
    assert written == data


def test_a_utf8_result_is_read_whatever_the_hosts_locale(tmp_path, ascii_locale):
    data = result_json(accuracy_note="top-1 ± 0.2 %")
    (tmp_path / RESULT_FILE).write_bytes(json.dumps(data, ensure_ascii=False).encode("utf-8"))
    result = read_result(tmp_path)
    assert result is not None and result.accuracy_note == "top-1 ± 0.2 %"


def test_a_prefill_flops_figure_alone_is_kept():
    cell = {"scenario": "offline", "batch_size": 1, "input_length": 2, "output_length": 3, "verdict": {"reasons": []}}
    written = LLMRow.from_json({**cell, "prefill_flops_per_s": 7.0e9}).to_json()
    assert written["prefill_flops_per_s"] == 7.0e9 and written["decode_flops_per_s"] is None


# One load step as result.json records it (docs/result_schema.md, ``ServingStep``: run.py --endpoint's row).
SERVING_STEP = {
    "label": "concurrency 1",
    "phase": "step",
    "concurrency": 1,
    "request_rate": None,
    "input_length": 128,
    "output_length": 64,
    "requests": 12,
    "completed": 11,
    "failed": 1,
    "errors": {"timeout": 1},
    "duration_s": 2.5,
    "token_source": ["usage"],
    "input_tokens": 1408,
    "output_tokens": 704,
    "ttft_ms": {"p50": 15.0, "ci95": {"p50": [14.0, 16.0]}},
    "ttfa_ms": {},
    "tpot_ms": {"p50": 3.0},
    "itl_ms": {"p99": 5.0},
    "e2e_ms": {"p50": 200.0},
    "throughput": {
        "requests_per_s": {"value": 4.4, "ci95": [4.0, 4.8]},
        "output_tokens_per_s": {"value": 281.6, "ci95": [270.0, 290.0]},
    },
    "drift": {"output_tokens_per_s": {"change": 0.02, "drifting": False}},
    "tokens_per_s_per_user": 320.0,
    "slo": None,
    "stop_reason": "precision reached",
    "verdict": {"valid": False, "reasons": ["1 of 12 requests failed"]},
}


def test_a_served_llms_steps_and_server_are_read_and_written_back_as_they_are():
    data = {
        "model": {"layers": 4},
        "workload": {"serving_concurrency": [1, 4]},
        "table": [],
        "server": [],
        "greedy": None,
        "serving": [SERVING_STEP, {**SERVING_STEP, "label": "concurrency 4", "concurrency": 4}],
        "served_by": {"url": "http://h:8000"},
    }
    block = LLMBlock.from_json(reread(data))
    assert block is not None and [row.label for row in block.serving] == ["concurrency 1", "concurrency 4"]
    assert block.to_json() == data


def test_a_served_llm_names_its_server_even_before_any_load_step():
    data = LLMBlock({"layers": 4}, {}, served_by={"url": "http://h:8000"}).to_json()
    assert data["serving"] == [] and data["served_by"] == {"url": "http://h:8000"}


def test_a_serving_step_with_only_its_identity_and_verdict():
    row = ServingStep.from_json({"label": "rate 2/s poisson", "phase": "step", "verdict": {"reasons": []}})
    assert row.to_json() == {  # the lengths asked: only a vendor's step has them
        "label": "rate 2/s poisson",
        "phase": "step",
        "concurrency": None,
        "request_rate": None,
        "requests": 0,
        "completed": 0,
        "failed": 0,
        "errors": {},
        "duration_s": None,
        "token_source": [],
        "input_tokens": None,
        "output_tokens": None,
        "ttft_ms": {},
        "ttfa_ms": {},
        "tpot_ms": {},
        "itl_ms": {},
        "e2e_ms": {},
        "throughput": {},
        "drift": {},
        "tokens_per_s_per_user": None,
        "slo": None,
        "stop_reason": None,
        "verdict": {"valid": True, "reasons": []},
    }


@pytest.mark.parametrize(
    "parse, data, message",
    [
        (ServingStep.from_json, [], "serving step: not a JSON object"),
        (ServingStep.from_json, {"label": "concurrency 1", "verdict": {}}, "serving step: no key 'phase'"),
        (
            LLMBlock.from_json,
            {"model": {}, "table": [], "server": [], "serving": {"x1": {}}},
            "llm: key 'serving' is not a list",
        ),
        (
            LLMBlock.from_json,
            {"model": {}, "table": [], "server": [], "serving": [{"label": "concurrency 1", "phase": "step"}]},
            "llm: serving[0]: no key 'verdict'",
        ),
    ],
)
def test_a_misshapen_serving_row_is_one_line_naming_where(parse, data, message):
    with pytest.raises(RecordError) as info:
        parse(data)
    assert str(info.value) == message


# ---- the cache's checksum seals ----------------------------------------------------------------
@pytest.fixture
def sealed(tmp_path: Path) -> tuple[Path, Path]:
    entry, data = tmp_path / "m.onnx", tmp_path / "m.onnx.data"
    entry.write_bytes(b"model")
    data.write_bytes(b"weights")
    seal(entry, [data])
    return entry, data


def test_a_seal_names_its_entry_and_each_files_sha256(sealed):
    entry, data = sealed
    assert json.loads(seal_path(entry).read_text(encoding="utf-8")) == {
        "schema": 1,
        "entry": "m.onnx",
        "sha256": {"m.onnx": sha256(entry), "m.onnx.data": sha256(data)},
    }


@pytest.mark.parametrize(
    "change, reason",
    [
        pytest.param(
            lambda seal: seal["sha256"].pop("m.onnx"),
            "has a checksum file that does not cover m.onnx",
            id="not-covering-its-entry",
        ),
        pytest.param(
            lambda seal: seal.update(schema=2),
            "has a checksum file of another schema (2, expected 1)",
            id="another-schema",
        ),
        pytest.param(
            lambda seal: seal["sha256"].update({"../m.onnx.data": "0"}),
            "has a checksum file naming a file outside its folder",
            id="a-file-outside",
        ),
    ],
)
def test_a_seal_of_another_shape_is_refused_and_the_entry_rebuilt(sealed, change, reason):
    entry, _ = sealed
    content = json.loads(seal_path(entry).read_text(encoding="utf-8"))
    change(content)
    seal_path(entry).write_text(json.dumps(content), encoding="utf-8")
    assert probe(entry, "engine") == (False, reason)
    assert not entry.exists() and not seal_path(entry).exists()


def test_a_corrupt_entry_is_named_evicted_with_its_companions_and_logged(sealed, caplog_loguru):
    entry, data = sealed
    entry.write_bytes(b"modeL")
    assert not reuse(entry, "engine")
    assert list(entry.parent.iterdir()) == []
    assert caplog_loguru == [
        {"level": "WARNING", "message": f"cached engine {entry} failed its checksum: evicted and rebuilt"}
    ]


def test_evict_removes_the_companions_its_seal_names_even_when_some_are_gone(sealed):
    entry, data = sealed
    (entry.parent / "other.onnx").write_bytes(b"another entry")
    evict(entry)
    assert [p.name for p in entry.parent.iterdir()] == ["other.onnx"]
    entry.write_bytes(b"model")
    data.write_bytes(b"weights")
    seal(entry, [data])
    data.unlink()
    entry.unlink()
    evict(entry)  # half gone already (another run evicted it): the rest goes, no error
    assert [p.name for p in entry.parent.iterdir()] == ["other.onnx"]


def test_a_seal_left_without_its_entry_is_removed(sealed):
    entry, data = sealed
    entry.unlink()
    assert probe(entry, "engine") == (False, None)
    assert not seal_path(entry).exists() and data.exists()


# ---- an ONNX model's external data -------------------------------------------------------------
def test_the_external_data_marker_is_found_across_the_files_reads(tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(b"\0" * ((1 << 20) - 3) + b"location" + b"\0" * 100)  # split by the 1 MiB read
    digest = hashlib.sha256()
    assert has_external_marker(path, digest)
    assert digest.hexdigest() == sha256(path)
    path.write_bytes(b"\0" * ((1 << 20) + 100))
    assert not has_external_marker(path)


def test_weights_in_a_constant_nodes_attribute_are_found_keyed_and_sealed(tmp_path):
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    value = numpy_helper.from_array(np.arange(64, dtype=np.float32).reshape(8, 8), "c")
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["c"], value=value), helper.make_node("MatMul", ["x", "c"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 8])],
    )
    path = tmp_path / "model.onnx"
    onnx.save_model(
        helper.make_model(graph),
        str(path),
        save_as_external_data=True,
        location="const.bin",
        size_threshold=0,
        convert_attribute=True,
    )
    assert onnx_external_locations(path) == ["const.bin"]
    assert onnx_external_files(path) == [tmp_path / "const.bin"]
    assert onnx_digests(path) == {"": sha256(path), "const.bin": sha256(tmp_path / "const.bin")}


# ---- the log file sink -------------------------------------------------------------------------
def test_the_log_sink_appends_every_line_to_the_file_in_utf8(tmp_path, ascii_locale):
    path = tmp_path / "run.log"
    path.write_text("an earlier run\n", encoding="utf-8")
    failures: list[OSError] = []
    sink = LogFileSink(path, failures.append)
    sink.write("one\n")
    sink.write("two 5 µs\n")
    assert path.read_text(encoding="utf-8") == "an earlier run\none\ntwo 5 µs\n"  # flushed as written
    sink.stop()
    assert failures == []


@pytest.mark.skipif(not FULL.exists(), reason="no /dev/full on this system")
def test_a_full_device_is_said_once_with_its_error_and_stop_still_closes():
    failures: list[OSError] = []
    sink = LogFileSink(FULL, failures.append)
    sink.write("a line\n")
    sink.write("the next line\n")  # dropped: the failure was said once
    sink.stop()  # the buffered line cannot be flushed either: closed without a second error
    assert [exc.errno for exc in failures] == [errno.ENOSPC]
    assert sink.handle.closed
