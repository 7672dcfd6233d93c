"""run.py in MODE slurm with SLURM_CONTAINER: docker, against a real Slurm cluster
(tests/infra/slurm.py) and the real Docker engine of its node (this machine): the vendor
image is built or reused through a job, the case's monitors and pipeline run as
containers reached through ``srun ... docker system dial-stdio`` steps of the case's
job, and the files come back through SLURM_SHARED_DIR. Asserts the outcome, that no
job, container or process is left, and what Ctrl-C and a job cancelled from outside do."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.conftest import copy_inference_tree, long_running_tree, wait_no_processes
from tests.infra.docker_session import docker_client, wheels_dir  # noqa: F401 - session fixtures
from tests.infra.slurm_run import cluster, env_for, shared_data, the_record, wait_measuring  # noqa: F401 - fixtures
from utils.executors.containers import LABEL_RUN


def host_yaml(tmp_path: Path, cluster, perf: Path, data: Path, wheels: Path, **overrides) -> Path:
    config = {
        "MODE": "slurm",
        "SLURM_CONTAINER": "docker",
        "VENDOR": "cpu",
        "FLAGPERF_PATH": str(perf),
        "FLAGPERF_LOG_PATH": str(tmp_path / "result"),
        "HOSTS": [cluster.node],
        "CASES": {"digits:pytorch": str(data)},
        "MONITOR_INTERVAL": 0.2,
        "CASE_TIMEOUT": 600,
        "SHM_SIZE": "256m",
        "BASE_IMAGE": "inferperf/debian-python:bookworm",
        "PIP_WHEELS_DIR": str(wheels),
        "CA_BUNDLE": "/etc/ssl/certs/ca-certificates.crt",
        "SLURM_SHARED_DIR": str(cluster.shared_dir),
        "SLURM_PARTITION": cluster.partitions[0],
        "SLURM_PENDING_TIMEOUT": 20,
        **overrides,
    }
    path = tmp_path / "host.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def run_id(tmp_path: Path) -> str:
    return json.loads(next((tmp_path / "result").glob("run*/summary.json")).read_text())["run_id"]


def containers_of(client, run: str) -> list:
    return client.containers.list(all=True, ignore_removed=True, filters={"label": f"{LABEL_RUN}={run}"})


def assert_nothing_left(tmp_path: Path, cluster, client) -> None:
    assert cluster.job_ids() == [], "a job was left submitted"
    deadline = time.monotonic() + 30
    while containers_of(client, run_id(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert containers_of(client, run_id(tmp_path)) == [], "a container of the run was left"
    assert not list(Path(cluster.shared_dir, "runs").glob("*/*/*")), "the run's files were left in the shared dir"
    assert wait_no_processes(str(cluster.shared_dir)) == []
    assert wait_no_processes("dial-stdio") == []


def test_case_runs_in_the_vendor_container_inside_a_slurm_job(
    tmp_path, cluster, shared_data, wheels_dir, docker_client
):  # noqa: F811
    perf = copy_inference_tree(tmp_path / "inference")
    proc = subprocess.run(
        [
            sys.executable,
            "run.py",
            "--config",
            str(host_yaml(tmp_path, cluster, perf, shared_data, wheels_dir, CLEAR_CACHES=True)),
        ],
        cwd=perf,
        env=env_for(cluster),
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert proc.returncode in (0, 3), proc.stderr[-3000:]
    record = the_record(tmp_path)
    assert record["status"] == "success" and record["host"] == cluster.node, record
    assert record["infer_average_acc"] >= 0.95
    assert record["sys_monitor"]["samples"] >= 1
    assert "CLEAR_CACHES" not in proc.stderr, proc.stderr[-2000:]  # dropped on the node, in the prepare job
    jobs = re.findall(
        r"(prepare|digits:pytorch) runs in slurm job (\d+) on node " + re.escape(cluster.node), proc.stderr
    )
    assert [what for what, _ in jobs] == ["prepare", "digits:pytorch"] and jobs[0][1] != jobs[1][1], proc.stderr[-2000:]
    local = next((tmp_path / "result").glob("run*/digits:pytorch/*_noderank0"))
    for name in (
        "result.json",
        "container.out.log",
        "stdout.log",
        "sys_monitor.jsonl",
        "cpu_monitor.jsonl",
        "slurm-job.out",
    ):
        assert (local / name).is_file(), name
    # It ran in the image, not natively: the environment record says so.
    assert json.loads((local / "result.json").read_text())["env"]["in_container"] is True
    assert_nothing_left(tmp_path, cluster, docker_client)


def start(perf: Path, config: Path, cluster) -> subprocess.Popen:
    argv = [sys.executable, "run.py", "--config", str(config)]
    return subprocess.Popen(
        argv, cwd=perf, env=env_for(cluster), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_ctrl_c_stops_the_containers_and_cancels_the_job(tmp_path, cluster, shared_data, wheels_dir, docker_client):  # noqa: F811
    perf = long_running_tree(tmp_path / "inference")
    config = host_yaml(tmp_path, cluster, perf, shared_data, wheels_dir)
    proc = start(perf, config, cluster)
    try:
        wait_measuring(cluster)
        assert len(cluster.job_ids()) == 1
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    assert the_record(tmp_path)["status"] == "interrupted"
    assert_nothing_left(tmp_path, cluster, docker_client)


def test_job_cancelled_from_outside_is_named_and_its_containers_are_removed(
    tmp_path, cluster, shared_data, wheels_dir, docker_client
):  # noqa: F811
    """scancel by an administrator ends the job's steps and the engine connection with
    them; the containers are the engine's and would live on: a short job removes them."""
    perf = long_running_tree(tmp_path / "inference")
    proc = start(perf, host_yaml(tmp_path, cluster, perf, shared_data, wheels_dir), cluster)
    try:
        wait_measuring(cluster)
        (job,) = cluster.job_ids()
        cluster.run("scancel", job)
        _, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err[-3000:]
    assert "Traceback" not in err
    record = the_record(tmp_path)
    assert record["status"] == "failed", record
    assert f"slurm job {job}" in record["error"] and "CANCELLED" in record["error"], record["error"]
    assert_nothing_left(tmp_path, cluster, docker_client)
