"""load_generator: mlperf — performance rows under the real MLPerf LoadGen (tools/measure/loadgen.py).

The digits case runs for real through run_inference.py and LoadGen's VALID lands in
the rows, checked against LoadGen's own summary file; LoadGen's INVALID is provoked
for real (a latency bound no engine meets; an engine that speeds up after the probe,
LoadGen's known min-duration pitfall); an engine error inside LoadGen's callback is
raised after the test; the key's bad input is one line and exit 2 through run.py,
including LoadGen not being installed (a real interpreter without the package).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from common.errors import ConfigError, EngineError
from tests.conftest import TYPED_CASE_CONFIG, copy_inference_tree
from tests.test_faults_config_run import assert_one_config_error, case_file, host_yaml, run_py, set_key
from tools.config import CaseConfig
from tools.measure import loadgen
from tools.measure.stage import PerformanceStage

lg = pytest.importorskip("mlperf_loadgen")

# LoadGen's summary file: the row's throughput line per scenario, in LoadGen samples (pool batches) per second.
SUMMARY_RATE = {
    "offline": r"Samples per second\s*: ([\d.]+)",
    "single_stream": r"QPS w/ loadgen overhead\s*: ([\d.]+)",
    "server": r"Completed samples per second\s*: ([\d.]+)",
}


def summary_value(text: str, pattern: str) -> float:
    match = re.search(pattern, text)
    assert match, pattern
    return float(match.group(1))


# ---- digits, for real, through run_inference.py -----------------------------------------------------


@pytest.fixture(scope="module")
def digits_mlperf(tmp_path_factory, digits_data_dir) -> dict:
    perf = copy_inference_tree(tmp_path_factory.mktemp("loadgen") / "inference")
    log = perf.parent / "log"
    overrides = {
        "load_generator": "mlperf",
        "scenario": "[offline,single_stream,server]",
        "target_qps": "4000",  # 250 queries/s of 16: 662 queries in under 3 s
        "latency_bound_ms": "100",
        "min_duration_s": "0.5",
    }
    command = [sys.executable, "run_inference.py", "--perf_dir", str(perf), "--data_dir", str(digits_data_dir), "--log_dir", str(log)]
    command += ["--vendor", "cpu", "--case", "digits", "--framework", "pytorch"]
    command += [arg for key, value in overrides.items() for arg in ("--set", f"{key}={value}")]
    proc = subprocess.run(command, cwd=perf, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"log": log, "result": json.loads((log / "result.json").read_text()), "stdout": proc.stdout}


def test_digits_under_loadgen_puts_loadgens_valid_into_every_row(digits_mlperf):
    rows = digits_mlperf["result"]["performance"]
    assert [(r["scenario"], r["batch_size"], r["load_generator"]) for r in rows] == [(s, 16, "mlperf") for s in ("offline", "single_stream", "server")]
    for row in rows:
        block = row["loadgen"]
        assert block["result_validity"] == "VALID" and block["valid"] is True, block
        assert block["version"].startswith("6.0.17")
        assert all(block["conditions"].values()) and block["errors"] == []
        assert not [reason for reason in row["verdict"]["reasons"] if reason.startswith("mlperf loadgen")]
        assert row["accuracy_in_performance_mode"]["passed"] is True  # outputs sampled inside LoadGen's test
        assert block["settings"]["min_duration_ms"] == 500 and block["settings"]["performance_sample_count"] == 8  # the pool's batches


def test_the_rows_figures_are_loadgens_own_as_its_summary_file_says(digits_mlperf):
    log = digits_mlperf["log"]
    for row in digits_mlperf["result"]["performance"]:
        prefix = f"mlperf_log_bs16_{row['scenario']}_x1_"
        assert sorted(row["loadgen"]["log_files"]) == [f"{prefix}{n}" for n in ("accuracy.json", "detail.txt", "summary.txt", "trace.json")]
        text = (log / f"{prefix}summary.txt").read_text()
        assert "Result is : VALID" in text
        rate = summary_value(text, SUMMARY_RATE[row["scenario"]])
        assert row["qps"] == pytest.approx(rate * 16, rel=1e-4)  # LoadGen's samples are batches of 16
        assert row["loadgen"]["latency_ms"]["p90"] == pytest.approx(summary_value(text, r"90.00 percentile latency \(ns\)\s*: (\d+)") / 1e6)
    single = next(r for r in digits_mlperf["result"]["performance"] if r["scenario"] == "single_stream")
    # SingleStream's headline: LoadGen's p90, and its early-stopping estimate of it.
    assert single["latency_ms"]["p90"] == single["loadgen"]["latency_ms"]["p90"]
    assert single["queries"] >= 64 and single["loadgen"]["query_count"] == single["queries"]
    text = (log / "mlperf_log_bs16_single_stream_x1_summary.txt").read_text()
    estimate = summary_value(text, r"Early stopping 90.0th percentile estimate: (\d+)") / 1e6
    assert single["loadgen"]["early_stopping_estimate_ms"]["p90"] == pytest.approx(estimate)
    assert single["duration_s"] >= 0.5 and single["loadgen"]["conditions"]["min_duration_met"] is True
    server = next(r for r in digits_mlperf["result"]["performance"] if r["scenario"] == "server")
    assert server["target_qps"] == 4000.0 and server["latency_bound_met"] is True and server["queries"] >= 662
    scheduled = summary_value((log / "mlperf_log_bs16_server_x1_summary.txt").read_text(), r"Scheduled samples per second\s*: ([\d.]+)")
    assert server["issued_qps"] == pytest.approx(scheduled * 16, rel=1e-3)


def test_the_rows_raw_latencies_are_inferperfs_own_timings_of_each_query(digits_mlperf):
    result, log = digits_mlperf["result"], digits_mlperf["log"]
    with np.load(log / "latencies.npz") as raw:
        for index, row in enumerate(result["performance"]):
            series = raw[f"performance_{index}"]
            assert len(series) == row["queries"] > 0 and (series > 0).all()
    offline = result["performance"][0]
    assert offline["latency_notes"][0].startswith("offline: per-batch engine latency timed by the SUT")
    assert offline["latency_ms"]["p50"] < offline["loadgen"]["latency_ms"]["p50"]  # one batch vs LoadGen's whole query


# ---- the stage's dispatch, LoadGen's INVALID and errors, with small real engines ---------------------


def stage_for(tmp_path, engine_batches=8, **changes):
    values = dict(
        pool_max_mb=1.0,
        batch_sizes=[2],
        batch_size=2,
        warmup=1,
        audits=False,
        scenario=["single_stream"],
        clients=[1],
        server_search=False,
        target_qps=None,
        min_query_count=64,
        min_duration_s=0.2,
        max_duration_s=30.0,
        seed=0,
        device="cpu",
        contention_limit=1.0,
        latency_bound_ms=None,
        log_dir=str(tmp_path),
        load_generator="mlperf",
    )
    values.update(changes)
    loader = [(torch.full((2, 3), float(b)), None) for b in range(engine_batches)]
    return PerformanceStage(types.SimpleNamespace(**values), loader, lambda: None, "fp32")


def sleeping(seconds: float):
    def engine(inputs):
        time.sleep(seconds)
        return [inputs[0] * 2.0], 0.0

    return engine


def test_the_stage_runs_a_row_under_the_generator_the_config_names(tmp_path):
    stage = stage_for(tmp_path, load_generator="inferperf")
    stage.rows_for(sleeping(0.0005), 2)
    stage.config.load_generator = "mlperf"
    stage.rows_for(sleeping(0.0005), 2)
    inferperf, mlperf = stage.report.rows
    assert inferperf["load_generator"] == "inferperf" and "loadgen" not in inferperf
    assert mlperf["load_generator"] == "mlperf" and mlperf["loadgen"]["result_validity"] == "VALID"
    assert mlperf["verdict"] == {"valid": True, "reasons": []}
    assert set(inferperf) <= set(mlperf)  # the same keys, plus LoadGen's
    assert len(stage.report.raw_latencies_ns) == 2 and len(stage.report.raw_latencies_ns[1]) == mlperf["queries"]
    assert (tmp_path / "mlperf_log_bs2_single_stream_x1_summary.txt").is_file()


def test_a_latency_bound_no_engine_meets_is_loadgens_invalid_in_the_row(tmp_path):
    stage = stage_for(tmp_path, scenario=["server"], target_qps=400.0, latency_bound_ms=0.5, min_duration_s=0.5)
    stage.rows_for(sleeping(0.002), 2)  # every query takes 2 ms, the bound is 0.5 ms
    (row,) = stage.report.rows
    assert row["loadgen"]["result_validity"] == "INVALID" and row["latency_bound_met"] is False
    (reason,) = [r for r in row["verdict"]["reasons"] if r.startswith("mlperf loadgen")]
    assert reason.startswith("mlperf loadgen: INVALID: ") and "latency constraint not met" in reason and "early stopping not met (" in reason
    assert row["verdict"]["valid"] is False


def test_an_engine_that_speeds_up_after_the_probe_misses_loadgens_min_duration(tmp_path):
    # LoadGen issues min_duration / expected latency SingleStream queries: told 5 ms by the probe,
    # it runs out of queries when they then take 0.1 ms. The row says so in LoadGen's words.
    slow_until = time.monotonic() + 0.4

    def engine(inputs):
        time.sleep(0.005 if time.monotonic() < slow_until else 0.0001)
        return [inputs[0]], 0.0

    stage = stage_for(tmp_path, min_duration_s=1.0, warmup=0)
    stage.rows_for(engine, 2)
    (row,) = stage.report.rows
    assert row["loadgen"]["probe"]["latency_ns"] > 4_000_000
    assert row["loadgen"]["conditions"]["min_duration_met"] is False and row["stop_reason"] == "loadgen: minimums not met"
    assert any(r.startswith("mlperf loadgen: INVALID: min duration not met") for r in row["verdict"]["reasons"]), row["verdict"]


def test_an_engine_error_inside_loadgens_test_is_raised_after_it(tmp_path):
    config = types.SimpleNamespace(min_duration_s=1.0, max_duration_s=10.0, min_query_count=64, seed=0, latency_bound_ms=1000.0)
    pool = [[torch.zeros(2, 3)] for _ in range(4)]
    for scenario, clients in (("single_stream", 1), ("offline", 1), ("offline", 2), ("server", 1)):
        breaks_at = time.monotonic() + 0.5  # after the probe (0.25 s), inside LoadGen's test (1 s)

        def engine(inputs):
            time.sleep(0.001)
            if time.monotonic() > breaks_at:
                raise EngineError(f"engine broke ({scenario})")
            return [inputs[0]], 0.0

        start = time.monotonic()
        with pytest.raises(EngineError, match=rf"engine broke \({scenario}\)"):
            loadgen.run_loadgen(engine, pool, scenario=scenario, batch_size=2, clients=clients, config=config, log_dir=tmp_path, target_qps=2000.0)
        # LoadGen's test ended (every later sample completed at once; server: its 662 arrivals at 1000/s).
        assert time.monotonic() - start < 10


# ---- settings, the detail log ------------------------------------------------------------------------


def test_settings_come_from_the_probe_and_the_config():
    config = types.SimpleNamespace(min_duration_s=2.0, max_duration_s=60.0, min_query_count=100, seed=7, latency_bound_ms=25.0)
    found = loadgen.Probe(queries=20, latency_ns=1_100_000, qps=900.0)
    single = loadgen.loadgen_settings(lg, "single_stream", config, found, 4, 1, None)
    assert single.scenario == lg.TestScenario.SingleStream and single.mode == lg.TestMode.PerformanceOnly
    assert single.single_stream_expected_latency_ns == 1_000_000  # the probe's latency / PROBE_MARGIN
    assert (single.min_duration_ms, single.max_duration_ms, single.min_query_count, single.schedule_rng_seed) == (2000, 60000, 100, 7)
    offline = loadgen.loadgen_settings(lg, "offline", config, found, 4, 2, None)
    assert offline.offline_expected_qps == pytest.approx(900.0 * 2 * 1.1)  # one client's rate x clients x margin
    slow = loadgen.loadgen_settings(lg, "offline", config, loadgen.Probe(3, 10**9, 1.0), 4, 1, None)
    assert slow.offline_expected_qps == pytest.approx(100 / 2.2)  # enough samples for min_query_count
    server = loadgen.loadgen_settings(lg, "server", config, found, 4, 1, 200.0)
    assert server.server_target_qps == 50.0 and server.server_target_latency_ns == 25_000_000 and server.server_target_latency_percentile == 0.99
    assert server.min_query_count == 662  # the p99 floor, as InferPerf's server rows
    config.min_query_count = 10
    assert loadgen.loadgen_settings(lg, "single_stream", config, found, 4, 1, None).min_query_count == 64  # the p90 floor


def detail_line(key: str, value, error: bool = False, warning: bool = False) -> str:
    entry = {"key": key, "value": value, "time_ms": 1.0, "metadata": {"is_error": error, "is_warning": warning}}
    return ":::MLLOG " + json.dumps(entry)


def test_the_detail_log_is_read_line_by_line_and_an_error_makes_the_block_invalid(tmp_path):
    path = tmp_path / "detail.txt"
    lines = [
        detail_line("loadgen_version", "6.0.17 @ x"),
        detail_line("result_validity", "VALID"),
        "garbage line",
        ":::MLLOG {not json",
        detail_line("result_min_duration_met", True),
        detail_line("early_stopping_met", True),
        detail_line("early_stopping_result", " * Processed at least 64 queries (100).  * Early stopping 90.0th percentile estimate: 2500000"),
        detail_line("result_qps_with_loadgen_overhead", 50.0),
        detail_line("result_90.00_percentile_latency_ns", 2_000_000),
        detail_line("effective_min_duration_ms", 1000),
        detail_line("warning_generic_message", "odd", warning=True),
        detail_line("error_runtime", "SUT failed", error=True),
    ]
    path.write_text("\n".join(lines) + "\n")
    values, errors, warnings = loadgen.read_detail(path)
    assert values["result_validity"] == "VALID" and errors == ["error_runtime: SUT failed"] and warnings == ["warning_generic_message: odd"]
    block = loadgen.summarize(values, errors, warnings, "single_stream", 4)
    assert block["valid"] is False and block["samples_per_second"] == 200.0 and block["latency_ms"]["p90"] == 2.0
    assert block["early_stopping"] == ["Processed at least 64 queries (100).", "Early stopping 90.0th percentile estimate: 2500000"]
    assert block["early_stopping_estimate_ms"] == {"p90": 2.5} and block["settings"] == {"min_duration_ms": 1000}
    assert loadgen.invalid_reasons(block) == ["mlperf loadgen: VALID: error error_runtime: SUT failed"]
    values["result_validity"], values["result_min_duration_met"] = "INVALID", False
    block = loadgen.summarize(values, [], [], "single_stream", 4)
    assert loadgen.invalid_reasons(block) == ["mlperf loadgen: INVALID: min duration not met"]


# ---- the key's bad input: one line, exit 2, nothing written --------------------------------------------


def make(**overrides) -> CaseConfig:
    return CaseConfig(**{**TYPED_CASE_CONFIG, **overrides})


def test_the_key_in_the_case_config():
    assert make().load_generator == "inferperf" and make(load_generator="mlperf").load_generator == "mlperf"
    for value, shown in (("loadgen", "'loadgen'"), ("MLPerf", "'MLPerf'"), (None, "None"), (1, "1")):
        with pytest.raises(ConfigError) as info:
            make(load_generator=value, origin={"load_generator": "/v.yaml"})
        assert str(info.value) == f"/v.yaml: key 'load_generator' must be one of inferperf, mlperf, got {shown}"
    with pytest.raises(ConfigError) as info:
        make(load_generator="mlperf", scenario="server", latency_bound_ms=5, server_search=True, origin={"server_search": "/c.yaml"})
    assert str(info.value) == "/c.yaml: key 'server_search' is true, but load_generator mlperf runs server rows at a fixed target_qps; set target_qps instead"
    assert make(load_generator="inferperf", scenario="server", latency_bound_ms=5, server_search=True).server_search is True


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    return copy_inference_tree(tmp_path_factory.mktemp("loadgen_faults") / "inference")


def test_an_unknown_load_generator_on_the_command_line(tmp_path, tree):
    proc, elapsed = run_py(tree, host_yaml(tmp_path, tree), "--set", "load_generator=loadgen")
    assert_one_config_error(proc, elapsed, tmp_path, "command line (--set): key 'load_generator' must be one of inferperf, mlperf, got 'loadgen'")


def test_an_unknown_load_generator_in_a_vendor_config(tmp_path):
    perf = copy_inference_tree(tmp_path / "inference")
    path = set_key(case_file(perf, "vendor"), "load_generator", "lg")
    proc, elapsed = run_py(perf, host_yaml(tmp_path, perf))
    assert_one_config_error(proc, elapsed, tmp_path, f"{path}: key 'load_generator' must be one of inferperf, mlperf, got 'lg'")


def test_mlperf_without_loadgen_installed(tmp_path, tree):
    """A real interpreter that cannot import mlperf_loadgen: this venv's packages, LoadGen's left out
    (``python -S``: no site-packages of its own; PYTHONPATH: links to every other package)."""
    site = Path(np.__file__).resolve().parents[1]  # this venv's site-packages
    packages = tmp_path / "site"
    packages.mkdir()
    for entry in site.iterdir():
        if not entry.name.startswith(("mlperf_loadgen", "mlcommons_loadgen")):
            (packages / entry.name).symlink_to(entry)
    config = host_yaml(tmp_path, tree)
    env = {"PYTHONPATH": str(packages), "PATH": "/usr/bin:/bin"}
    check = subprocess.run([sys.executable, "-S", "-c", "import mlperf_loadgen"], env=env, capture_output=True, text=True)
    assert check.returncode == 1 and "No module named 'mlperf_loadgen'" in check.stderr
    start = time.monotonic()
    command = [sys.executable, "-S", "run.py", "--config", str(config), "--set", "load_generator=mlperf"]
    proc = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=120)
    assert_one_config_error(
        proc,
        time.monotonic() - start,
        tmp_path,
        "command line (--set): key 'load_generator' is 'mlperf', but MLPerf LoadGen is not installed here (pip install mlcommons-loadgen==6.0.17)",
    )
