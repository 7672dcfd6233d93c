"""run.py compare on real runs of the digits case (MODE local).

Two back-to-back default runs report no regression; a run on an engine that is really
20 % slower (tests/fixtures/engines/slow_onnxruntime.py: the cpu vendor's engine waiting a
quarter of its compute time after each call) is reported as a regression, exit 1.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import copy_inference_tree, local_host_yaml

# Noise intervals are the point here: the runs need a quiet machine (scripts/test.sh runs these alone).
pytestmark = pytest.mark.serial

SLOW_ENGINE = Path(__file__).resolve().parent / "fixtures" / "engines" / "slow_onnxruntime.py"


def run_py(perf: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "run.py", *args], cwd=perf, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, digits_data_dir) -> tuple[Path, dict[str, Path]]:
    """Three real runs, in this order: first and second (back to back, defaults), then slow."""
    root = tmp_path_factory.mktemp("compare_runs")
    perf = copy_inference_tree(root / "inference", cheap=False)  # default runs: the real measurement settings
    shutil.copy(SLOW_ENGINE, perf / "inference_engine" / "cpu" / "slow_onnxruntime.py")
    config = local_host_yaml(root, perf, digits_data_dir)
    found: dict[str, Path] = {}
    # The slow engine's sleeps (a quarter of each call's compute, tens of µs) jitter: its inference window may
    # not reach the shipped ±10 % and would run to the 60-s cap; 20 s measures it as well (judged with --include-invalid).
    slow = ["--set", "compiler=slow_onnxruntime", "--set", "max_duration_s=20"]
    for name, extra in (("first", []), ("second", []), ("slow", slow)):
        before = set((root / "result").glob("run*"))
        proc = run_py(perf, "--config", str(config), *extra)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        (found[name],) = set((root / "result").glob("run*")) - before
    return perf, found


def compare(perf: Path, a: Path, b: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    proc = run_py(perf, "compare", str(a), str(b), *extra)
    return proc, json.loads((b / f"compare_{a.name}.json").read_text())


# Between two runs a minute apart the 2-core machine's own speed moved by up to 27 % (docs/measurement.md,
# "Between runs"), beyond any within-run interval: compare's --threshold is the guard for that. At busier
# hours it swings more within seconds: one CI run's digits engine ran 37 % slower in its offline row than in
# its inference phase a few seconds before. So the threshold is the larger of 30 % and the swing each run
# itself shows between those two windows of the same engine at the same batch size.
MACHINE_BETWEEN_RUNS = 30


def own_swing(run: Path) -> int:
    """Percent by which a run's offline row and its inference phase (same engine, same batch size) differ."""
    result = json.loads(next(run.glob("*/*/result.json")).read_text())
    rates = (result["inference"]["core_qps"], result["performance"][0]["qps"])
    return math.ceil(100 * (max(rates) / min(rates) - 1))


def test_two_back_to_back_default_runs_report_no_regression(runs):
    perf, dirs = runs
    threshold = max(MACHINE_BETWEEN_RUNS, own_swing(dirs["first"]), own_swing(dirs["second"]))
    proc, data = compare(perf, dirs["first"], dirs["second"], "--threshold", str(threshold))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert f"No regression beyond {threshold}%." in proc.stdout
    # Both runs are VALID (the shipped precision is reached here), so every figure was judged, none "not comparable".
    assert all(not line["verdict"].startswith("not comparable") for line in data["lines"]), data["lines"]
    figures = [(line["row"], line["figure"]) for line in data["lines"]]
    assert figures[:3] == [("inference", "core qps"), ("inference", "p50 ms"), ("inference", "p90 ms")] and len(figures) >= 6
    assert all(line["change"] is not None for line in data["lines"])
    assert not [line for line in data["lines"] if line["verdict"] == "REGRESSION"]


def test_a_really_slower_engine_is_a_regression(runs):
    perf, dirs = runs
    slow = json.loads(next(dirs["slow"].glob("*/*/result.json")).read_text())
    assert slow["compiler"] == "slow_onnxruntime"
    # --include-invalid: on a shared machine a run may be INVALID for contention, and its figures
    # "not comparable"; the slowdown is the engine's either way, so it is judged regardless.
    proc, data = compare(perf, dirs["second"], dirs["slow"], "--include-invalid")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    # On this 2-core machine a window's rate wanders by about ±20 % over seconds (docs/measurement.md),
    # more than the slowdown between two windows of different runs: which of the engine's windows
    # shows it varies (in two CI runs: the offline row's qps and p50 once, the inference phase's p50
    # and p90 the other time). The slowdown must show as a REGRESSION of more than 10 % in at least one.
    worse = [
        line for line in data["lines"] if line["verdict"] == "REGRESSION" and (line["change"] < -0.10 if line["higher_is_better"] else line["change"] > 0.10)
    ]
    assert worse, data["lines"]
    assert "**REGRESSION**" in proc.stdout
