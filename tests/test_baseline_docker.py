"""A base-tier case in MODE docker (issue 29): base_gemm runs in the cpu vendor's container on
this machine's engine (HOSTS: ["localhost"]) like any case, with its monitors, and its figure
comes back in summary.json and the host's measured-peak cache."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.infra.docker_local import local_workdir, write_local_yaml  # noqa: F401 - a fixture
from tests.infra.docker_session import docker_client, summary_of, wheels_dir  # noqa: F401 - session fixtures

INFERENCE = Path(__file__).resolve().parents[1] / "inference"


@pytest.mark.docker
def test_base_gemm_runs_in_the_vendor_container(tmp_path, local_workdir, wheels_dir, docker_client):  # noqa: F811
    config = write_local_yaml(tmp_path, Path("/tmp"), local_workdir, wheels_dir, CASES={"base_gemm:pytorch": "/tmp"})
    settings = ["sizes=[128]", "dtypes=[fp32]", "precision=null", "min_duration_s=0.2", "settle_max_s=0"]
    command = [sys.executable, "run.py", "--config", str(config)] + [item for s in settings for item in ("--set", s)]
    done = subprocess.run(
        command, cwd=INFERENCE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1200
    )
    assert done.returncode == 0, done.stdout[-4000:]
    record = summary_of(tmp_path)["results"][0]
    assert record["status"] == "success" and record["sys_monitor"]["samples"] >= 1
    (found,) = record["baseline"]["figures"]
    assert found["name"] == "fp32 GEMM" and found["value"] > 0 and found["size"] == [128, 128, 128]
    assert record["baseline"]["kernels"].startswith("onnxruntime MLAS")  # the vendor's own kernels, in its image
    result = json.loads((Path(record["log_dir"]) / "result.json").read_text())
    assert result["env"]["in_container"] is True
