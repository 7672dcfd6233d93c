"""A throwaway vendor, added to a copy of inference/ by file layout alone, runs
end to end; a vendor that breaks the engine contract fails with one clear
line and no result.json.

Every run is run_inference.py as a subprocess in the copy, as the container
runs it, so nothing here depends on the test process's imports.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.infra.monitors import sample_then_stop
from tests.measure_config import CHEAP_SET

INFERENCE = Path(__file__).resolve().parents[1] / "inference"

ACME_ENGINE = '''\
"""acme's "fastpath" compiler: ONNX Runtime under another name, to prove the layout contract."""
import onnxruntime as ort
import torch

from contract.engine_base import EngineBase


class InferModel(EngineBase):
    engine_suffix = None

    def __init__(self, config, onnx_path, model):
        super().__init__(config, onnx_path, model)
        self.session = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
        self.names = [i.name for i in self.session.get_inputs()]

    def __call__(self, inputs):
        feeds = {name: t.numpy() for name, t in zip(self.names, inputs)}
        return [torch.from_numpy(o) for o in self.session.run(None, feeds)], 0.0

    def version(self):
        return "acme fastpath 0.1"
'''

# The class is there but under the wrong name.
ACME_NO_INFERMODEL = ACME_ENGINE.replace("class InferModel(", "class FastPath(")

# Returns the outputs alone instead of (outputs, foo_time).
ACME_BARE_TENSOR = ACME_ENGINE.replace(
    "return [torch.from_numpy(o) for o in self.session.run(None, feeds)], 0.0",
    "return torch.from_numpy(self.session.run(None, feeds)[0])",
)

ACME_MONITOR = '''\
"""acme's device monitor: a fake device with constant readings."""
from common.sampler import monitor_args, run_sampler


def main(argv=None):
    args = monitor_args("acme monitor", argv)
    return run_sampler(lambda: {"devices": [{"name": "acme-1", "mem_used_gib": 1.5, "mem_total_gib": 16.0}]}, \
args.output, args.interval)


if __name__ == "__main__":
    raise SystemExit(main())
'''

ACME_ANALYSIS = '''\
"""acme's monitor analysis."""
from common.sampler import read_samples


def analysis_log(path):
    devices = [d for s in read_samples(path) for d in s.get("devices", [])]
    if not devices:
        return None, None, None
    return max(d["mem_used_gib"] for d in devices), devices[0]["mem_total_gib"], {"fp32": 1e12}
'''


def _ignore(directory: str, names: list[str]) -> set[str]:
    ignored = {"__pycache__", ".pytest_cache"}
    if Path(directory).resolve() == INFERENCE:
        ignored |= {"onnxs", "result"}
    return ignored & set(names)


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # The engine file is rewritten between runs; a stale .pyc must never answer for it.
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


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


@pytest.fixture(scope="module")
def acme_tree(tmp_path_factory) -> Path:
    """inference/ copied, plus the files a vendor adds - and nothing else changed."""
    tree = tmp_path_factory.mktemp("acme") / "inference"
    shutil.copytree(INFERENCE, tree, ignore=_ignore)
    (tree / "inference_engine" / "acme").mkdir()
    (tree / "inference_engine" / "acme" / "fastpath.py").write_text(ACME_ENGINE)
    (tree / "configs" / "digits" / "vendor_config" / "acme_configurations.yaml").write_text("compiler: fastpath\n")
    vendor_images = tree / "docker_images" / "acme"
    vendor_images.mkdir()
    (vendor_images / "acme_monitor.py").write_text(ACME_MONITOR)
    (vendor_images / "acme_analysis.py").write_text(ACME_ANALYSIS)
    return tree


def _run(tree: Path, data: Path, log_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "run_inference.py",
            "--perf_dir",
            ".",
            "--data_dir",
            str(data),
            "--log_dir",
            str(log_dir),
            "--vendor",
            "acme",
            "--case",
            "digits",
            "--framework",
            "pytorch",
            *CHEAP_SET,  # the vendor contract, not the measurement: loose precision, short caps
        ],
        cwd=tree,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _set_engine(tree: Path, source: str) -> None:
    (tree / "inference_engine" / "acme" / "fastpath.py").write_text(source)


def test_registry_discovers_acme_by_layout(acme_tree):
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json; from contract.registry import get_registered_devices as g; print(json.dumps(g()))",
        ],
        cwd=acme_tree,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(out.stdout)["acme"] == ["fastpath"]


@pytest.mark.slow
def test_acme_vendor_runs_end_to_end(acme_tree, digits_data, tmp_path):
    _set_engine(acme_tree, ACME_ENGINE)
    run = _run(acme_tree, digits_data, tmp_path / "log")
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads((tmp_path / "log" / "result.json").read_text())
    assert (result["vendor"], result["compiler"], result["status"]) == ("acme", "fastpath", "success")
    assert result["engine"]["version"] == "acme fastpath 0.1"
    assert result["engine"]["class"] == "inference_engine.acme.fastpath.InferModel"
    inference, validation = result["inference"], result["validation"]
    # The digits test split has 360 images; repeat is the minimum number of passes,
    # the measurement minimums decide how many more.
    for phase in (inference, validation):
        assert phase["samples"] == 360 * phase["passes"] and phase["passes"] >= result["config"]["repeat"]
    assert inference["foo_time_s"] == 0.0
    assert inference["core_qps"] > 0 and inference["whole_qps"] > 0
    # The same trained CNN through ONNX Runtime: the same predictions, up to float noise.
    assert result["infer_average_acc"] > 0.9
    assert abs(result["infer_average_acc"] - result["val_average_acc"]) <= 2 / 360


def test_acme_monitor_and_analysis_follow_the_layout(acme_tree, tmp_path):
    log = tmp_path / "acme_monitor.jsonl"
    monitor = subprocess.Popen(
        [sys.executable, "-m", "docker_images.acme.acme_monitor", "--output", str(log), "--interval", "0.05"],
        cwd=acme_tree,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    rc = sample_then_stop(monitor, log)
    assert rc == 0
    analysis = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from docker_images.acme.acme_analysis import analysis_log; print(list(analysis_log({str(log)!r})))",
        ],
        cwd=acme_tree,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert analysis.stdout.strip() == "[1.5, 16.0, {'fp32': 1000000000000.0}]"


def _failure(log_dir: Path) -> dict:
    assert not (log_dir / "result.json").exists(), "a failed run must not leave a result.json"
    return json.loads((log_dir / "failure.json").read_text())


@pytest.mark.slow
def test_module_without_infermodel_fails_naming_the_file(acme_tree, digits_data, tmp_path):
    _set_engine(acme_tree, ACME_NO_INFERMODEL)
    run = _run(acme_tree, digits_data, tmp_path / "log")
    assert run.returncode != 0
    failure = _failure(tmp_path / "log")
    assert "inference_engine/acme/fastpath.py" in failure["error"]
    assert "InferModel" in failure["error"]
    assert "\n" not in failure["error"]
    assert failure["step"] == "init"  # found before any data is loaded or model trained
    assert "Traceback" not in run.stderr


@pytest.mark.slow
def test_bare_tensor_return_breaks_the_call_contract(acme_tree, digits_data, tmp_path):
    _set_engine(acme_tree, ACME_BARE_TENSOR)
    run = _run(acme_tree, digits_data, tmp_path / "log")
    assert run.returncode != 0
    failure = _failure(tmp_path / "log")
    assert failure["step"] == "engine_inference"
    assert "(list_of_outputs, foo_time)" in failure["error"]
    assert "Tensor" in failure["error"]
    assert "Traceback" not in run.stderr
