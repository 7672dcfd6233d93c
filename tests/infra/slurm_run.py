"""run.py in MODE slurm against the session's Slurm cluster (tests/infra/slurm.py): the cluster left
idle after each test, digits data in its shared directory, the environment that finds the cluster,
the run's one record, and the wait for a job that is measuring.

Import the fixtures into a test module together with ``slurm_cluster`` (tests/conftest.py
registers it): ``from tests.infra.slurm_run import cluster, shared_data  # noqa: F401``."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest


@pytest.fixture
def cluster(slurm_cluster):
    yield slurm_cluster
    slurm_cluster.cancel_all_jobs()
    if "drain" in slurm_cluster.node_state():
        slurm_cluster.undrain()
        slurm_cluster.wait_idle()


@pytest.fixture(scope="module")
def shared_data(slurm_cluster, tmp_path_factory) -> Path:
    """digits data inside the cluster's shared directory."""
    from benchmarks.digits.pytorch.prepare import prepare_digits

    out = Path(slurm_cluster.shared_dir) / "data" / "digits"
    out.mkdir(parents=True, exist_ok=True)
    prepare_digits(out)
    return out


def env_for(cluster, path: str | None = None) -> dict:
    env = {**os.environ, **cluster.env}
    if path is not None:
        env["PATH"] = path
    return env


def the_record(tmp_path: Path) -> dict:
    files = sorted((tmp_path / "result").glob("run*/summary.json"))
    assert files, "no summary.json"
    return json.loads(files[-1].read_text())["results"][0]


def wait_measuring(cluster, timeout: float = 240) -> str:
    """The job id once the pipeline step is past its start-up."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        logs = list(Path(cluster.shared_dir, "runs").glob("*/*/*/container.out.log"))
        if logs and re.search(r"\[[3-7]/7 ", logs[0].read_text(errors="replace")):
            jobs = cluster.job_ids()
            assert jobs, "no job while the case runs"
            return jobs[0]
        time.sleep(0.3)
    raise AssertionError("the pipeline never reached its measured phases")
