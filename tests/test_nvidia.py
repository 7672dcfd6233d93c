"""The nvidia vendor: peak-FLOPS table, monitor, preflights, and the Inductor
engine (on CPU here; the CUDA and TensorRT tests run only where those exist)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from common.errors import ConfigError, EngineError
from contract.config import CaseConfig
from tests.infra.monitors import sample_then_stop
from tests.measure_config import CHEAP_SET

INFERENCE = Path(__file__).resolve().parents[1] / "inference"
T = 1e12


def _has_tensorrt() -> bool:
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        return False
    return True


def _nvml_works() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except Exception:
        return False
    return True


HAS_CUDA = torch.cuda.is_available()
HAS_TENSORRT = _has_tensorrt()
needs_gpu = pytest.mark.skipif(not HAS_CUDA, reason="needs an NVIDIA GPU: torch.cuda.is_available() is False")
needs_tensorrt = pytest.mark.skipif(
    not (HAS_TENSORRT and HAS_CUDA), reason="needs TensorRT and a GPU: 'import tensorrt' failed or no CUDA device"
)


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def make_config(tmp_path: Path, **overrides) -> CaseConfig:
    typed = dict(
        vendor="nvidia",
        case="digits",
        framework="pytorch",
        perf_dir=str(INFERENCE),
        data_dir=str(tmp_path),
        log_dir=str(tmp_path / "log"),
        batch_size=4,
        input_size=64,
        fp16=False,
        compiler="inductor",
        num_workers=0,
        log_freq=0,
        repeat=1,
        no_validation=False,
        exist_onnx_path=None,
        exist_compiler_path=None,
        device="cpu",
    )
    extra = overrides.pop("extra", {})
    typed.update(overrides)
    config = CaseConfig(**typed, extra=extra)
    config.cache_dir = str(tmp_path / "cache")
    Path(config.cache_dir).mkdir(exist_ok=True)
    return config


def digits_model() -> torch.nn.Module:
    from benchmarks.digits.pytorch.model import DigitsCNN

    torch.manual_seed(0)
    return DigitsCNN().eval()


def export(model: torch.nn.Module, config: CaseConfig, path: Path) -> str:
    from benchmarks.common import export_onnx

    config.export_onnx_path = str(path)
    return export_onnx(model, config, sample_shape=(1, 8, 8))


# ---- peak FLOPS table -------------------------------------------------------------
@pytest.mark.parametrize(
    "name, precision, flops",
    [
        ("NVIDIA H100 80GB HBM3", "fp16", 989.5 * T),
        ("NVIDIA H100 80GB HBM3", "fp8", 1979 * T),
        ("NVIDIA H100 PCIe", "fp16", 756.5 * T),
        ("NVIDIA H100 PCIe", "tf32", 378 * T),
        ("NVIDIA H100 NVL", "bf16", 835.5 * T),
        ("NVIDIA H200", "fp16", 989.5 * T),
        ("NVIDIA H200 NVL", "fp16", 835.5 * T),
        ("NVIDIA A100-SXM4-80GB", "fp16", 312 * T),
        ("NVIDIA A100-SXM4-40GB", "tf32", 156 * T),
        ("NVIDIA A100-PCIE-40GB", "fp32", 19.5 * T),
        ("NVIDIA A100 80GB PCIe", "int8", 624 * T),
        ("NVIDIA L40S", "fp16", 362.05 * T),
        ("NVIDIA L4", "fp16", 121 * T),
        ("NVIDIA A10", "fp16", 125 * T),
    ],
)
def test_peak_flops_table(name, precision, flops):
    from docker_images.nvidia.nvidia_analysis import peak_flops

    assert peak_flops(name)[precision] == pytest.approx(flops)


def test_a100_has_no_fp8_entry():
    from docker_images.nvidia.nvidia_analysis import peak_flops

    assert "fp8" not in peak_flops("NVIDIA A100-SXM4-80GB")


@pytest.mark.parametrize("name", ["NVIDIA A10G", "NVIDIA GH200 480GB", "Tesla V100-SXM2-32GB", "NVIDIA L40"])
def test_unknown_device_has_no_peak_and_warns(name, caplog_loguru):
    from docker_images.nvidia.nvidia_analysis import peak_flops

    assert peak_flops(name) is None
    assert any(r["level"] == "WARNING" and name in r["message"] for r in caplog_loguru)


def _line(ts: float, *devices: tuple[int, str, int]) -> str:
    return (
        json.dumps(
            {
                "timestamp": ts,
                "devices": [
                    {"index": i, "name": n, "memory_used_bytes": used, "memory_total_bytes": 80 * 2**30}
                    for i, n, used in devices
                ],
            }
        )
        + "\n"
    )


def test_analysis_log_from_handwritten_jsonl(tmp_path):
    from docker_images.nvidia.nvidia_analysis import analysis_log

    log = tmp_path / "nvidia_monitor.jsonl"
    log.write_text(
        _line(1.0, (0, "NVIDIA H100 80GB HBM3", 2 * 2**30), (1, "NVIDIA H100 80GB HBM3", 1 * 2**30))
        + _line(2.0, (0, "NVIDIA H100 80GB HBM3", 3 * 2**30), (1, "NVIDIA H100 80GB HBM3", 5 * 2**30))
        + '{"timestamp": 3.0, "devi'  # the monitor was killed mid-line
    )
    used, total, peak = analysis_log(str(log))
    assert used == pytest.approx(5.0)
    assert total == pytest.approx(80.0)
    assert peak["fp16"] == pytest.approx(989.5 * T)


def test_analysis_log_unknown_gpu_gives_memory_but_no_peak(tmp_path, caplog_loguru):
    from docker_images.nvidia.nvidia_analysis import analysis_log

    log = tmp_path / "nvidia_monitor.jsonl"
    log.write_text(_line(1.0, (0, "NVIDIA RTX 9999", 2**30)))
    used, total, peak = analysis_log(str(log))
    assert (used, total, peak) == (pytest.approx(1.0), pytest.approx(80.0), None)
    assert any("RTX 9999" in r["message"] for r in caplog_loguru)


def test_analysis_log_mixed_gpus_uses_the_slower_peak(tmp_path):
    from docker_images.nvidia.nvidia_analysis import analysis_log

    log = tmp_path / "nvidia_monitor.jsonl"
    log.write_text(_line(1.0, (0, "NVIDIA H100 PCIe", 2**30), (1, "NVIDIA A100-SXM4-80GB", 2**30)))
    _, _, peak = analysis_log(str(log))
    assert peak["fp16"] == pytest.approx(312 * T)
    assert "fp8" not in peak


def test_analysis_log_empty_or_missing(tmp_path):
    from docker_images.nvidia.nvidia_analysis import analysis_log

    (tmp_path / "empty.jsonl").write_text("")
    assert analysis_log(str(tmp_path / "empty.jsonl")) == (None, None, None)
    assert analysis_log(str(tmp_path / "missing.jsonl")) == (None, None, None)


# ---- monitor -----------------------------------------------------------------------
def _monitor(output: Path, *extra: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "docker_images.nvidia.nvidia_monitor",
            "--output",
            str(output),
            "--interval",
            "0.05",
            *extra,
        ],
        cwd=INFERENCE,
        env=env or _env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.skipif(_nvml_works(), reason="NVML works on this machine: the no-driver path cannot be exercised")
def test_monitor_without_driver_exits_nonzero_with_one_line(tmp_path):
    process = _monitor(tmp_path / "out.jsonl")
    _, stderr = process.communicate(timeout=60)
    assert process.returncode != 0
    lines = stderr.strip().splitlines()
    assert len(lines) == 1
    assert "docker_images/nvidia/nvidia_monitor.py" in lines[0]
    assert "NVML" in lines[0] or "pynvml" in lines[0]


FAKE_PYNVML = '''\
"""A stand-in for nvidia-ml-py with two GPUs, for testing the monitor without a driver."""
from types import SimpleNamespace

NVML_TEMPERATURE_GPU = 0
_GPUS = [("NVIDIA H100 80GB HBM3", "GPU-aaaa"), ("NVIDIA A100-SXM4-80GB", "GPU-bbbb")]


class NVMLError(Exception):
    pass


def nvmlInit(): pass
def nvmlShutdown(): pass
def nvmlDeviceGetCount(): return len(_GPUS)
def nvmlDeviceGetHandleByIndex(i): return i
def nvmlDeviceGetIndex(h): return h
def nvmlDeviceGetName(h): return _GPUS[h][0].encode()  # nvidia-ml-py < 11.5 returned bytes
def nvmlDeviceGetUUID(h): return _GPUS[h][1]
def nvmlDeviceGetMemoryInfo(h): return SimpleNamespace(used=(h + 1) * 2**30, total=80 * 2**30)
def nvmlDeviceGetUtilizationRates(h): return SimpleNamespace(gpu=50, memory=10)
def nvmlDeviceGetTemperature(h, sensor): return 40


def nvmlDeviceGetHandleByUUID(uuid):
    for index, (_, known) in enumerate(_GPUS):
        if known == uuid:
            return index
    raise NVMLError("Not Found")


def nvmlDeviceGetPowerUsage(h):
    raise NVMLError("Not Supported")
'''


@pytest.mark.parametrize("devices, expected", [("1", [1]), ("GPU-bbbb", [1]), ("", [0, 1]), (None, [0, 1])])
def test_monitor_with_fake_nvml_samples_selected_devices_and_stops_on_sigterm(tmp_path, devices, expected):
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "pynvml.py").write_text(FAKE_PYNVML)
    env = _env()
    env["PYTHONPATH"] = str(fake)  # after cwd (inference/) on sys.path, before site-packages
    output = tmp_path / "nvidia_monitor.jsonl"
    process = _monitor(output, *(["--devices", devices] if devices is not None else []), env=env)
    rc = sample_then_stop(process, output)
    assert rc == 0
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert len(records) >= 2
    first = records[0]
    assert isinstance(first["timestamp"], float)
    assert [d["index"] for d in first["devices"]] == expected
    device = first["devices"][-1]
    assert device["name"] == "NVIDIA A100-SXM4-80GB"
    assert device["power_w"] is None  # unsupported reading -> null, not a crash
    assert device["temperature_c"] == 40

    from docker_images.nvidia.nvidia_analysis import analysis_log

    used, total, peak = analysis_log(str(output))
    assert used == pytest.approx(2.0) and total == pytest.approx(80.0)
    assert peak["fp16"] == pytest.approx(312 * T)  # the A100 alone, or the slower of H100 and A100


# ---- preflight ----------------------------------------------------------------------
@pytest.mark.skipif(HAS_TENSORRT, reason="TensorRT is installed: the missing-package path cannot be exercised")
def test_tensorrt_preflight_without_tensorrt(tmp_path):
    from inference_engine.nvidia import tensorrt as engine

    with pytest.raises(ConfigError, match=r"vendor 'nvidia' compiler 'tensorrt'.*import tensorrt"):
        engine.preflight(make_config(tmp_path, compiler="tensorrt", device="cuda"))


def test_tensorrt_preflight_checks_its_keys_first(tmp_path):
    from inference_engine.nvidia import tensorrt as engine

    config = make_config(tmp_path, compiler="tensorrt", batch_size=8, extra={"trt_max_batch_size": 4})
    config.origin["trt_max_batch_size"] = "nvidia_configurations.yaml"
    with pytest.raises(
        ConfigError,
        match=r"nvidia_configurations.yaml: key 'trt_max_batch_size' must be an integer >= batch_size \(8\)",
    ):
        engine.preflight(config)
    with pytest.raises(ConfigError, match="trt_core_includes_copies"):
        engine.preflight(make_config(tmp_path, compiler="tensorrt", extra={"trt_core_includes_copies": "yes"}))
    with pytest.raises(ConfigError, match="trt_workspace_gib"):
        engine.preflight(make_config(tmp_path, compiler="tensorrt", extra={"trt_workspace_gib": 0}))


@pytest.mark.skipif(HAS_CUDA, reason="a CUDA device is visible: the no-GPU path cannot be exercised")
def test_inductor_preflight_on_cuda_without_gpu(tmp_path):
    from inference_engine.nvidia import inductor as engine

    with pytest.raises(ConfigError, match=r"compiler 'inductor' with device 'cuda' needs a CUDA GPU"):
        engine.preflight(make_config(tmp_path, device="cuda"))
    engine.preflight(make_config(tmp_path, device="cpu"))  # CPU is fine here (g++ is installed)


def test_inductor_preflight_rejects_unknown_mode(tmp_path):
    from inference_engine.nvidia import inductor as engine

    with pytest.raises(ConfigError, match="inductor_mode"):
        engine.preflight(make_config(tmp_path, extra={"inductor_mode": "fastest"}))


# ---- Inductor engine on CPU ---------------------------------------------------------
def test_inductor_needs_the_framework_model(tmp_path):
    from inference_engine.nvidia.inductor import InferModel

    with pytest.raises(EngineError, match=r"inference_engine/nvidia/inductor.py.*no_validation"):
        InferModel(make_config(tmp_path), None, None)


@pytest.mark.slow
def test_inductor_cpu_matches_eager_and_reports_new_shapes_as_foo_time(tmp_path, caplog_loguru):
    from inference_engine.nvidia.inductor import InferModel

    model = digits_model()
    config = make_config(tmp_path, fp16=True)  # fp16 on CPU: runs fp32, with a warning
    onnx_path = export(model, config, tmp_path / "digits.onnx")
    engine = InferModel(config, onnx_path, model)
    assert engine.precision == "fp32"
    assert any("fp16" in r["message"] and r["level"] == "WARNING" for r in caplog_loguru)
    assert engine.compile_report()["compile_duration"] > 0

    x = torch.rand(4, 1, 8, 8)
    outputs, foo_time = engine([x])
    assert foo_time == 0.0  # the configured batch shape was compiled in __init__
    with torch.inference_mode():
        expected = model(x)
    assert len(outputs) == 1 and outputs[0].device.type == "cpu" and outputs[0].dtype == torch.float32
    torch.testing.assert_close(outputs[0], expected, rtol=1e-4, atol=1e-4)

    partial = torch.rand(3, 1, 8, 8)  # the last, smaller batch: compiled on first sight
    outputs, foo_time = engine([partial])
    assert foo_time > 0
    with torch.inference_mode():
        torch.testing.assert_close(outputs[0], model(partial), rtol=1e-4, atol=1e-4)
    assert engine([partial])[1] == 0.0


@pytest.mark.slow
def test_inductor_without_onnx_compiles_on_first_call_as_foo_time(tmp_path):
    from inference_engine.nvidia.inductor import InferModel

    model = digits_model()
    engine = InferModel(make_config(tmp_path), None, model)
    assert engine.compile_duration == 0.0
    x = torch.rand(4, 1, 8, 8)
    outputs, foo_time = engine([x])
    assert foo_time > 0
    with torch.inference_mode():
        torch.testing.assert_close(outputs[0], model(x), rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def digits_data(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("digits_data")
    subprocess.run(
        [sys.executable, "-m", "benchmarks.digits.pytorch.prepare", str(out)],
        cwd=INFERENCE,
        env=_env(),
        check=True,
        capture_output=True,
        timeout=120,
    )
    return out


@pytest.mark.slow
def test_inductor_cpu_through_the_pipeline(tmp_path, digits_data):
    tree = tmp_path / "inference"
    shutil.copytree(
        INFERENCE,
        tree,
        ignore=lambda d, names: (
            ({"__pycache__"} | ({"onnxs", "result"} if Path(d).resolve() == INFERENCE else set())) & set(names)
        ),
    )
    (tree / "configs" / "digits" / "vendor_config" / "nvidia_configurations.yaml").write_text(
        "compiler: inductor\ndevice: cpu\n"
    )
    log_dir = tmp_path / "log"
    run = subprocess.run(
        [
            sys.executable,
            "run_inference.py",
            "--perf_dir",
            ".",
            "--data_dir",
            str(digits_data),
            "--log_dir",
            str(log_dir),
            "--vendor",
            "nvidia",
            "--case",
            "digits",
            "--framework",
            "pytorch",
            *CHEAP_SET,  # the engine through the pipeline, not the measurement
        ],
        cwd=tree,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads((log_dir / "result.json").read_text())
    assert (result["vendor"], result["compiler"], result["precision"]) == ("nvidia", "inductor", "fp32")
    report = result["engine"]["compile_report"]
    assert report["backend"] == "inductor" and report["graph_breaks"] == 0
    assert result["cache"]["engine"]["status"] == "none"  # nothing serialized
    assert (
        result["inference"]["samples"] == 360 * result["inference"]["passes"]
        and result["inference"]["passes"] >= result["config"]["repeat"]
    )
    # The partial last batch is a new shape, but the framework's warm-up already showed it
    # to the compiler, so nothing is compiled inside the measured loop.
    assert 360 % result["config"]["batch_size"] != 0
    assert result["inference"]["foo_time_s"] == 0
    assert result["infer_average_acc"] > 0.9
    assert abs(result["infer_average_acc"] - result["val_average_acc"]) <= 2 / 360


# ---- GPU only ------------------------------------------------------------------------
@pytest.mark.gpu
@needs_gpu
def test_inductor_cuda_fp16_matches_eager(tmp_path):
    from inference_engine.nvidia.inductor import InferModel

    model = digits_model()
    config = make_config(tmp_path, device="cuda", fp16=True)
    onnx_path = export(model, config, tmp_path / "digits.onnx")
    engine = InferModel(config, onnx_path, model)
    assert engine.precision == "fp16"
    x = torch.rand(4, 1, 8, 8)
    outputs, foo_time = engine([x])
    assert foo_time == 0.0 and outputs[0].device.type == "cpu" and outputs[0].dtype == torch.float32
    with torch.inference_mode():
        expected = digits_model()(x)
    torch.testing.assert_close(outputs[0], expected, rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.tensorrt
@needs_tensorrt
@pytest.mark.parametrize("copies_in_core", [True, False])
def test_tensorrt_builds_caches_and_matches_eager(tmp_path, copies_in_core):
    from inference_engine.nvidia.tensorrt import InferModel

    model = digits_model()
    config = make_config(
        tmp_path,
        compiler="tensorrt",
        device="cuda",
        extra={"trt_max_batch_size": 8, "trt_workspace_gib": 1, "trt_core_includes_copies": copies_in_core},
    )
    onnx_path = export(model, config, tmp_path / "digits.onnx")
    config.engine_path = str(tmp_path / "cache" / "digits.plan")
    engine = InferModel(config, onnx_path, model)
    assert engine.compiled and Path(config.engine_path).is_file()
    assert Path(config.engine_path + ".json").is_file()
    assert any(Path(config.cache_dir).glob("trt_timing_*.cache"))
    assert engine.is_supported("Conv") and not engine.is_supported("NoSuchOp")
    report = engine.compile_report()
    assert report["layer_count"] > 0 and report["max_batch_size"] == 8
    assert engine.best_batch_sizes() == [4, 8]

    for batch in (4, 3, 8):
        x = torch.rand(batch, 1, 8, 8)
        outputs, foo_time = engine([x])
        assert (foo_time == 0.0) == copies_in_core
        with torch.inference_mode():
            torch.testing.assert_close(outputs[0], model(x), rtol=1e-3, atol=1e-3)
    with pytest.raises(EngineError, match="trt_max_batch_size"):
        engine([torch.rand(9, 1, 8, 8)])

    # TensorRT's default TF32 flag makes an fp32 plan a TF32 plan on Ampere and later.
    expected_precision = "tf32" if torch.cuda.get_device_capability() >= (8, 0) else "fp32"
    assert engine.precision == expected_precision
    reloaded = InferModel(config, onnx_path, None)  # from the plan and its sidecar
    assert not reloaded.compiled and reloaded.precision == expected_precision
    x = torch.rand(4, 1, 8, 8)
    torch.testing.assert_close(reloaded([x])[0][0], engine([x])[0][0])
    rows = reloaded.get_performance_data([x], iterations=2)
    assert {r["node"] for r in rows} >= {"H2D copy", "execute_async_v3", "D2H copy"}
