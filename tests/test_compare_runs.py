"""run.py --repeat, run.py ab and run.py compare on real runs of the digits case (MODE local).

These check what the commands do with real processes and files: a repetition is a fresh
pipeline in its own folder, the headline is the repetitions' geometric mean, ab runs its
variants ABBA and decides with compare's rule. Whether a real slowdown is found, and how often
two identical engines are called different, depends on the machine's speed from minute to
minute: those are measured in bench/compare_calibration.py, not asserted here.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from common.record import Key
from tests.conftest import copy_inference_tree, local_host_yaml

SLOW_ENGINE = Path(__file__).resolve().parent / "fixtures" / "engines" / "slow_onnxruntime.py"


def run_py(perf: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "run.py", *args], cwd=perf, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def tree(tmp_path_factory, digits_data_dir) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("compare_runs")
    perf = copy_inference_tree(root / "inference")  # the tests' cheap measurement: they check the plumbing
    shutil.copy(SLOW_ENGINE, perf / "inference_engine" / "cpu" / "slow_onnxruntime.py")
    return root, perf, local_host_yaml(root, perf, digits_data_dir)


def new_run(root: Path, before: set[Path]) -> Path:
    (found,) = set((root / "result").glob("run*")) - before
    return found


def result_json(folder: Path) -> dict:
    return json.loads((folder / "result.json").read_text())


def test_repeat_runs_each_case_again_in_a_fresh_process_and_merges_the_repetitions(tree):
    root, perf, config = tree
    before = set((root / "result").glob("run*"))
    # a case config's repetitions (here from --set; run.py --repeat in the ab test below)
    proc = run_py(perf, "--config", str(config), "--set", "repetitions=2", "--set", "batch_sizes=[16]")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    run = new_run(root, before)
    first, second = run / "digits:pytorch" / "127.0.0.1_noderank0", run / "digits:pytorch" / "127.0.0.1_noderank0_rep2"
    r1, r2 = result_json(first), result_json(second)
    assert (
        r2["inference"]["started_at_unix"] > r1["inference"]["finished_at_unix"]
    )  # one after the other, each its own process
    (record,) = json.loads((run / "summary.json").read_text())["results"]
    block = record["repetitions"]
    assert block["count"] == 2 and block["log_dirs"] == [str(first), str(second)]
    core = next(f for f in block["figures"] if (f["row"], f["figure"]) == ("inference", "core qps"))
    values = [r1["inference"]["core_qps"], r2["inference"]["core_qps"]]
    assert core["values"] == pytest.approx(values)
    assert record[Key.INFER_CORE_QPS] == pytest.approx(math.sqrt(values[0] * values[1]))  # the geometric mean
    lo, hi = record["ci95"][Key.INFER_CORE_QPS]
    assert lo <= min(values) and hi >= max(values)  # two repetitions: a t-interval with 1 degree of freedom is wide
    assert "Repetitions (run.py --repeat" in (run / "summary.md").read_text()
    assert "2 repetitions: each figure over its geometric mean" in (run / "report.html").read_text()


def test_ab_runs_two_variants_abba_and_decides_between_them(tree):
    root, perf, config = tree
    before = set((root / "result").glob("run*"))
    proc = run_py(
        perf, "ab", "--config", str(config), "--set", "batch_sizes=[16]",
        "--set-a", "compiler=onnxruntime", "--set-b", "compiler=slow_onnxruntime",
        "--repeat", "2", "--allow-invalid",
    )  # fmt: skip
    run = new_run(root, before)
    decision = json.loads((run / "B" / "compare_A.json").read_text())
    assert proc.returncode == decision["exit_code"] and proc.returncode in (0, 1), (
        proc.stdout[-3000:] + proc.stderr[-2000:]
    )
    starts = {}
    for variant, compiler in (("A", "onnxruntime"), ("B", "slow_onnxruntime")):
        base = run / variant / "digits:pytorch" / "127.0.0.1_noderank0"
        for repetition, folder in ((1, base), (2, base.with_name(base.name + "_rep2"))):
            result = result_json(folder)
            assert result["compiler"] == compiler
            starts[(variant, repetition)] = result["inference"]["started_at_unix"]
        assert json.loads((run / variant / "summary.json").read_text())["results"][0]["repetitions"]["count"] == 2
    assert sorted(starts, key=starts.get) == [("A", 1), ("B", 1), ("B", 2), ("A", 2)]
    lines = {(line["row"], line["figure"]): line for line in decision["lines"]}
    core = lines[("inference", "core qps")]
    assert (core["n_a"], core["n_b"], core["widened"], core["paired"]) == (2, 2, False, True)
    assert core["ratio"] == pytest.approx(core["b"] / core["a"])
    assert "B/A (95% CI)" in proc.stdout


def test_bad_input_writes_nothing(tree):
    root, perf, config = tree
    before = set((root / "result").glob("run*"))
    for args, message in (
        (["--repeat", "0"], "--repeat: must be from 1 to"),
        (["--repeat", "two"], "--repeat: must be a whole number"),
        (["ab", "--set-a", "fp16=false", "--set-b", "fp16=false"], "are the same variant"),
        (["ab", "--set-a", "batch_sizes=[16]", "--set", "batch_sizes=[16]"], "key 'batch_sizes' is given twice"),
    ):
        argv = args[:1] + ["--config", str(config)] + args[1:] if args[0] == "ab" else ["--config", str(config), *args]
        proc = run_py(perf, *argv)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert set((root / "result").glob("run*")) == before


def test_strict_fails_a_run_that_left_a_check_not_judged(tree):
    root, perf, config = tree
    before = set((root / "result").glob("run*"))
    proc = run_py(perf, "--config", str(config), "--set", "batch_sizes=[16]", "--set", "audits=false", "--strict")
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "with checks not judged (--strict)" in proc.stderr
    (record,) = json.loads((new_run(root, before) / "summary.json").read_text())["results"]
    assert "engine: audits: not judged (audits: false in the case config)" in record["verdict"]["not_judged"]
