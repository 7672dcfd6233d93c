"""utils.results.summary cell by cell (mutation testing, docs/testing.md).

merge_outcome is compared as a whole record against a fake vendor analysis
module; markdown_table against a table written out by hand (every cell:
numbers, n/a with its reason, est., verdicts, the notes under the table);
write_summary against both files.
"""

from __future__ import annotations

import json
import sys
import types
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest

from common import record as result_record
from common.record import CaseResult, LatencyBlock
from tests.infra.summary_records import records as summary_records
from tests.result_records import performance_row, phase_block, result_json
from utils.executors.base import CaseOutcome
from utils.host_config import CaseSpec
from utils.results import summary
from utils.results.summary import markdown_table, memory_kind, merge_outcome, vendor_analysis, write_summary

INFERENCE = Path(summary.__file__).resolve().parents[2]
VENDOR = "fakevendor"


@pytest.fixture
def fake_vendor(tmp_path, monkeypatch):
    """A vendor whose analysis module returns whatever the test sets as ``module.value``."""
    source = tmp_path / "docker_images" / VENDOR / f"{VENDOR}_analysis.py"
    source.parent.mkdir(parents=True)
    source.write_text("# stands in for the module in sys.modules\n")
    module = types.ModuleType(f"docker_images.{VENDOR}.{VENDOR}_analysis")
    calls = []

    def analysis_log(path):
        calls.append(path)
        if isinstance(module.value, Exception):
            raise module.value
        return module.value

    module.analysis_log = analysis_log
    module.value = (1.5, 16.0, None)
    module.calls = calls
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return tmp_path, module


def outcome(tmp_path, result, status="success", monitors=None):
    """A CaseOutcome whose result is ``result`` (a result.json dict) parsed as read_outcome parses it."""
    parsed = None if result is None else CaseResult.from_json(result)
    out = CaseOutcome(
        CaseSpec("resnet50", "pytorch", "/data"),
        "10.0.0.7",
        3,
        tmp_path / "logs",
        status=status,
        exit_code=0,
        wall_time_s=12.5,
        result=parsed,
    )
    out.monitors.update(monitors or {})
    return out


# A complete result.json (the recorded digits result) with the figures this file checks;
# the inference block's precision is dropped, as a case run without a precision target has none.
RESULT = result_json(
    {
        "vendor": VENDOR,
        "compiler": "c",
        "precision": "FP16",
        "batchsize": 4,
        "flops": 2e9,
        "e2e_time(second)": 9.0,
        "p_validation_whole(qps)": 1.0,
        "p_validation_core(qps)": 2.0,
        "p_inference_whole(qps)": 3.0,
        "*p_inference_core(qps)": 100.0,
        "val_average_acc": 0.5,
        "infer_average_acc": 0.25,
        "verdict": {"valid": True, "reasons": []},
        "accuracy_note": None,
        "inference": phase_block(
            "inference",
            latency_ms={"count": 70, "p50": 1.0, "p90": 2.0, "p99": None, "p99_9": None, "mean": 1.5, "notes": ["n"]},
            latency_ci95={"p50": [0.9, 1.1], "p90": [1.9, 2.1], "p99": None, "p99_9": None},
            precision=None,
        ),
        "ci95": {"*p_inference_core(qps)": [99.0, 101.0]},
        "performance": [performance_row(batch_size=4, qps=50.0), performance_row(batch_size=8, qps=None)],
        "best": {"b": 1},
        "numeric": {"n": 2},
        "audits": [{"a": 3}],
    }
)
PEAK = {"fp32": 2e12, "fp16": 4e12, "estimate": True, "source": "the source"}


def test_merge_outcome_whole_record(fake_vendor, monkeypatch):
    perf_dir, module = fake_vendor
    module.value = (1.5, 16.0, PEAK)
    analysed = []
    monkeypatch.setattr(summary.sys_monitor, "analyse", lambda path: analysed.append(path) or {"samples": 9})
    record = merge_outcome(
        outcome(perf_dir, RESULT, monitors={"sys": "s.jsonl", VENDOR: "v.jsonl"}), perf_dir, VENDOR
    ).to_json()  # as summary.json has it
    assert analysed == ["s.jsonl"] and module.calls == ["v.jsonl"]
    assert record == {
        "case": "resnet50",
        "framework": "pytorch",
        "host": "10.0.0.7",
        "noderank": 3,
        "status": "success",
        "failed_step": None,
        "error": None,
        "exit_code": 0,
        "wall_time_s": 12.5,
        "log_dir": str(perf_dir / "logs"),
        **{key: RESULT[key] for key in result_record.FLAGPERF_KEYS},
        "verdict": {"valid": True, "reasons": []},
        "accuracy_note": None,
        "latency_ms": {"p50": 1.0, "p90": 2.0, "p99": None, "p99_9": None, "mean": 1.5},
        "ci95": {"*p_inference_core(qps)": [99.0, 101.0]},
        "latency_ci95": {"p50": [0.9, 1.1], "p90": [1.9, 2.1], "p99": None, "p99_9": None},
        "precision_target": None,
        "latency_batches": 70,
        "latency_notes": ["n"],
        "sys_monitor": {"samples": 9},
        "vendor_usage(GiB)": 1.5,
        "vendor_max_mem(GiB)": 16.0,
        "peak_flops": 4e12,
        "mfu_is_estimate": True,
        "peak_measured": None,  # no base-tier peak cached for this host (utils/results/baselines.py)
        "peak_flops_source": "the source",
        "baseline": None,
        "MFU": 2e9 * 100.0 / 4e12,
        "MFU_note": None,
        "performance": [  # each row as result.json has it, with its MFU
            {**RESULT["performance"][0], "batch_size": 4, "qps": 50.0, "MFU": 2e9 * 50.0 / 4e12, "MFU_note": None},
            {**RESULT["performance"][1], "batch_size": 8, "qps": None, "MFU": None, "MFU_note": None},
        ],
        "best": {"b": 1},
        "numeric": {"n": 2},
        "audits": [{"a": 3}],
        "llm": None,
    }


def test_merge_outcome_without_monitors_or_result(tmp_path):
    record = merge_outcome(outcome(tmp_path, None, status="failed"), tmp_path, VENDOR).to_json()
    assert record["verdict"] is None and record["latency_ms"] is None and record["latency_batches"] is None
    assert record["latency_notes"] == [] and record["sys_monitor"] is None and record["performance"] == []
    assert record["audits"] == [] and record["best"] is None and record["numeric"] is None
    assert (record["peak_flops"], record["mfu_is_estimate"], record["peak_flops_source"], record["MFU"]) == (None,) * 4
    assert (record["vendor_usage(GiB)"], record["vendor_max_mem(GiB)"]) == (None, None)
    failed = merge_outcome(outcome(tmp_path, RESULT, status="failed"), tmp_path, VENDOR).to_json()
    assert failed["verdict"] is None  # a failed case's verdict is not reported
    latency_without_notes = {
        **RESULT,
        "inference": {**RESULT["inference"], "latency_ms": {"count": 3, "p50": 1.0}},
        "audits": None,
    }
    record = merge_outcome(outcome(tmp_path, latency_without_notes), tmp_path, VENDOR).to_json()
    assert record["latency_notes"] == [] and record["audits"] == []
    assert record["latency_ms"] == {"p50": 1.0, "p90": None, "p99": None, "p99_9": None, "mean": None}


def test_mfu_peak_forms_and_the_unknown_peak_warning(fake_vendor, caplog_loguru):
    perf_dir, module = fake_vendor
    run = lambda result: merge_outcome(outcome(perf_dir, result, monitors={VENDOR: "v"}), perf_dir, VENDOR).to_json()
    module.value = (1.0, 2.0, 5e11)  # one number: every precision, not an estimate
    record = run(RESULT)
    assert (record["peak_flops"], record["mfu_is_estimate"], record["MFU"]) == (5e11, False, 2e9 * 100 / 5e11)
    module.value = (1.0, 2.0, True)  # a bool is not a peak
    assert run(RESULT)["peak_flops"] is None
    module.value = (1.0, 2.0, {"fp32": 1e12, "source": "s"})
    record = run(RESULT)  # fp16 asked, only fp32 known
    assert (record["peak_flops"], record["mfu_is_estimate"], record["peak_flops_source"]) == (None, None, "s")
    assert caplog_loguru[-1] == {
        "level": "WARNING",
        "message": "resnet50:pytorch on 10.0.0.7: peak FLOPS unknown for precision FP16; MFU is null",
    }
    module.value = (1.0, 2.0, {"fp16": "fast"})
    assert run(RESULT)["peak_flops"] is None
    module.value = (1.0, 2.0, {"fp16": 1e12})
    assert run({**RESULT, "precision": None})["peak_flops"] is None
    count = len(caplog_loguru)
    module.value = (1.0, 2.0, {"fp16": 1e12})
    assert run(RESULT)["mfu_is_estimate"] is False and len(caplog_loguru) == count
    module.value = (1.0, 2.0, None)
    assert run({**RESULT, "flops": None})["MFU"] is None  # no FLOPs: no peak needed
    module.value = (1.0, 2.0, {"fp16": 1e12})
    assert run({**RESULT, "*p_inference_core(qps)": None})["MFU"] is None  # a peak, but no throughput
    module.value = (1.0, 2.0, None)
    record = merge_outcome(
        outcome(perf_dir, RESULT, status="failed", monitors={VENDOR: "v"}), perf_dir, VENDOR
    ).to_json()
    assert record["MFU"] is None and record["vendor_usage(GiB)"] == 1.0
    assert len(caplog_loguru) == count  # no peak needed, or nothing to say


def test_vendor_analysis_contract(fake_vendor, caplog_loguru):
    perf_dir, module = fake_vendor
    source = f"docker_images/{VENDOR}/{VENDOR}_analysis.py"
    assert vendor_analysis(perf_dir, "nosuchvendor", "p") == (None, None, None)
    module.value = [1.0, 2.0]
    assert vendor_analysis(perf_dir, VENDOR, "p") == (1.0, 2.0, None)
    module.value = (1.0, 2.0, 3e12, 6e12)
    assert vendor_analysis(perf_dir, VENDOR, "p") == (1.0, 2.0, {"fp32": 3e12, "fp16": 6e12})
    module.value = (1.0, 2.0, 3.0)
    assert vendor_analysis(perf_dir, VENDOR, "p") == (1.0, 2.0, 3.0)
    assert caplog_loguru == []
    module.value = [1.0, 2.0, 3.0]
    assert vendor_analysis(perf_dir, VENDOR, "p") == (None, None, None)
    assert caplog_loguru[-1]["message"] == (
        f"{source}: analysis_log must return (max_mem_used_GiB, total_mem_GiB, peak_flops), or FlagPerf's "
        "(max_mem_used, total_mem) or (max_mem_used, total_mem, fp32_peak, fp16_peak), got [1.0, 2.0, 3.0]"
    )
    module.value = ValueError("bad log")
    assert vendor_analysis(perf_dir, VENDOR, "the/log") == (None, None, None)
    assert caplog_loguru[-1] == {
        "level": "ERROR",
        "message": f"{source}: analysis_log(the/log) failed: ValueError: bad log",
    }
    del module.analysis_log
    assert vendor_analysis(perf_dir, VENDOR, "p") == (None, None, None)
    assert caplog_loguru[-1] == {"level": "ERROR", "message": f"{source}: must define analysis_log(path)"}
    module.analysis_log = "not callable"
    assert vendor_analysis(perf_dir, VENDOR, "p") == (None, None, None)


def test_memory_kind(fake_vendor):
    perf_dir, module = fake_vendor
    assert memory_kind(perf_dir, VENDOR) == "device memory"
    module.MEMORY_KIND = "HBM"
    assert memory_kind(perf_dir, VENDOR) == "HBM"
    assert memory_kind(INFERENCE, VENDOR) == "device memory"  # not a vendor of that tree: its module not read
    assert memory_kind(INFERENCE, "no_such_vendor") == "device memory"
    assert memory_kind(INFERENCE, "cpu") == "host RAM (whole machine)"


# ---- the table ------------------------------------------------------------------------------
EXPECTED_TABLE = """\
| case | host | status | verdict | dtype | bs | infer core qps (samples/s) | infer whole qps (samples/s) | \
val core qps (samples/s) | p50 ms/batch | p90 ms/batch | p99 ms/batch | val acc | infer acc | HBM used/total GiB | MFU |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
| resnet50:pytorch | h1 | success | INVALID (2) | fp16 | 8 | 123.46 ±2.0% | 100.00 ± n/a | - | 1.23 ±2.0% | \
n/a (<64 queries) | \
n/a (<662 queries) | 0.9123 | - | 1.50/16.00 | 12.35% est. |
| digits:pytorch | h2 | success | valid | fp32 | 16 | 2000.00 | - | 1500.50 | - | - | - | n/a (random weights) | \
n/a (random weights) | - | n/a (peak unknown) |
| bert:onnx | h3 | failed at vendor_compile | - | - | - | - | - | - | - | - | - | - | - | - | - |

Performance rows (LoadGen-style, queries from a preloaded pool; latency per query = one batch):

| case | host | bs | scenario | clients | qps (samples/s) | p50 ms/query | p90 ms/query | p99 ms/query | \
queries | MFU | verdict |
|---|---|---|---|---|---|---|---|---|---|---|---|
| resnet50:pytorch | h1 | 8 | offline | 2 | 50.50 ±1.0% | 2.00 ± n/a | 3.00 ±0.5% | n/a (<662 queries) | 70 | \
1.00% est. | valid |
| resnet50:pytorch | h1 | 1 | server @12.35, bound met | 1 | n/a (no queries) | n/a (<2 queries) | n/a (<64 queries) | \
n/a (<662 queries) | 0 | n/a (peak unknown) | INVALID (1) |
| resnet50:pytorch | h1 | 1 | server @10, bound MISSED | 1 | 9.00 ± n/a | 1.00 | 2.00 | 3.00 | 700 | 0.20% est. | \
INVALID (1) |

±: half the 95% confidence interval's width over the figure (docs/measurement.md): inside one window unless the case \
ran repetitions (then across them; the spread between runs is in the Repetitions table).

MFU est.: the peak FLOPS is an estimate, not a datasheet figure: generic (g); zen4 (src)
Measure this host's peaks with `run.py --cases base`: later runs here then take MFU against them.

- **resnet50:pytorch on h1 is INVALID:** r1; r2

- **bert:onnx on h3** failed at step `vendor_compile`: boom
"""


def test_markdown_table_every_cell():
    assert markdown_table(summary_records(), "HBM") == EXPECTED_TABLE


def test_the_mfu_hint_names_the_runs_own_base_case_when_it_measured_no_valid_peak():
    records = summary_records()
    base = replace(records[1], case="base_gemm", mfu_is_estimate=None)
    table = markdown_table([*records, base], "HBM")
    assert "Measure this host's peaks" not in table
    assert f"This run's {base.name} measured no VALID peak for these (its verdicts say why)" in table


def test_markdown_table_minimal():
    only = replace(summary_records()[1], mfu_is_estimate=None)
    assert markdown_table([only]) == "\n".join(EXPECTED_TABLE.replace("HBM", "device memory").splitlines()[:2]) + (
        "\n| digits:pytorch | h2 | success | valid | fp32 | 16 | 2000.00 | - | 1500.50 | - | - | - | "
        "n/a (random weights) | n/a (random weights) | - | n/a (peak unknown) |\n"
    )


def test_cells_of_a_measured_row_without_estimate_or_p50():
    record = replace(
        summary_records()[1],
        mfu=0.5,
        mfu_is_estimate=False,
        accuracy_note=None,
        infer_average_acc=0.5,
        val_average_acc=None,
        latency_ms=LatencyBlock(p90=2.0),
        latency_batches=1,
    )
    row = markdown_table([record]).splitlines()[2]
    assert row == (
        "| digits:pytorch | h2 | success | valid | fp32 | 16 | 2000.00 | - | 1500.50 | n/a (<2 queries) | 2.00 | "
        "n/a (<662 queries) | - | 0.5000 | - | 50.00% |"
    )


def test_write_summary_files(tmp_path):
    host_config = SimpleNamespace(
        mode="local",
        vendor="cpu",
        hosts=[SimpleNamespace(label="h1"), SimpleNamespace(label="h2")],
        flagperf_path=INFERENCE,
    )
    started = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    before = datetime.now(timezone.utc).replace(microsecond=0)
    json_path, md_path = write_summary(tmp_path, "run42", host_config, summary_records(), started)
    assert (json_path, md_path) == (tmp_path / "summary.json", tmp_path / "summary.md")
    data = json.loads(json_path.read_text())
    finished = datetime.fromisoformat(data.pop("finished_at"))
    assert before <= finished <= datetime.now(timezone.utc) and finished.tzinfo is not None
    assert data == {
        "schema_version": 1,
        "run_id": "run42",
        "mode": "local",
        "vendor": "cpu",
        "hosts": ["h1", "h2"],
        "started_at": "2026-01-02T03:04:05+00:00",
        "succeeded": 2,
        "failed": 1,
        "invalid": 1,
        "results": [r.to_json() for r in summary_records()],  # every key, in summary.json's order
        "aggregates": [],
    }
    assert md_path.read_text(encoding="utf-8") == (
        "# InferPerf run run42 (cpu, local)\n\n" + EXPECTED_TABLE.replace("HBM", "host RAM (whole machine)")
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json", "summary.md"]
    other = tmp_path / "other"
    other.mkdir()
    write_summary(other, "r", host_config, summary_records()[:1], started)
    counts = json.loads((other / "summary.json").read_text())
    assert (counts["succeeded"], counts["failed"], counts["invalid"]) == (1, 0, 1)
