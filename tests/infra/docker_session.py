"""The Docker tests' session fixtures and checks, shared by every file that runs run.py in MODE docker:
the real engine with the base image, the CPU torch wheel for the image build, the digits data the
containers can read, the run's summary.json, and the check that a test's runs left nothing behind.

Import the fixtures into a test module (``from tests.infra.docker_session import docker_client  #
noqa: F401``); pytest builds each session fixture once per worker."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.infra.docker_env import BASE_IMAGE, InfraUnavailable, ensure_base_image, ensure_docker, require

TORCH_WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"


@pytest.fixture(scope="session")
def docker_client():
    try:
        client = ensure_docker()
        ensure_base_image(client=client)
    except InfraUnavailable as exc:
        require(False, f"Docker engine or base image unavailable: {exc}")
    return client


@pytest.fixture(scope="session")
def wheels_dir(tmp_path_factory) -> Path:
    """A folder holding only the CPU torch wheel, for the image's build context."""
    local = Path("/opt/wheels") / TORCH_WHEEL
    target = tmp_path_factory.mktemp("wheels")
    if local.is_file():
        try:
            os.link(local, target / TORCH_WHEEL)
        except OSError:
            shutil.copy2(local, target / TORCH_WHEEL)
        return target
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "-d",
            str(target),
            "torch==2.13.0+cpu",
        ],
        capture_output=True,
        text=True,
    )
    require(proc.returncode == 0, f"no CPU torch wheel available for the image build: {proc.stderr[-500:]}")
    return target


@pytest.fixture(scope="session")
def digits_data(digits_data_dir) -> Path:
    os.chmod(digits_data_dir, 0o755)  # the containers run as the SSH user
    return digits_data_dir


def docker_keys(data: Path, workdir: Path, wheels: Path) -> dict:
    """The host.yaml keys every MODE docker test run shares: the digits case on ``data``, the image
    built from the base image with the torch wheel in ``wheels``, and the code under ``workdir``."""
    return {
        "SHM_SIZE": "256m",
        "CASE_TIMEOUT": 600,
        "CASES": {"digits:pytorch": str(data)},
        "BASE_IMAGE": BASE_IMAGE,
        "PIP_WHEELS_DIR": str(wheels),
        "CA_BUNDLE": "/etc/ssl/certs/ca-certificates.crt",
        "REMOTE_WORKDIR": str(workdir),
    }


def summary_of(tmp_path: Path) -> dict:
    """The latest run's summary.json under tmp_path/result."""
    runs = sorted((tmp_path / "result").glob("run*/summary.json"))
    assert runs, "no summary.json written"
    return json.loads(runs[-1].read_text())


def assert_nothing_left(docker_client, workdir: Path) -> None:
    """No container of this test's runs is left (each mounts its code from under ``workdir``;
    other tests' runs may be under way on the same engine), and no case process either."""
    everything = docker_client.containers.list(all=True, ignore_removed=True, filters={"label": "inferperf.run"})
    ours = [
        c
        for c in everything
        if any(Path(m.get("Source", "/")).is_relative_to(workdir) for m in c.attrs.get("Mounts", []))
    ]
    assert not ours, [c.name for c in ours]
    if not everything:  # processes cannot be told apart by test: look only when no other run is on the engine
        # Container processes are visible from the host; these write to the container's log mount. A
        # neighbour's run may start between the listing and ps: ps counts only when the engine still
        # has no run after it.
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        if not docker_client.containers.list(all=True, ignore_removed=True, filters={"label": "inferperf.run"}):
            leftovers = [line for line in ps.splitlines() if "/workspace/log" in line]
            assert not leftovers, leftovers
    runs = workdir / "runs"
    assert not runs.exists() or not any(runs.iterdir()), list(runs.rglob("*"))[:10]
