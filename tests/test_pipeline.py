"""run_inference.py end to end on the digits case: the seven steps, the four switches,
caching, and one-line errors for bad input. Each run is a real subprocess."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.infra.run_inference import command
from tests.infra.trees import copy_tree

REPO = Path(__file__).resolve().parents[1]
INFERENCE = REPO / "inference"


def run_pipeline(
    perf: Path, data: Path, log: Path, case: str = "digits", vendor: str = "cpu", framework: str = "pytorch"
):
    proc = subprocess.run(
        command(perf, data, log, case=case, vendor=vendor, framework=framework),
        cwd=perf,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return proc


def set_config(perf: Path, case: str, **changes) -> None:
    path = perf / "configs" / case / "configurations.yaml"
    data = yaml.safe_load(path.read_text())
    data.update(changes)
    path.write_text(yaml.safe_dump(data))


def last_error(proc) -> str:
    lines = [l for l in proc.stdout.splitlines() if "| ERROR" in l]
    assert lines, proc.stdout[-2000:] + proc.stderr[-2000:]
    return lines[-1]


@pytest.fixture(scope="session")
def digits_data(digits_data_dir) -> Path:
    return digits_data_dir


@pytest.fixture(scope="session")
def warm_tree(tmp_path_factory, digits_data) -> dict:
    """One full run whose caches (weights, ONNX, engine) later tests start from."""
    perf = copy_tree(tmp_path_factory.mktemp("warm") / "inference")
    log = perf.parent / "log"
    proc = run_pipeline(perf, digits_data, log)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"perf": perf, "log": log, "proc": proc, "result": json.loads((log / "result.json").read_text())}


@pytest.fixture
def tree(tmp_path, warm_tree) -> Path:
    return copy_tree(tmp_path / "inference", with_cache=warm_tree["perf"] / "onnxs")


def test_full_run_writes_flagperf_result_with_real_accuracy(warm_tree):
    result = warm_tree["result"]
    for key in (
        "vendor",
        "compiler",
        "precision",
        "batchsize",
        "flops",
        "e2e_time(second)",
        "p_validation_whole(qps)",
        "p_validation_core(qps)",
        "p_inference_whole(qps)",
        "*p_inference_core(qps)",
        "val_average_acc",
        "infer_average_acc",
    ):
        assert key in result, key
    assert result["vendor"] == "cpu" and result["compiler"] == "onnxruntime" and result["precision"] == "fp32"
    assert result["val_average_acc"] >= 0.95
    assert result["infer_average_acc"] >= 0.95
    assert result["p_inference_whole(qps)"] < result["*p_inference_core(qps)"]
    latency = result["inference"]["latency_ms"]
    # A percentile below its sample floor is None with a note (common/stats.py): the stop
    # rule may end a phase early ('precision out of reach') on a loaded machine.
    reported = [latency[q] for q in ("p50", "p90", "p99") if latency[q] is not None]
    assert reported == sorted(reported) and reported[-1] <= latency["max"] and latency["p50"] is not None
    missing = [q for q in ("p90", "p99", "p99_9") if latency[q] is None]
    assert len(latency["notes"]) == len(missing) and all(
        f"{q} needs at least" in n for q, n in zip(missing, latency["notes"])
    )
    assert result["inference"]["batches"] == latency["count"] > 0
    assert result["env"]["packages"]["onnxruntime"]
    assert result["env"]["cpu_model"]
    assert [s["status"] for s in result["steps"].values()] == ["done"] * 7
    assert result["cache"]["onnx"]["status"] == "miss" and result["cache"]["engine"]["status"] == "miss"
    log_text = (warm_tree["log"] / "container.out.log").read_text()
    finish = [l for l in log_text.splitlines() if "Finish Info: " in l]
    assert (
        finish
        and json.loads(finish[-1].split("Finish Info: ", 1)[1])["infer_average_acc"] == result["infer_average_acc"]
    )


def test_second_identical_run_reuses_onnx_and_engine(tree, digits_data, tmp_path):
    proc = run_pipeline(tree, digits_data, tmp_path / "log")
    assert proc.returncode == 0, proc.stdout[-2000:]
    result = json.loads((tmp_path / "log" / "result.json").read_text())
    assert result["cache"]["onnx"]["status"] == "hit"
    assert result["cache"]["engine"]["status"] == "hit"
    assert "reusing cached ONNX export" in proc.stdout and "reusing cached engine" in proc.stdout


def test_changed_engine_setting_misses_engine_cache_only(tree, digits_data, tmp_path):
    vendor = tree / "configs" / "digits" / "vendor_config" / "cpu_configurations.yaml"
    vendor.write_text(vendor.read_text().replace("graph_optimization_level: all", "graph_optimization_level: basic"))
    proc = run_pipeline(tree, digits_data, tmp_path / "log")
    assert proc.returncode == 0, proc.stdout[-2000:]
    result = json.loads((tmp_path / "log" / "result.json").read_text())
    assert result["cache"]["onnx"]["status"] == "hit"
    assert result["cache"]["engine"]["status"] == "miss"


def test_changed_model_code_misses_onnx_cache(tree, digits_data, tmp_path):
    model = tree / "benchmarks" / "digits" / "pytorch" / "model.py"
    model.write_text(model.read_text() + "\n# a change that matters to the cache key\n")
    proc = run_pipeline(tree, digits_data, tmp_path / "log")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert json.loads((tmp_path / "log" / "result.json").read_text())["cache"]["onnx"]["status"] == "miss"


def test_compiler_null_stops_after_validation(tree, digits_data, tmp_path):
    set_config(tree, "digits", compiler=None)
    proc = run_pipeline(tree, digits_data, tmp_path / "log")
    assert proc.returncode == 0, proc.stdout[-2000:]
    result = json.loads((tmp_path / "log" / "result.json").read_text())
    assert result["val_average_acc"] >= 0.95
    assert result["*p_inference_core(qps)"] is None and result["infer_average_acc"] is None
    steps = result["steps"]
    assert [steps[s]["status"] for s in ("onnx_export", "vendor_compile", "engine_inference")] == ["skipped"] * 3


def test_no_validation_without_onnx_path_is_a_clear_config_error(tree, digits_data, tmp_path):
    set_config(tree, "digits", no_validation=True)
    proc = run_pipeline(tree, digits_data, tmp_path / "log")
    assert proc.returncode == 2
    assert "'no_validation' is true, so key 'exist_onnx_path' must name an ONNX file" in last_error(proc)
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (tmp_path / "log" / "result.json").exists()
    failure = json.loads((tmp_path / "log" / "failure.json").read_text())
    assert failure["step"] == "init" and failure["exit_code"] == 2


def test_no_validation_with_existing_onnx_skips_validation_and_export(tree, digits_data, tmp_path, warm_tree):
    onnx_path = warm_tree["result"]["cache"]["onnx"]["path"]
    set_config(tree, "digits", no_validation=True, exist_onnx_path=onnx_path)
    proc = run_pipeline(tree, digits_data, tmp_path / "log")
    assert proc.returncode == 0, proc.stdout[-2000:]
    result = json.loads((tmp_path / "log" / "result.json").read_text())
    assert result["val_average_acc"] is None and result["p_validation_core(qps)"] is None
    assert result["infer_average_acc"] >= 0.95
    assert result["steps"]["framework_validation"]["status"] == "skipped"
    assert result["steps"]["onnx_export"]["status"] == "skipped"
    assert result["cache"]["onnx"] == {"status": "user", "path": onnx_path}


def test_exist_compiler_path_loads_the_given_engine(tree, digits_data, tmp_path, warm_tree):
    engine = warm_tree["result"]["cache"]["engine"]["path"]
    set_config(tree, "digits", no_validation=True, exist_onnx_path="foo", exist_compiler_path=engine)
    proc = run_pipeline(tree, digits_data, tmp_path / "log")
    assert proc.returncode == 0, proc.stdout[-2000:]
    result = json.loads((tmp_path / "log" / "result.json").read_text())
    assert result["cache"]["engine"] == {"status": "user", "path": engine}
    assert result["engine"]["compile_report"]["compiled"] is False
    assert result["infer_average_acc"] >= 0.95


@pytest.mark.parametrize(
    "changes, code, message",
    [
        ({"exist_onnx_path": "missing/model.onnx"}, 3, "key 'exist_onnx_path': ONNX file not found: "),
        (
            {"no_validation": True, "exist_onnx_path": "foo", "exist_compiler_path": "/nope/e.ort.onnx"},
            3,
            "key 'exist_compiler_path': engine file not found: /nope/e.ort.onnx",
        ),
        ({"batch_size": 5000}, 3, "key 'batch_size' is 5000, larger than the data set (360 samples"),
        ({"compiler": "tvm"}, 2, "unknown compiler 'tvm' for vendor 'cpu'"),
    ],
)
def test_bad_config_values_fail_with_one_line(tree, digits_data, tmp_path, changes, code, message):
    set_config(tree, "digits", **changes)
    proc = run_pipeline(tree, digits_data, tmp_path / "log")
    assert proc.returncode == code, proc.stdout[-2000:]
    assert message in last_error(proc)
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (tmp_path / "log" / "result.json").exists()


@pytest.mark.parametrize("kind", ["missing", "empty"])
def test_bad_data_dir(tree, tmp_path, kind):
    data = tmp_path / "data"
    if kind == "empty":
        data.mkdir()
    proc = run_pipeline(tree, data, tmp_path / "log")
    assert proc.returncode == 3
    assert f"data_dir {data}: " + ("does not exist" if kind == "missing" else "is empty") in last_error(proc)
    assert not (tmp_path / "log" / "result.json").exists()


@pytest.mark.parametrize(
    "option, value, message",
    [("vendor", "acme", "unknown vendor 'acme'"), ("case", "nosuchcase", "unknown case 'nosuchcase'")],
)
def test_unknown_vendor_or_case(tree, digits_data, tmp_path, option, value, message):
    kwargs = {option: value}
    proc = run_pipeline(tree, digits_data, tmp_path / "log", **kwargs)
    assert proc.returncode == 2
    assert message in last_error(proc)


def test_unreadable_image_through_dataloader_workers(tree, tmp_path):
    from benchmarks.resnet50.pytorch.synthetic import make_synthetic_imagenet

    data = tmp_path / "imagenet"
    make_synthetic_imagenet(data, classes=2, per_class=2, seed=0)
    bad = data / "n00000001" / "broken.jpg"
    bad.write_bytes(b"this is not a jpeg")
    set_config(tree, "resnet50", batch_size=2, num_workers=2, warmup=0)
    # The cpu vendor loads in the main process; this test wants DataLoader workers.
    vendor = tree / "configs" / "resnet50" / "vendor_config" / "cpu_configurations.yaml"
    vendor.write_text("\n".join(l for l in vendor.read_text().splitlines() if not l.startswith("num_workers")))
    proc = run_pipeline(tree, data, tmp_path / "log", case="resnet50")
    assert proc.returncode == 3, proc.stdout[-2000:]
    error = last_error(proc)
    assert str(bad) in error and "cannot read image" in error
    assert "Traceback" not in error
    assert not (tmp_path / "log" / "result.json").exists()


def test_fp16_on_cpu_runs_fp32_and_says_why(tree, digits_data, tmp_path):
    set_config(tree, "digits", fp16=True)
    proc = run_pipeline(tree, digits_data, tmp_path / "log")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "no fp16 Conv/MatMul kernels" in proc.stdout
    assert json.loads((tmp_path / "log" / "result.json").read_text())["precision"] == "fp32"
