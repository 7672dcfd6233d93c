"""ByteMLPerf drop-in in MODE docker (issue 21): a backend folder copied into the cpu vendor's
inference_engine/ runs in the vendor container, its requirements.txt a layer of the image;
a pin with no wheel for the image's Python is one line at image build. Real dockerd, real
pip, HOSTS: ["localhost"] (tests/test_docker_local.py's setup)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import copy_inference_tree
from tests.infra.docker_local import run_py, write_local_yaml
from tests.infra.docker_session import assert_nothing_left, digits_data, docker_client, summary_of, wheels_dir  # noqa: F401

pytestmark = [pytest.mark.docker, pytest.mark.slow]

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "bytemlperf"
ANSWERS = "compiler: ORTCPU\ngraph_level: extended\ninteract_info:\n  calibrate: true\n"


def _tree(tmp_path: Path, backend: str) -> Path:
    perf = copy_inference_tree(tmp_path / "inference")
    shutil.copytree(FIXTURES / backend, perf / "inference_engine" / "cpu" / backend)
    vendor_config = perf / "configs" / "digits" / "vendor_config" / "cpu_configurations.yaml"
    vendor_config.write_text(vendor_config.read_text() + ANSWERS.replace("ORTCPU", backend))
    return perf


def test_backend_runs_in_the_vendor_container(tmp_path, digits_data, wheels_dir, docker_client):
    perf = _tree(tmp_path, "ORTCPU")
    config = write_local_yaml(tmp_path, digits_data, tmp_path / "remote", wheels_dir)
    code, out = run_py(config, perf, 1800)
    assert code == 0, out[-4000:]
    record = summary_of(tmp_path)["results"][0]
    assert record["status"] == "success" and record["compiler"] == "ORTCPU"
    log_dir = Path(record["log_dir"])
    result = json.loads((log_dir / "result.json").read_text())
    assert result["env"]["in_container"] is True
    report = result["engine"]["compile_report"]
    assert report["backend"] == "ORTCPU" and report["interact_info"]["graph_level"] == "extended"
    assert report["calibration_samples"] == 16  # one batch read through ByteMLPerf's Dataset interface in the container
    assert result["numeric"]["passed"] is True and result["engine"]["own_benchmark"]["rows"][0]["BS"] == 16
    byte = json.loads((log_dir / "bytemlperf.json").read_text())  # fetched back beside result.json
    assert byte["Backend"] == "ORTCPU" and byte["Performance"][0]["BS"] == 16
    # The backend's requirements.txt was a layer of the image the case ran in: the build log
    # says so whether this run built the image or reused one an earlier run built (its tag is
    # the hash of those files), and Docker shows the layer on top of the vendor image.
    build_logs = "".join(p.read_text() for p in (tmp_path / "result").glob("run*/build_*_cases.log"))
    assert "requirements/backend-ORTCPU.txt" in build_logs, build_logs[-2000:]
    tag = re.search(r"(?:reusing|built) image (\S+)", out).group(1)
    history = " ".join(layer.get("CreatedBy", "") for layer in docker_client.images.get(tag).history())
    assert "/tmp/inferperf-case-requirements" in history
    assert_nothing_left(docker_client, tmp_path / "remote")


@pytest.mark.parametrize(
    "requirements, expected",
    [
        # The fixture as written (ByteMLPerf's CPU backend's pins): numpy==1.19.2 meets the image's own numpy first.
        (
            None,
            "pip: Cannot install numpy==1.19.2 because these package versions have conflicting dependencies. (the "
            "image keeps numpy==",
        ),
        (
            "tensorflow==2.4.0\n",
            "pip: No matching distribution found for tensorflow==2.4.0 (the image's Python is 3.11.",
        ),
    ],
    ids=["numpy-pin", "tensorflow-pin"],
)
def test_a_pin_that_cannot_install_is_one_line(
    tmp_path, digits_data, wheels_dir, docker_client, requirements, expected
):
    perf = _tree(tmp_path, "TFCPU")
    if requirements is not None:
        (perf / "inference_engine" / "cpu" / "TFCPU" / "requirements.txt").write_text(requirements)
    config = write_local_yaml(tmp_path, digits_data, tmp_path / "remote", wheels_dir)
    code, out = run_py(config, perf, 1800)
    assert code == 1, out[-4000:]
    record = summary_of(tmp_path)["results"][0]
    assert record["status"] == "failed"
    error = record["error"]
    assert error.startswith(f"host localhost: building the requirements of backend-TFCPU failed: {expected}"), error
    assert "(build log: " in error and "\n" not in error and "Traceback" not in out
    assert_nothing_left(docker_client, tmp_path / "remote")
