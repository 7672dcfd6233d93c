"""The nvidia vendor's compiler vllm (inference/inference_engine/nvidia/vllm.py): vLLM's CUDA build, the
engine shared with the cpu vendor (contract/serving_base.py::VllmEngine). No GPU here: what is
tested is what happens before a server starts (its preflight's lines, the command it would run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.errors import ConfigError


def fake_python(tmp_path: Path, cuda: str = "False None", vllm: bool = True) -> str:
    """An interpreter that answers the engine's two questions: vLLM's version, and torch's CUDA."""
    script = tmp_path / "python"
    lines = ["#!/bin/sh", 'case "$2" in']
    lines.append(
        '  *"import vllm"*) ' + ("echo 0.32.0; exit 0 ;;" if vllm else "echo 'No module named vllm' >&2; exit 1 ;;")
    )
    lines.append(f'  *torch.cuda*) echo "{cuda}"; exit 0 ;;')
    lines += ["esac", "exit 1", ""]
    script.write_text("\n".join(lines))
    script.chmod(0o755)
    return str(script)


def nvidia_config(tmp_path: Path, **values):
    from contract.config.load import load_case_config

    inference = Path(__file__).resolve().parents[1] / "inference"
    return load_case_config(
        str(inference), "llama", "pytorch", "nvidia", str(tmp_path), str(tmp_path), {"compiler": "vllm", **values},
        check_device=False,
    )  # fmt: skip


def test_without_a_gpu_the_preflight_is_one_line_naming_the_key(tmp_path):
    from inference_engine.nvidia import vllm

    python = fake_python(tmp_path)
    config = nvidia_config(tmp_path, vllm_python=python)
    with pytest.raises(ConfigError) as raised:
        vllm.preflight(config)
    line = str(raised.value)
    assert f"key 'vllm_python' is {python!r}: vendor 'nvidia' compiler 'vllm' needs a CUDA GPU" in line, line
    assert "torch.cuda.is_available() is False there (torch's CUDA None" in line and "\n" not in line


def test_a_gpu_seen_passes_the_preflight_and_records_the_version(tmp_path):
    from inference_engine.nvidia import vllm

    config = nvidia_config(tmp_path, vllm_python=fake_python(tmp_path, cuda="True 12.8"))
    vllm.preflight(config)
    assert config.extra["vllm_version"] == "0.32.0"


def test_a_python_without_vllm_names_the_key_and_the_image(tmp_path):
    from inference_engine.nvidia import vllm

    config = nvidia_config(tmp_path, vllm_python=fake_python(tmp_path, vllm=False))
    with pytest.raises(ConfigError) as raised:
        vllm.preflight(config)
    assert "key 'vllm_python'" in str(raised.value) and "docker_images/nvidia/vllm/requirements.txt" in str(
        raised.value
    )


@pytest.mark.parametrize(
    "key, value, why",
    [
        ("vllm_gpu_memory_utilization", 1.5, "must be a number in (0, 1], got 1.5"),
        ("vllm_gpu_memory_utilization", 0, "must be a number in (0, 1], got 0"),
        ("vllm_gpu_memory_utilization", True, "must be a number in (0, 1], got True"),
        ("vllm_dtype", "int8", "int8"),
        ("vllm_max_model_len", 0, "must be a positive integer, got 0"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_key_before_any_python_is_asked(tmp_path, key, value, why):
    from inference_engine.nvidia import vllm

    config = nvidia_config(tmp_path, vllm_python=str(tmp_path / "never-run"), **{key: value})
    with pytest.raises(ConfigError) as raised:
        vllm.preflight(config)
    assert f"'{key}'" in str(raised.value) and why in str(raised.value) and "\n" not in str(raised.value)


def test_the_cuda_build_adds_its_memory_share_and_dtype_to_the_shared_command(tmp_path):
    from inference_engine.cpu import vllm as cpu_vllm
    from inference_engine.nvidia import vllm

    config = nvidia_config(tmp_path, vllm_gpu_memory_utilization=0.5, vllm_dtype="bfloat16")
    engine = object.__new__(vllm.InferModel)  # no server: the command's parts only
    assert engine.build_args(config) == ["--gpu-memory-utilization", "0.5"]
    assert engine.dtype(config) == "bfloat16" and engine.build_env(config) == {}
    cpu = object.__new__(cpu_vllm.InferModel)
    assert cpu.build_args(config) == [] and cpu.dtype(config) == "float32"
    assert cpu.build_env(config) == {"VLLM_CPU_KVCACHE_SPACE": "1"}


@pytest.mark.parametrize(
    "dtype, precision", [("float32", "FP32"), ("float16", "FP16"), ("bfloat16", "BF16"), ("auto", "AUTO")]
)
def test_the_compile_report_names_the_served_dtype_as_a_precision(dtype, precision):
    from inference_engine.nvidia import vllm

    engine = object.__new__(vllm.InferModel)  # no server: the report's facts only
    engine.served_dtype, engine.folder = dtype, Path("/models/llama")
    assert engine.compile_report() == {
        "compile_precision": precision,
        "format": "vllm server",
        "folder": "/models/llama",
    }
