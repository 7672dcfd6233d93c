"""ByteMLPerf drop-in (issue 21): backend folders, interact profiles, workloads and bytemlperf.json.

The backend folders are tests/fixtures/bytemlperf/ (written in ByteMLPerf's conventions,
ONNX Runtime standing in for the hardware). End-to-end runs are run_inference.py and
run.py subprocesses in a copy of inference/ where the folders are copied into a vendor
directory, as a vendor would: ``inference_engine/bytecpu/<FOLDER>/``. The unit tests
below the end-to-end ones run in-process.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from common.errors import ConfigError
from tests.conftest import copy_inference_tree, local_host_yaml, run_py

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "bytemlperf"
VENDOR = "bytecpu"
BATCH = 16  # digits' batch_size
# The vendor's answers to ORTCPU's interact profile: a flat key and ByteMLPerf's interact_info mapping.
VENDOR_CONFIG = "compiler: ORTCPU\ngraph_level: basic\ninteract_info:\n  calibrate: true\n  calibration_batches: 2\n"
WORKLOAD = json.loads(
    (FIXTURES / "workloads" / "digits-torch-fp32.json").read_text()
)  # a workload file in ByteMLPerf's form
FAST = ("--set", "min_duration_s=0.2")


def _renamed_backend(source: Path, target: Path, name: str) -> None:
    """A copy of a fixture folder under another backend name (ByteMLPerf's naming rules)."""
    target.mkdir(parents=True)
    old = source.name
    for path in source.iterdir():
        text = path.read_text().replace(old, name).replace(old.lower(), name.lower())
        (target / path.name.replace(old, name).replace(old.lower(), name.lower())).write_text(text)


@pytest.fixture(scope="module")
def byte_tree(tmp_path_factory) -> Path:
    """inference/ copied, with the fixture backends as vendor bytecpu's compilers - nothing else changed."""
    perf = copy_inference_tree(tmp_path_factory.mktemp("bytemlperf") / "inference")
    vendor = perf / "inference_engine" / VENDOR
    for name in ("ORTCPU", "LISTCPU", "TFCPU"):
        shutil.copytree(FIXTURES / name, vendor / name)
    _renamed_backend(FIXTURES / "ORTCPU", vendor / "BADCPU", "BADCPU")
    (vendor / "BADCPU" / "BADCPU.json").write_text('[{"name": "graph_level", "type": "str",}]')  # a trailing comma
    npcpu = vendor / "NPCPU"
    _renamed_backend(FIXTURES / "LISTCPU", npcpu, "NPCPU")
    text = (npcpu / "compile_backend_npcpu.py").read_text()
    (npcpu / "compile_backend_npcpu.py").write_text(
        text.replace("import os\n", "import os\n\nimport numpy as np\n\nFLOAT = np.float\n", 1)
    )
    (perf / "configs" / "digits" / "vendor_config" / f"{VENDOR}_configurations.yaml").write_text(VENDOR_CONFIG)
    return perf


def _env() -> dict:
    import os

    return {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "PYTHONDONTWRITEBYTECODE": "1"}


def _run_inference(perf: Path, data: Path, log_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    argv = [
        "run_inference.py",
        "--perf_dir",
        ".",
        "--data_dir",
        str(data),
        "--log_dir",
        str(log_dir),
        "--vendor",
        VENDOR,
        "--case",
        "digits",
    ]
    return subprocess.run(
        [sys.executable, *argv, "--framework", "pytorch", *FAST, "--set", "min_query_count=16", *extra],
        cwd=perf,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _last_line(proc: subprocess.CompletedProcess) -> str:
    return (proc.stderr or proc.stdout).strip().splitlines()[-1]


# ---- end to end: run_inference.py ----------------------------------------------------------
def test_backend_runs_unmodified_with_profile_best_batch_sizes_and_its_own_benchmark(
    byte_tree, digits_data_dir, tmp_path
):
    log = tmp_path / "log"
    run = _run_inference(byte_tree, digits_data_dir, log, "--set", "intra_threads=1", "--set", "batch_sizes=best")
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads((log / "result.json").read_text())
    engine = result["engine"]
    report = engine["compile_report"]
    # The compile report is the backend's own dict, adopted as the engine's.
    assert report["backend"] == report["hardware_type"] == "ORTCPU" and report["backend_kind"] == "bytemlperf"
    assert report["compile_status"] == "success" and report["sg_percent"] == 100 and report["pre_optimized"] is True
    assert (report["need_reload"], report["need_quant"]) == (False, False)
    # Answers: the vendor config (flat key and interact_info), --set, and defaults for the rest.
    assert report["interact_info"] == {
        "ort_sequential": True,
        "graph_level": "basic",
        "intra_threads": 1,
        "calibrate": True,
        "calibration_batches": 2,
    }
    assert report["optimizations"] == {"graph_level": "basic", "intra_threads": 1}
    # compile() read two batches of the case's data through ByteMLPerf's Dataset interface.
    assert report["calibration_samples"] == 2 * BATCH
    # get_best_batch_size() became the sweep (batch_sizes: best), and compile() saw it in the workload.
    assert engine["best_batch_sizes"] == [2, 8] and report["batch_sizes_compiled"] == [2, 8]
    assert result["config"]["batch_sizes"] == [2, 8]
    assert [row["batch_size"] for row in result["performance"]] == [2, 8]
    assert engine["version"].startswith("ORTCPU: onnxruntime ")
    # predict() returned a dict by output name: the engine computes what PyTorch does.
    assert result["numeric"]["passed"] is True
    assert result["infer_average_acc"] == result["val_average_acc"] > 0.9
    # benchmark() ran per batch size after load(bs); load() was never called inside a timed call:
    # 1 at compile, 1 before each of the 2 rows, 1 before each own benchmark() = 4 and 5.
    own = engine["own_benchmark"]
    assert own["source"] == "ORTCPU: RuntimeBackendORTCPU.benchmark()" and "never instead of it" in own["note"]
    assert [(r["BS"], r["Loads"]) for r in own["rows"]] == [(2, 4), (8, 5)]
    assert all(r["QPS"] > 0 and r["AVG Latency"] > 0 and r["P99 Latency"] > 0 for r in own["rows"])
    # InferPerf's rows stay its own measurement (the backend's figures are only beside them).
    assert all(row["queries"] >= 16 and "verdict" in row and "QPS" not in row for row in result["performance"])
    # bytemlperf.json: ByteMLPerf's report shape, from the same record.
    byte = json.loads((log / "bytemlperf.json").read_text())
    assert byte["Model"] == "DIGITS-TORCH-FP32" and byte["Backend"] == "ORTCPU" and byte["Dataset"] == "DIGITS"
    assert byte["Graph Compile"]["Compile Precision"] == "FP32" and byte["Graph Compile"]["Subgraph Coverage"] == 100
    assert byte["Graph Compile"]["Compile Duration"] == round(report["compile_duration"], 5)
    assert (byte["Instance Count"], byte["Device Count"]) == (1, 1)
    assert (
        byte["Accuracy"]["Top-1"] == round(result["inference"]["accuracy"], 5)
        and byte["Accuracy"]["Numeric Check"] == "passed"
    )
    assert [(p["BS"], p["QPS"]) for p in byte["Performance"]] == [
        (r["batch_size"], round(r["qps"], 2)) for r in result["performance"]
    ]
    assert [p["AVG Latency"] for p in byte["Performance"]] == [
        round(r["latency_ms"]["mean"], 3) for r in result["performance"]
    ]
    assert byte["Backend Performance"] == own["rows"]
    assert byte["Verdict"] == ("VALID" if result["verdict"]["valid"] else "INVALID")


def test_list_returning_predict_without_version_or_benchmark(byte_tree, digits_data_dir, tmp_path):
    log = tmp_path / "log"
    run = _run_inference(byte_tree, digits_data_dir, log, "--set", "compiler=LISTCPU", "--set", "batch_sizes=best")
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads((log / "result.json").read_text())
    engine = result["engine"]
    assert "version" not in engine  # version() raises NotImplementedError, as ByteMLPerf's CPU backend's does
    assert "own_benchmark" not in engine and "best_batch_sizes" not in engine
    assert result["config"]["batch_sizes"] == [BATCH]  # best, without a list from the backend: batch_size
    assert result["numeric"]["passed"] is True  # predict() returned a list, in ONNX output order
    assert engine["compile_report"]["interact_info"] == {}  # an empty LISTCPU.json: no questions
    assert json.loads((log / "bytemlperf.json").read_text())["Backend"] == "LISTCPU"


@pytest.mark.parametrize(
    "extra, code, expected",
    [
        (
            ("--set", "compiler=BADCPU"),
            2,
            "inference_engine/bytecpu/BADCPU/BADCPU.json: not valid JSON: Expecting property name enclosed in double "
            "quotes at line 1 column 40",
        ),
        (
            ("--set", "graph_level=max"),
            2,
            "command line (--set): key 'graph_level' (interact profile entry of backend ORTCPU, ORTCPU.json) must be "
            "one of "
            "'disable', 'basic', 'extended', 'all', got 'max'",
        ),
        (
            ("--set", "ort_sequential=3"),
            2,
            "command line (--set): key 'ort_sequential' (interact profile entry of backend ORTCPU, ORTCPU.json) must "
            "be of type bool, got 3",
        ),
        (
            ("--set", "compiler=TFCPU"),
            2,
            "ByteMLPerf backend 'TFCPU' (inference_engine/bytecpu/TFCPU): compile_backend_tfcpu.py imports "
            "'tensorflow', "
            "which is not installed here (its requirements.txt pins tensorflow==2.4.0)",
        ),
        (
            ("--set", "compiler=NPCPU"),
            4,
            "ByteMLPerf backend 'NPCPU' (inference_engine/bytecpu/NPCPU): importing compile_backend_npcpu.py failed "
            "(compile_backend_npcpu.py line 7): AttributeError: module 'numpy' has no attribute 'float'. "
            "(NumPy 1.24 removed np.float; this backend needs numpy<1.24)",
        ),
    ],
    ids=["broken-profile-json", "outside-options", "wrong-type", "missing-package", "numpy-alias"],
)
def test_bad_backends_and_answers_are_one_line(byte_tree, digits_data_dir, tmp_path, extra, code, expected):
    log = tmp_path / "log"
    run = _run_inference(byte_tree, digits_data_dir, log, *extra)
    assert run.returncode == code, run.stderr[-2000:]
    line = _last_line(run)
    assert "| ERROR   | step 'init' failed: " in line and line.endswith(expected), line
    assert "Traceback" not in run.stderr + run.stdout
    assert sorted(p.name for p in log.iterdir()) == [
        "container.out.log",
        "failure.json",
    ]  # no result.json, no bytemlperf.json


# ---- end to end: run.py ----------------------------------------------------------------------
def _write_workload(path: Path, **changes) -> Path:
    path.write_text(json.dumps({**WORKLOAD, **changes}))
    return path


def test_workload_in_cases_runs_through_run_py(byte_tree, digits_data_dir, tmp_path):
    workload = _write_workload(tmp_path / "digits-torch-fp32.json")
    config = local_host_yaml(
        tmp_path, byte_tree, digits_data_dir, VENDOR=VENDOR, CASES={str(workload): str(digits_data_dir)}
    )
    run = run_py(byte_tree, config, *FAST)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    case_dir = next((tmp_path / "result").glob("run*/digits:pytorch/*"))
    result = json.loads((case_dir / "result.json").read_text())
    config_used = result["config"]
    # Each workload key, mapped onto InferPerf's.
    assert config_used["batch_sizes"] == [4, 16] and config_used["clients"] == [2]
    assert config_used["min_query_count"] == 2 * 20  # clients x iterations
    assert (
        config_used["numeric_check"] is True and config_used["fp16"] is False and config_used["compile_only"] is False
    )
    # data_percent 50: 12 of the test split's 23 batches of 16 (ceil(23 / 2)).
    assert (
        config_used["data_percent"] == 50
        and result["validation"]["samples"] == 12 * BATCH * result["validation"]["passes"]
    )
    assert [(r["batch_size"], r["clients"]) for r in result["performance"]] == [(4, 2), (16, 2)]
    assert all(r["queries"] >= 40 for r in result["performance"])
    assert result["engine"]["compile_report"]["backend"] == "ORTCPU"
    byte = json.loads((case_dir / "bytemlperf.json").read_text())
    assert [p["BS"] for p in byte["Performance"]] == [4, 16] and byte["Backend Performance"][0]["BS"] == 4
    html = next((tmp_path / "result").glob("run*/report.html")).read_text()
    assert "backend&#39;s own benchmark()" in html or "backend's own benchmark()" in html


def test_run_py_workload_option_takes_the_data_dir_from_cases(byte_tree, digits_data_dir, tmp_path):
    workload = _write_workload(tmp_path / "w.json", batch_sizes=[8], clients=1, iterations=16, compile_only=True)
    config = local_host_yaml(tmp_path, byte_tree, digits_data_dir, VENDOR=VENDOR)
    run = run_py(byte_tree, config, "--workload", str(workload), "--set", "compile_only=false", *FAST)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    result = json.loads(next((tmp_path / "result").glob("run*/digits:pytorch/*/result.json")).read_text())
    # --set wins over the workload's own compile_only; the rest of the workload applies.
    assert result["config"]["compile_only"] is False and result["config"]["batch_sizes"] == [8]
    assert result["config"]["min_query_count"] == 16


@pytest.mark.parametrize(
    "how, expected",
    [
        (
            "unknown-key",
            "{workload}: unknown workload key 'fake_data' (ByteMLPerf's keys: model, test_perf, test_accuracy, ",
        ),
        (
            "no-case",
            "{workload}: model 'yolov5-torch-fp32' has no InferPerf case: no benchmarks/yolov5/pytorch/; cases here: ",
        ),
        (
            "tf-model",
            "{workload}: model 'digits-tf-fp32' has no InferPerf case: framework 'tf' (InferPerf runs torch models); ",
        ),
        (
            "bad-value",
            "{workload}: workload key 'batch_sizes' must be a non-empty list of batch sizes from 1 to 65536, got []",
        ),
        ("broken-profile", "inference_engine/bytecpu/BADCPU/BADCPU.json: not valid JSON: "),
        ("requirements", "backend 'TFCPU' (inference_engine/bytecpu/TFCPU): package 'numpy' "),
    ],
)
def test_run_py_bad_input_is_one_line_and_writes_nothing(byte_tree, digits_data_dir, tmp_path, how, expected):
    workload = tmp_path / "w.json"
    changes = {
        "unknown-key": {"fake_data": False},
        "no-case": {"model": "yolov5-torch-fp32"},
        "tf-model": {"model": "digits-tf-fp32"},
        "bad-value": {"batch_sizes": []},
    }.get(how, {})
    _write_workload(workload, **changes)
    config = local_host_yaml(tmp_path, byte_tree, digits_data_dir, VENDOR=VENDOR)
    extra = {"broken-profile": ("--set", "compiler=BADCPU"), "requirements": ("--set", "compiler=TFCPU")}.get(
        how, ("--workload", str(workload))
    )
    run = run_py(byte_tree, config, *extra)
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert run.returncode == 2, run.stderr[-2000:]
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    assert expected.format(workload=workload) in lines[0], lines[0]
    if how == "requirements":
        assert "install with: pip install -r " in lines[0] and lines[0].endswith(
            "inference_engine/bytecpu/TFCPU/requirements.txt"
        )
    assert not (tmp_path / "result").exists()


def test_list_shows_backend_folders_and_their_interact_profiles(byte_tree):
    run = subprocess.run(
        [sys.executable, "run.py", "--list"], cwd=byte_tree, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert "  bytecpu: BADCPU, LISTCPU, NPCPU, ORTCPU, TFCPU; images: none" in run.stdout
    assert "    LISTCPU (ByteMLPerf backend): interact profile LISTCPU.json: no entries" in run.stdout
    assert (
        '      graph_level (str, one of disable|basic|extended|all, default "all"): ONNX Runtime graph optimisation '
        "level" in run.stdout
    )
    assert "      calibration_batches (int, default 1, if calibrate): How many batches to read" in run.stdout
    assert "    BADCPU (ByteMLPerf backend): interact profile unreadable: " in run.stdout


# ---- units ---------------------------------------------------------------------------------------
def test_general_perf_base_classes_have_bytemlperfs_shape():
    from general_perf.backends import compile_backend, runtime_backend

    compiler, runtime = compile_backend.CompileBackend(), runtime_backend.RuntimeBackend()
    for backend in (compiler, runtime):
        assert (backend.hardware_type, backend.need_reload, backend.need_quant) == ("UnKnown", False, False)
        with pytest.raises(NotImplementedError):
            backend.version()
    assert compiler.pre_optimize({"a": 1}) == {"a": 1} and compiler.tuning({}) is None and compiler.segment({}) is None
    for call in (lambda: compiler.compile({}), lambda: compiler.get_interact_profile({}), compiler.get_best_batch_size):
        with pytest.raises(NotImplementedError):
            call()
    assert runtime.is_qs_mode_supported() is False and runtime.generate_qs_config() is None
    for call in (
        lambda: runtime.load(1),
        runtime.get_loaded_batch_size,
        lambda: runtime.predict({}),
        lambda: runtime.benchmark(None),
    ):
        with pytest.raises(NotImplementedError):
            call()


def _profile(entries) -> list:
    from tools.compat.bytemlperf.profile import parse_profile

    return parse_profile(entries, "X.json")


class _Config(dict):
    origin = {"graph_level": "v.yaml", "interact_info": "v.yaml", "batch_sizes": "c.yaml"}

    def get(self, key, default=None):
        return super().get(key, default)


def _answers(entries, config: dict) -> dict:
    from tools.compat.bytemlperf.profile import config_lookup, resolve_answers

    return resolve_answers(
        _profile(entries), config_lookup(_Config(config), frozenset({"batch_sizes"})), "XYZ", "XYZ.json"
    )


PROFILE = [
    {
        "name": "omp",
        "note": "Using OMP?",
        "dialog_type": "Yes/No Dialog",
        "type": "bool",
        "default": False,
        "depends": None,
    },
    {
        "name": "precision",
        "dialog_type": "Radiolist Dialog",
        "options": ["FP8", "FP16"],
        "type": "str",
        "default": "FP16",
        "depends": None,
    },
    {
        "name": "bits",
        "dialog_type": "Radiolist Dialog",
        "type": "int",
        "default": "12",
        "options": ["12", "13", "14"],
        "depends": "omp",
    },
    {"name": "max_seq_len", "dialog_type": "Input Dialog", "type": "int", "depends": "omp,bits"},
    {"name": "batch_sizes", "dialog_type": "Input Dialog", "type": "str", "default": "1,4"},
]


def test_profile_answers_defaults_depends_and_sources():
    # Defaults; entries whose depends is falsy are not asked (nor is a later one depending on them).
    assert _answers(PROFILE, {}) == {"omp": False, "precision": "FP16", "batch_sizes": "1,4"}
    # interact_info wins over a flat key; int options written as strings compare as ints; InferPerf's
    # own keys (batch_sizes here) never answer an entry.
    answers = _answers(
        PROFILE, {"omp": True, "bits": 13, "interact_info": {"bits": "14", "max_seq_len": 384}, "batch_sizes": [1, 2]}
    )
    assert answers == {"omp": True, "precision": "FP16", "bits": 14, "max_seq_len": 384, "batch_sizes": "1,4"}


@pytest.mark.parametrize(
    "config, message",
    [
        (
            {"precision": "FP32"},
            "config: key 'precision' (interact profile entry of backend XYZ, XYZ.json) must be one of 'FP8', 'FP16', "
            "got 'FP32'",
        ),
        (
            {"omp": "yes"},
            "config: key 'omp' (interact profile entry of backend XYZ, XYZ.json) must be of type bool, got 'yes'",
        ),
        (
            {"omp": True, "bits": 15, "max_seq_len": 1},
            "config: key 'bits' (interact profile entry of backend XYZ, XYZ.json) must be one of 12, 13, 14, got 15",
        ),
        (
            {"omp": True, "interact_info": {"bits": "x"}},
            "v.yaml: key 'interact_info.bits' (interact profile entry of backend XYZ, XYZ.json) must be of type int, "
            "got 'x'",
        ),
        (
            {"omp": True},
            "XYZ.json: entry 'max_seq_len' of backend XYZ has no default: answer it in the vendor config (max_seq_len: "
            "...) or with --set max_seq_len=...",
        ),
        ({"interact_info": [1]}, "v.yaml: key 'interact_info' must be a mapping of interact profile entries to values"),
    ],
)
def test_profile_bad_answers_name_the_key_and_entry(config, message):
    with pytest.raises(ConfigError) as info:
        _answers(PROFILE, config)
    assert str(info.value) == message


@pytest.mark.parametrize(
    "entries, message",
    [
        ({"name": "x"}, "X.json: an interact profile must be a JSON list of entries, got dict"),
        (
            [{"name": "a-b", "type": "int"}],
            "X.json: entry 'a-b' needs a 'name' of letters, digits and '_' (it is answered as a config key), got 'a-b'",
        ),
        ([{"name": "a", "type": "list"}], "X.json: entry 'a' needs a 'type' of bool, int, float, str, got 'list'"),
        (
            [{"name": "a", "type": "str", "dialog_type": "Yes/No Dialog"}],
            "X.json: entry 'a' is a Yes/No Dialog, so its 'type' must be bool, got 'str'",
        ),
        (
            [{"name": "a", "type": "str", "dialog_type": "Radiolist Dialog"}],
            "X.json: entry 'a' needs 'options', a non-empty list, got None",
        ),
        (
            [{"name": "a", "type": "int", "options": ["1", "x"]}],
            "X.json: entry 'a' option must be of type int, got 'x'",
        ),
        (
            [{"name": "a", "type": "str", "options": ["A"], "default": "B"}],
            "X.json: entry 'a' default must be one of 'A', got 'B'",
        ),
        (
            [{"name": "a", "type": "bool", "depends": "b"}],
            "X.json: entry 'a' depends on 'b', which is not an earlier entry of the profile",
        ),
        ([{"name": "a", "type": "bool"}, {"name": "a", "type": "bool"}], "X.json: entry 'a' is listed twice"),
        ([7], "X.json: entry 0 must be a JSON object, got 7"),
    ],
)
def test_broken_profiles_are_one_line(entries, message):
    with pytest.raises(ConfigError) as info:
        _profile(entries)
    assert str(info.value) == message


def test_profile_files_empty_missing_and_invalid(tmp_path):
    from tools.compat.bytemlperf.profile import load_profile

    empty = tmp_path / "A.json"
    empty.write_text("  \n")
    assert load_profile(empty) == [] and load_profile(tmp_path / "none.json") == []
    broken = tmp_path / "B.json"
    broken.write_text("[{")
    with pytest.raises(
        ConfigError,
        match=r"B.json: not valid JSON: Expecting property name enclosed in double quotes at line 1 column 3$",
    ):
        load_profile(broken)


def test_workload_maps_each_key(tmp_path):
    from utils.bytemlperf_workload import load_workload

    path = _write_workload(
        tmp_path / "w.json", model="resnet50-torch-fp16", clients=3, iterations=100, batch_sizes=[16, 4, 4]
    )
    workload = load_workload(path, Path(__file__).resolve().parents[1] / "inference")
    assert (workload.case, workload.framework, workload.model) == ("resnet50", "pytorch", "resnet50-torch-fp16")
    assert workload.overrides == (
        "fp16=true",
        "test_perf=true",
        "test_accuracy=true",
        "numeric_check=true",
        "clients=3",
        "min_query_count=300",
        "batch_sizes=[4, 16]",
        "data_percent=50",
        "compile_only=false",
    )


def test_a_workload_entry_maps_to_a_data_directory_not_a_framework(tmp_path):
    from utils.bytemlperf_workload import is_workload_file, workload_entry

    inference = Path(__file__).resolve().parents[1] / "inference"
    path = _write_workload(tmp_path / "w.json")
    assert (
        is_workload_file(path)
        and workload_entry(tmp_path / "h.yaml", inference, f"{path}:pytorch_2.1", "/data").framework == "pytorch_2.1"
    )
    with pytest.raises(
        ConfigError, match="maps to 'pytorch', a framework: a workload maps to the case's data directory"
    ):
        workload_entry(tmp_path / "h.yaml", inference, str(path), "pytorch")
    zoo = tmp_path / "zoo.json"
    zoo.write_text(json.dumps({"model": "bert-torch-fp32", "inputs": "input_ids", "model_path": "m.onnx"}))
    assert not is_workload_file(zoo) and workload_entry(tmp_path / "h.yaml", inference, str(zoo), "pytorch") is None


def test_bytemlperf_report_of_a_plain_engine_and_of_a_compile_only_run():
    from tools.compat.bytemlperf.report import bytemlperf_report

    record = {
        "case": "resnet50",
        "framework": "pytorch_2.1",
        "precision": "fp16",
        "vendor": "nvidia",
        "compiler": "tensorrt",
        "env": {"cpu_model": "AMD EPYC 7B13"},
        "verdict": {"valid": True},
        "config": {},
        "engine": {"compile_report": {"compile_duration": 1.234567, "compile_precision": "FP16", "sg_percent": 97.5}},
        "inference": {"accuracy": None, "accuracy_note": "random weights"},
        "numeric": {
            "passed": False,
            "outputs": [{"mean_abs": 0.1, "max_abs": 0.5, "max_rel": 0.01, "mean_rel": 0.001}, {"max_rel": 0.2}],
        },
        "performance": [
            {
                "batch_size": 8,
                "scenario": "offline",
                "clients": 1,
                "qps": 1234.5678,
                "latency_ms": {"mean": 6.4812, "p99": None},
            },
            {
                "batch_size": 8,
                "scenario": "server",
                "clients": 1,
                "qps": 900.0,
                "latency_ms": {"mean": 8.0, "p99": 12.0},
            },
        ],
    }
    report = bytemlperf_report(record)
    assert (
        report["Model"] == "RESNET50-TORCH-FP16"
        and report["Backend"] == "nvidia/tensorrt"
        and report["Host Info"] == "AMD EPYC 7B13"
    )
    assert report["Graph Compile"] == {
        "Compile Duration": 1.23457,
        "Compile Precision": "FP16",
        "Subgraph Coverage": 97.5,
        "Optimizations": {},
    }
    assert report["Accuracy"]["Top-1"] is None and report["Accuracy"]["Top-1 Note"] == "random weights"
    assert (
        report["Accuracy"]["Max Rel-Diff"] == 0.2 and report["Accuracy"]["Numeric Check"] == "FAILED"
    )  # the worst output
    assert report["Performance"] == [
        {"BS": 8, "QPS": 1234.57, "AVG Latency": 6.481, "P99 Latency": None, "Scenario": "offline", "Clients": 1},
        {"BS": 8, "QPS": 900.0, "AVG Latency": 8.0, "P99 Latency": 12.0, "Scenario": "server", "Clients": 1},
    ]
    assert "Backend Performance" not in report and report["Verdict"] == "VALID"
    compile_only = bytemlperf_report(
        {"case": "digits", "framework": "pytorch", "precision": "fp32", "verdict": {"valid": False}}
    )
    assert set(compile_only) == {"Model", "Backend", "Host Info", "Dataset", "Verdict"}


def test_backend_requirements_checked_and_layered_into_the_image(tmp_path):
    from utils.executors.images import ImageSpec, _case_name
    from utils.requirements import all_backend_requirement_files, check_backend_requirements

    perf = tmp_path / "inference"
    shutil.copytree(FIXTURES / "TFCPU", perf / "inference_engine" / VENDOR / "TFCPU")
    shutil.copytree(FIXTURES / "ORTCPU", perf / "inference_engine" / VENDOR / "ORTCPU")
    (perf / "inference_engine" / VENDOR / "notabackend").mkdir()
    (perf / "inference_engine" / VENDOR / "notabackend" / "requirements.txt").write_text("tensorflow\n")
    check_backend_requirements(perf, VENDOR, "ORTCPU")  # onnxruntime and numpy: met
    check_backend_requirements(perf, VENDOR, "onnxruntime")  # a module compiler: nothing to check
    with pytest.raises(ConfigError) as info:
        check_backend_requirements(perf, VENDOR, "TFCPU")
    assert str(info.value).startswith("backend 'TFCPU' (inference_engine/bytecpu/TFCPU): package 'numpy' ")
    assert (
        "is installed, but the backend needs numpy==1.19.2 (and 1 more), listed in its requirements.txt; install with: "
        "pip install -r " in str(info.value)
    )
    files = all_backend_requirement_files(perf, VENDOR)
    assert [f.parent.name for f in files] == ["ORTCPU", "TFCPU"] and [_case_name(f) for f in files] == [
        "backend-ORTCPU",
        "backend-TFCPU",
    ]
    folder = perf / "docker_images" / VENDOR / "pytorch"
    folder.mkdir(parents=True)
    spec = ImageSpec(VENDOR, "pytorch", folder, {}, requirements=())
    assert spec.requirement_files == tuple(files) and spec.tag != spec.vendor_tag


def test_pip_failure_is_pips_own_line_with_the_images_python():
    from utils.executors.images import _pip_failure

    chunks = [
        {"stream": "Step 5/5 : RUN set -eu; ...\n"},
        {
            "stream": (
                "ERROR: Could not find a version that satisfies the requirement tensorflow==2.4.0 (from "
                "versions: 2.16.1)\n"
            )
        },
        {"stream": "ERROR: No matching distribution found for tensorflow==2.4.0\n"},
        {"stream": "inferperf: pip could not install the requirements on Python 3.11.2\n"},
        {"error": "The command '/bin/sh -c set -eu; d=/tmp/...' returned a non-zero code: 1"},
    ]
    assert (
        _pip_failure(chunks)
        == "pip: No matching distribution found for tensorflow==2.4.0 (the image's Python is 3.11.2)"
    )
    conflict = [
        {
            "stream": (
                "\x1b[91mERROR: Cannot install numpy==1.19.2 because these package versions have conflicting "
                "dependencies.\n\x1b[0m\n"
            )
        },
        {
            "stream": (
                "The conflict is caused by:\n    The user requested numpy==1.19.2\n"
                "    The user requested (constraint) numpy==2.4.6\n"
            )
        },
        {"stream": "\x1b[91mERROR: ResolutionImpossible: for help visit https://pip.pypa.io/\n\x1b[0m"},
        {"stream": "inferperf: pip could not install the requirements on Python 3.11.2\n"},
    ]
    assert _pip_failure(conflict) == (
        "pip: Cannot install numpy==1.19.2 because these package versions have conflicting dependencies. "
        "(the image keeps numpy==2.4.6; the image's Python is 3.11.2)"
    )
    assert _pip_failure([{"error": "The command ... returned a non-zero code: 1"}]) is None


def test_data_percent_and_best_hooks():
    from tools.compat.bytemlperf.hooks import FirstBatches, apply_data_percent, resolve_best

    class Config(dict):
        def get(self, key, default=None):
            return super().get(key, default)

    loader = [(i, i) for i in range(23)]
    assert (
        apply_data_percent(loader, Config()) is loader
        and apply_data_percent(loader, Config(data_percent=100)) is loader
    )
    cut = apply_data_percent(loader, Config(data_percent=50))
    assert isinstance(cut, FirstBatches) and len(cut) == 12 and list(cut) == loader[:12]
    assert len(apply_data_percent(loader, Config(data_percent=1))) == 1

    class Typed:
        batch_sizes, batch_size = "best", 16

    config = Typed()
    resolve_best(config, {"best_batch_sizes": [1, 4]})
    assert config.batch_sizes == [1, 4]
    config.batch_sizes = "best"
    resolve_best(config, {})
    assert config.batch_sizes == [16]


def test_batch_sizes_best_and_workload_keys_are_checked():
    from contract.config import CaseConfig
    from tests.conftest import TYPED_CASE_CONFIG

    assert CaseConfig(**TYPED_CASE_CONFIG, batch_sizes="best").batch_sizes == "best"
    with pytest.raises(
        ConfigError,
        match=r"key 'batch_sizes' must be a batch size, a list of them, or 'best' \(the engine's best batch sizes\), "
        r"got 'fast'",
    ):
        CaseConfig(**TYPED_CASE_CONFIG, batch_sizes="fast")
    with pytest.raises(ConfigError, match="key 'data_percent' must be a whole percentage > 0 and <= 100, got 101"):
        CaseConfig(**TYPED_CASE_CONFIG, extra={"data_percent": 101})
    with pytest.raises(ConfigError, match="key 'test_perf' must be true or false, got 'no'"):
        CaseConfig(**TYPED_CASE_CONFIG, extra={"test_perf": "no"})
