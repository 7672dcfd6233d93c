"""run.py in MODE slurm against a real Slurm cluster (tests/infra/slurm.py): a case runs as a
job on the node, a job killed by its time limit, scancel on Ctrl-C, a drained node, a bad
partition, a missing sbatch and a SLURM_SHARED_DIR the node does not see. Each asserts the
one-line outcome, the exit code, and that no job and no process is left."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import copy_inference_tree, long_running_tree, wait_no_processes
from tests.infra.docker_env import require
from tests.infra.slurm import SlurmUnavailable, start_slurm
from tests.infra.slurm_run import cluster, env_for, shared_data, the_record, wait_measuring  # noqa: F401 - fixtures


def host_yaml(tmp_path: Path, cluster, perf: Path, data: Path, **overrides) -> Path:
    config = {
        "MODE": "slurm",
        "VENDOR": "cpu",
        "FLAGPERF_PATH": str(perf),
        "FLAGPERF_LOG_PATH": str(tmp_path / "result"),
        "HOSTS": [cluster.node],
        "CASES": {"digits:pytorch": str(data)},
        "MONITOR_INTERVAL": 0.2,
        "SLURM_SHARED_DIR": str(cluster.shared_dir),
        "SLURM_PARTITION": cluster.partitions[0],
        "SLURM_PENDING_TIMEOUT": 20,
        **overrides,
    }
    path = tmp_path / "host.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def start(perf: Path, config: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "run.py", "--config", str(config)],
        cwd=perf,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_case_runs_as_a_slurm_job(tmp_path, cluster, shared_data):
    perf = copy_inference_tree(tmp_path / "inference")
    proc = subprocess.run(
        [sys.executable, "run.py", "--config", str(host_yaml(tmp_path, cluster, perf, shared_data))],
        cwd=perf,
        env=env_for(cluster),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode in (0, 3), proc.stderr[-3000:]
    record = the_record(tmp_path)
    assert record["status"] == "success" and record["host"] == cluster.node, record
    assert record["infer_average_acc"] >= 0.95
    assert record["sys_monitor"]["samples"] >= 1 and record["vendor_max_mem(GiB)"] > 0
    assert re.search(r"runs in slurm job \d+ on node " + re.escape(cluster.node), proc.stderr)
    local = next((tmp_path / "result").glob("run*/digits:pytorch/*_noderank0"))
    for name in ("result.json", "container.out.log", "stdout.log", "sys_monitor.jsonl", "cpu_monitor.jsonl"):
        assert (local / name).is_file(), name
    assert cluster.job_ids() == []
    assert not list(Path(cluster.shared_dir, "runs").glob("*/*/*")), "the run's files were left in the shared dir"
    assert wait_no_processes(str(cluster.shared_dir)) == []


def test_job_killed_by_its_time_limit_names_job_node_and_state(tmp_path, cluster, shared_data):
    perf = long_running_tree(tmp_path / "inference")
    proc = start(perf, host_yaml(tmp_path, cluster, perf, shared_data), env_for(cluster))
    job = wait_measuring(cluster)
    cluster.end_job_now(job)  # its time limit, reached now
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err[-3000:]
    record = the_record(tmp_path)
    assert record["status"] == "failed"
    assert f"slurm job {job} on node {cluster.node} ended TIMEOUT" in record["error"], record["error"]
    assert cluster.job_ids() == []
    assert wait_no_processes(str(cluster.shared_dir)) == []


def test_ctrl_c_cancels_the_job(tmp_path, cluster, shared_data):
    perf = long_running_tree(tmp_path / "inference")
    proc = start(perf, host_yaml(tmp_path, cluster, perf, shared_data), env_for(cluster))
    wait_measuring(cluster)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err[-3000:]
    assert the_record(tmp_path)["status"] == "interrupted"
    deadline = time.monotonic() + 30
    while cluster.job_ids() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert cluster.job_ids() == []
    assert wait_no_processes(str(cluster.shared_dir)) == []


def test_drained_node_is_named_and_nothing_stays_submitted(tmp_path, cluster, shared_data):
    cluster.drain("maintenance")
    perf = copy_inference_tree(tmp_path / "inference")
    config = host_yaml(tmp_path, cluster, perf, shared_data, SLURM_PENDING_TIMEOUT=3)
    proc = subprocess.run(
        [sys.executable, "run.py", "--config", str(config)],
        cwd=perf,
        env=env_for(cluster),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and cluster.node in errors[0] and "PENDING" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert cluster.job_ids() == []
    assert not (tmp_path / "result").exists()


def test_bad_partition_is_refused_before_anything_is_submitted(tmp_path, cluster, shared_data):
    perf = copy_inference_tree(tmp_path / "inference")
    config = host_yaml(tmp_path, cluster, perf, shared_data, SLURM_PARTITION="nosuchpart")
    proc = subprocess.run(
        [sys.executable, "run.py", "--config", str(config)],
        cwd=perf,
        env=env_for(cluster),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "SLURM_PARTITION" in errors[0] and "nosuchpart" in errors[0], proc.stderr
    assert cluster.job_ids() == [] and not (tmp_path / "result").exists()


def test_missing_sbatch_is_one_line(tmp_path, cluster, shared_data):
    perf = copy_inference_tree(tmp_path / "inference")
    config = host_yaml(tmp_path, cluster, perf, shared_data)
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("ps", "sh"):
        found = shutil.which(tool)
        if found:
            (bare / tool).symlink_to(found)
    proc = subprocess.run(
        [sys.executable, "run.py", "--config", str(config)],
        cwd=perf,
        env=env_for(cluster, str(bare)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "sbatch not found" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "result").exists()


def test_shared_dir_the_node_does_not_see_is_one_line_naming_key_and_node(tmp_path, cluster, shared_data):
    """A tmpfs over the directory in slurmd's mount namespace only: the node's probe job
    writes its file there, this machine never sees it."""
    require(
        cluster.mount_namespaces,
        "unshare --mount/nsenter unavailable here: slurmd shares this machine's mount namespace, so no node can be "
        "kept from seeing a directory",
    )
    hidden = Path(cluster.shared_dir) / f"not-shared-{tmp_path.name}"
    hidden.mkdir()
    perf = copy_inference_tree(tmp_path / "inference")
    config = host_yaml(tmp_path, cluster, perf, shared_data, SLURM_SHARED_DIR=str(hidden))
    try:
        with cluster.hide_from_node(hidden):
            assert cluster.node_listdir(hidden) == []
            (hidden / "seen-here-only").write_text("x")
            assert cluster.node_listdir(hidden) == [], "the tmpfs does not hide the directory from the node"
            (hidden / "seen-here-only").unlink()
            proc = subprocess.run(
                [sys.executable, "run.py", "--config", str(config)],
                cwd=perf,
                env=env_for(cluster),
                capture_output=True,
                text=True,
                timeout=300,
            )
            on_node = cluster.node_listdir(hidden)
        assert proc.returncode == 2, proc.stderr[-3000:]
        errors = [line for line in proc.stderr.splitlines() if "ERROR" in line]
        assert len(errors) == 1, proc.stderr
        assert "'SLURM_SHARED_DIR'" in errors[0] and f"node {cluster.node}" in errors[0] and str(hidden) in errors[0], (
            errors[0]
        )
        assert "Traceback" not in proc.stderr
        # The probe really ran on the node and wrote its file -- into the node's own view.
        assert len(on_node) == 1 and on_node[0].startswith(".probe-"), on_node
        assert cluster.job_ids() == []
        assert list(hidden.iterdir()) == [], "files left in the shared dir"
        assert not (tmp_path / "result").exists()
    finally:
        shutil.rmtree(hidden, ignore_errors=True)


def test_cluster_of_several_nodes_without_mount_namespaces(tmp_path):
    """The infra's other shapes: N slurmd on this machine (one port each), each job on the
    node it names; mount_namespaces=False starts slurmd in this machine's namespace."""
    try:
        cluster = start_slurm(tmp_path / "slurm", nodes=2, mount_namespaces=False)
    except (SlurmUnavailable, OSError, subprocess.SubprocessError) as exc:
        require(False, f"Slurm test cluster unavailable: {exc}")
        return
    with cluster:
        assert len(cluster.nodes) == 2 and len(set(cluster.node_ports.values())) == 2
        ours = os.readlink("/proc/self/ns/mnt")
        for node in cluster.nodes:
            proc = cluster.run(
                "srun",
                f"--nodelist={node}",
                "--nodes=1",
                "--ntasks=1",
                "sh",
                "-c",
                'echo "$SLURMD_NODENAME"; readlink /proc/self/ns/mnt',
                timeout=60,
            )
            assert proc.stdout.split() == [node, ours]
        assert not cluster.mount_namespaces
        with pytest.raises(SlurmUnavailable):
            with cluster.hide_from_node(tmp_path):
                pass
