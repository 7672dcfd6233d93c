"""load_generator: mlperf — performance rows under the real MLPerf LoadGen (tools/measure/loadgen.py).

The digits case runs for real through run_inference.py and LoadGen's VALID lands in
the rows, checked against LoadGen's own summary file; an engine error inside LoadGen's
callback is raised after the test, in every scenario; the key's bad input is one line
and exit 2 through run.py, including LoadGen not being installed (a real interpreter
without the package). The fast parts are in tests/test_loadgen_units.py.
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

from common.errors import EngineError
from tests.conftest import copy_inference_tree
from tests.infra.run_py import assert_one_config_error, case_file, host_yaml, run_counting_cpu, run_py, set_key
from tools.measure import loadgen

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
# LoadGen judges these rows itself (a server row's p99 against latency_bound_ms, early stopping), so
# they need the machine to themselves: under the parallel part's load a neighbour's stall can push a
# sub-millisecond query's p99 over 100 ms and the server row to INVALID. They run in the serial part
# (scripts/test.sh).
QUIET = pytest.mark.serial


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
    command = [
        sys.executable,
        "run_inference.py",
        "--perf_dir",
        str(perf),
        "--data_dir",
        str(digits_data_dir),
        "--log_dir",
        str(log),
    ]
    command += ["--vendor", "cpu", "--case", "digits", "--framework", "pytorch"]
    command += [arg for key, value in overrides.items() for arg in ("--set", f"{key}={value}")]
    proc = subprocess.run(command, cwd=perf, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"log": log, "result": json.loads((log / "result.json").read_text()), "stdout": proc.stdout}


@QUIET
def test_digits_under_loadgen_puts_loadgens_valid_into_every_row(digits_mlperf):
    rows = digits_mlperf["result"]["performance"]
    assert [(r["scenario"], r["batch_size"], r["load_generator"]) for r in rows] == [
        (s, 16, "mlperf") for s in ("offline", "single_stream", "server")
    ]
    for row in rows:
        block = row["loadgen"]
        assert block["result_validity"] == "VALID" and block["valid"] is True, block
        assert block["version"].startswith("6.0.17")
        assert all(block["conditions"].values()) and block["errors"] == []
        assert not [reason for reason in row["verdict"]["reasons"] if reason.startswith("mlperf loadgen")]
        assert row["accuracy_in_performance_mode"]["passed"] is True  # outputs sampled inside LoadGen's test
        assert (
            block["settings"]["min_duration_ms"] == 500 and block["settings"]["performance_sample_count"] == 8
        )  # the pool's batches


@QUIET
def test_the_rows_figures_are_loadgens_own_as_its_summary_file_says(digits_mlperf):
    log = digits_mlperf["log"]
    for row in digits_mlperf["result"]["performance"]:
        prefix = f"mlperf_log_bs16_{row['scenario']}_x1_"
        assert sorted(row["loadgen"]["log_files"]) == [
            f"{prefix}{n}" for n in ("accuracy.json", "detail.txt", "summary.txt", "trace.json")
        ]
        text = (log / f"{prefix}summary.txt").read_text()
        assert "Result is : VALID" in text
        rate = summary_value(text, SUMMARY_RATE[row["scenario"]])
        assert row["qps"] == pytest.approx(rate * 16, rel=1e-4)  # LoadGen's samples are batches of 16
        assert row["loadgen"]["latency_ms"]["p90"] == pytest.approx(
            summary_value(text, r"90.00 percentile latency \(ns\)\s*: (\d+)") / 1e6
        )
    single = next(r for r in digits_mlperf["result"]["performance"] if r["scenario"] == "single_stream")
    # SingleStream's headline: LoadGen's p90, and its early-stopping estimate of it.
    assert single["latency_ms"]["p90"] == single["loadgen"]["latency_ms"]["p90"]
    assert single["queries"] >= 64 and single["loadgen"]["query_count"] == single["queries"]
    text = (log / "mlperf_log_bs16_single_stream_x1_summary.txt").read_text()
    estimate = summary_value(text, r"Early stopping 90.0th percentile estimate: (\d+)") / 1e6
    assert single["loadgen"]["early_stopping_estimate_ms"]["p90"] == pytest.approx(estimate)
    # LoadGen's window met its 0.5 s minimum by LoadGen's own account; the row's duration_s is that window
    # less the harness's own time in it (tools/measure/loadgen.py), so it may end a few µs under 0.5 s.
    assert single["duration_s"] > 0 and single["loadgen"]["conditions"]["min_duration_met"] is True
    server = next(r for r in digits_mlperf["result"]["performance"] if r["scenario"] == "server")
    assert server["target_qps"] == 4000.0 and server["latency_bound_met"] is True and server["queries"] >= 662
    scheduled = summary_value(
        (log / "mlperf_log_bs16_server_x1_summary.txt").read_text(), r"Scheduled samples per second\s*: ([\d.]+)"
    )
    assert server["issued_qps"] == pytest.approx(scheduled * 16, rel=1e-3)


@QUIET
def test_the_rows_raw_latencies_are_inferperfs_own_timings_of_each_query(digits_mlperf):
    result, log = digits_mlperf["result"], digits_mlperf["log"]
    with np.load(log / "latencies.npz") as raw:
        for index, row in enumerate(result["performance"]):
            series = raw[f"performance_{index}"]
            assert len(series) == row["queries"] > 0 and (series > 0).all()
    offline = result["performance"][0]
    assert offline["latency_notes"][0].startswith("offline: per-batch engine latency timed by the SUT")
    assert offline["latency_ms"]["p50"] < offline["loadgen"]["latency_ms"]["p50"]  # one batch vs LoadGen's whole query


# ---- engine errors ------------------------------------------------------------------------------------


def test_an_engine_error_inside_loadgens_test_is_raised_after_it(tmp_path, monkeypatch):
    config = types.SimpleNamespace(
        min_duration_s=1.0, max_duration_s=10.0, min_query_count=64, seed=0, latency_bound_ms=1000.0
    )
    pool = [[torch.zeros(2, 3)] for _ in range(4)]
    real_settings = loadgen.loadgen_settings
    for scenario, clients in (("single_stream", 1), ("offline", 1), ("offline", 2), ("server", 1)):
        inside = []  # calls made once LoadGen's settings exist: after the probe, inside LoadGen's test

        def settings_after_the_probe(*args, **kwargs):
            inside.append(0)
            return real_settings(*args, **kwargs)

        monkeypatch.setattr(loadgen, "loadgen_settings", settings_after_the_probe)

        def engine(inputs):
            time.sleep(0.001)
            if inside:
                inside.append(1)
                if len(inside) > 4:  # the fourth call inside LoadGen's test (by count, not by a wall-clock instant)
                    raise EngineError(f"engine broke ({scenario})")
            return [inputs[0]], 0.0

        start = time.monotonic()
        with pytest.raises(EngineError, match=rf"engine broke \({scenario}\)"):
            loadgen.run_loadgen(
                engine,
                pool,
                loadgen.LoadgenTest(scenario=scenario, batch_size=2, clients=clients, target_qps=2000.0),
                config,
                tmp_path,
            )
        # LoadGen's test ended (every later sample completed at once; server: its 662 arrivals at 1000/s):
        # a hang guard only, far above the 1 s test.
        assert time.monotonic() - start < 60


# ---- the key's bad input through run.py: one line, exit 2, nothing written -----------------------------


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    return copy_inference_tree(tmp_path_factory.mktemp("loadgen_faults") / "inference")


def test_an_unknown_load_generator_on_the_command_line(tmp_path, tree):
    proc, cpu = run_py(tree, host_yaml(tmp_path, tree), "--set", "load_generator=loadgen")
    assert_one_config_error(
        proc,
        cpu,
        tmp_path,
        "command line (--set): key 'load_generator' must be one of inferperf, mlperf, got 'loadgen'",
    )


def test_an_unknown_load_generator_in_a_vendor_config(tmp_path):
    perf = copy_inference_tree(tmp_path / "inference")
    path = set_key(case_file(perf, "vendor"), "load_generator", "lg")
    proc, cpu = run_py(perf, host_yaml(tmp_path, perf))
    assert_one_config_error(
        proc, cpu, tmp_path, f"{path}: key 'load_generator' must be one of inferperf, mlperf, got 'lg'"
    )


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
    check = subprocess.run(
        [sys.executable, "-S", "-c", "import mlperf_loadgen"], env=env, capture_output=True, text=True
    )
    assert check.returncode == 1 and "No module named 'mlperf_loadgen'" in check.stderr
    command = [sys.executable, "-S", "run.py", "--config", str(config), "--set", "load_generator=mlperf"]
    proc, cpu = run_counting_cpu(command, cwd=tree, env=env)
    assert_one_config_error(
        proc,
        cpu,
        tmp_path,
        "command line (--set): key 'load_generator' is 'mlperf', but MLPerf LoadGen is not installed here "
        "(pip install mlcommons-loadgen==6.0.17)",
    )
