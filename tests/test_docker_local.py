"""MODE docker on this machine's engine without SSH: HOSTS: ["localhost"] drives the local
dockerd through the SDK (docker.from_env()), copies the code under REMOTE_WORKDIR and
fetches the files with local copies, through the same lifecycle and primitives as a
remote host. Real dockerd, real digits case."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import long_running_tree
from tests.infra.docker_local import local_workdir, run_py, write_local_yaml  # noqa: F401 - a fixture
from tests.infra.docker_session import assert_nothing_left, digits_data, docker_client, summary_of, wheels_dir  # noqa: F401
from utils.executors.docker import LocalTransport, is_local_engine
from utils.host_config import Host


def test_localhost_is_the_local_engine():
    config = SimpleNamespace(ssh_port=22, docker_local=False)
    assert is_local_engine(config, Host("localhost", 22))
    assert not is_local_engine(config, Host("localhost", 2222))  # an sshd on another port: SSH
    assert not is_local_engine(config, Host("127.0.0.2", 22))
    assert is_local_engine(SimpleNamespace(ssh_port=22, docker_local=True), Host("10.0.0.1", 22))


def test_local_transport_files(tmp_path):
    local = LocalTransport(Host("localhost", 22))
    local.connect()
    source = tmp_path / "src"
    (source / "pkg" / "__pycache__").mkdir(parents=True)
    (source / "pkg" / "a.py").write_text("A = 1\n")
    (source / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"x")
    (source / "onnxs").mkdir()
    (source / "onnxs" / "big.onnx").write_bytes(b"y")
    assert local.put_tree(source, str(tmp_path / "dst" / "inference"), skip=("onnxs", "__pycache__")) == 1
    assert sorted(p.name for p in (tmp_path / "dst" / "inference").rglob("*")) == ["a.py", "pkg"]
    logs = tmp_path / "runs" / "r1" / "localhost" / "case"
    local.makedirs(str(logs))
    (logs / "result.json").write_text("{}")
    (logs / "stdout.log").write_text("hi\n")
    fetched = local.get_files(str(logs), tmp_path / "out")
    assert sorted(fetched) == ["result.json", "stdout.log"] and (tmp_path / "out" / "stdout.log").read_text() == "hi\n"
    local.remove_files(str(logs), fetched)
    assert not logs.exists() and local.rmdir(str(logs.parent)) and not local.rmdir(str(tmp_path / "nowhere"))
    assert local.run(["sh", "-c", "echo $((6 * 7))"]).stdout.strip() == "42"
    with pytest.raises(Exception, match="timed out after 1 s"):
        local.run(["sleep", "30"], timeout=1)
    with pytest.raises(Exception, match="refusing to remove suspicious path"):
        local.remove_tree("/tmp")


@pytest.mark.docker
@pytest.mark.slow
def test_local_engine_end_to_end(tmp_path, digits_data, local_workdir, wheels_dir, docker_client):
    config = write_local_yaml(tmp_path, digits_data, local_workdir, wheels_dir)
    code, out = run_py(config)
    assert code == 0, out[-4000:]
    summary = summary_of(tmp_path)
    assert summary["succeeded"] == 1 and summary["failed"] == 0
    record = summary["results"][0]
    assert record["host"] == "localhost" and record["status"] == "success"
    assert record["infer_average_acc"] >= 0.95
    assert record["sys_monitor"]["samples"] >= 1
    log_dir = Path(record["log_dir"])
    for name in ("result.json", "container.out.log", "stdout.log", "sys_monitor.jsonl", "cpu_monitor.jsonl"):
        assert (log_dir / name).is_file(), name
    result = json.loads((log_dir / "result.json").read_text())
    assert result["env"]["in_container"] is True
    # The code was copied locally, once per version: no SSH, no SFTP.
    assert "uploaded code version" in out
    assert list((local_workdir / "code").glob("*/.complete"))
    assert_nothing_left(docker_client, local_workdir)

    code, out = run_py(config)
    assert code == 0, out[-4000:]
    assert "already present" in out and "reusing image" in out
    assert_nothing_left(docker_client, local_workdir)


@pytest.mark.docker
@pytest.mark.slow
def test_local_engine_timeout_cleans_up(tmp_path, digits_data, local_workdir, wheels_dir, docker_client):
    perf = long_running_tree(tmp_path / "inference")
    config = write_local_yaml(
        tmp_path, digits_data, local_workdir, wheels_dir, FLAGPERF_PATH=str(perf), CASE_TIMEOUT=25
    )
    code, out = run_py(config, perf)
    assert code == 1, out[-4000:]
    record = summary_of(tmp_path)["results"][0]
    assert record["status"] == "timeout" and "CASE_TIMEOUT of 25 s" in record["error"]
    for name in ("sys_monitor.jsonl", "stdout.log"):  # stdout.log: the output up to the stop
        assert (Path(record["log_dir"]) / name).is_file(), name
    assert_nothing_left(docker_client, local_workdir)
    assert not os.listdir(local_workdir / "runs")


# Any Docker-mode run.py on this machine removes a dead run.py's containers; beside the other Docker
# tests one of theirs may get there first, and this run would then find nothing to say: it runs alone.
@pytest.mark.serial
def test_containers_of_a_sigkilled_run_py_are_removed_by_the_next_run(
    tmp_path, digits_data, local_workdir, wheels_dir, docker_client
):
    """run.py killed by SIGKILL cannot clean up: its containers carry its pid in a label,
    and the next run from this machine removes those whose run.py is gone."""
    import signal
    import time

    perf = long_running_tree(tmp_path / "inference")
    config = write_local_yaml(tmp_path, digits_data, local_workdir, wheels_dir, FLAGPERF_PATH=str(perf))
    proc = subprocess.Popen(
        [sys.executable, "run.py", "--config", str(config)],
        cwd=perf,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        labelled = [
            c
            for c in docker_client.containers.list(ignore_removed=True)
            if c.labels.get("inferperf.controller", "").endswith(f":{proc.pid}")
        ]
        if any(c.labels.get("inferperf.role") == "case" for c in labelled):
            break
        time.sleep(0.5)
    else:
        pytest.fail("the case container never started")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    orphans = [
        c
        for c in docker_client.containers.list(all=True, ignore_removed=True)
        if c.labels.get("inferperf.controller", "").endswith(f":{proc.pid}")
    ]
    assert orphans, "SIGKILL should have left the run's containers behind"
    # The next run (a short one, cut by its own CASE_TIMEOUT) removes them and says so.
    (tmp_path / "again").mkdir()
    config = write_local_yaml(
        tmp_path / "again", digits_data, local_workdir, wheels_dir, FLAGPERF_PATH=str(perf), CASE_TIMEOUT=5
    )
    code, out = run_py(config, perf)
    assert f"left running by a run.py (pid {proc.pid}) that died" in out, out[-3000:]
    left = [
        c
        for c in docker_client.containers.list(all=True, ignore_removed=True)
        if c.labels.get("inferperf.controller", "").endswith(f":{proc.pid}")
    ]
    assert left == []
