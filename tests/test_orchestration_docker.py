"""run.py in MODE docker against real OpenSSH servers on loopback addresses and the real
Docker engine: the end-to-end run on two hosts, and each fault ending with a clear
message, the other host's result intact and nothing left running."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from tests.conftest import copy_inference_tree, long_running_tree
from tests.infra.docker_session import assert_nothing_left, digits_data, docker_client, summary_of, wheels_dir  # noqa: F401
from tests.infra.docker_ssh import (  # noqa: F401 - fixtures
    finish,
    hosts,
    remote_workdir,
    start_run,
    wait_for_container,
    write_host_yaml,
)
from tests.infra.sshd import make_unrelated_client_key, start_sshd, stop_all

pytestmark = [pytest.mark.docker, pytest.mark.ssh, pytest.mark.slow]


def by_host(summary: dict) -> dict[str, dict]:
    return {r["host"]: r for r in summary["results"]}


def copy_tree(target: Path) -> Path:
    copy_inference_tree(target)
    return target


def test_two_hosts_end_to_end(tmp_path, hosts, digits_data, remote_workdir, wheels_dir, docker_client):
    config = write_host_yaml(tmp_path, hosts, digits_data, remote_workdir, wheels_dir)
    code, out = finish(start_run(config))
    assert code == 0, out[-4000:]
    summary = summary_of(tmp_path)
    assert summary["succeeded"] == 2 and summary["failed"] == 0
    for host in hosts:
        record = by_host(summary)[f"{host.address}:{host.port}"]
        assert record["status"] == "success"
        assert record["infer_average_acc"] >= 0.95 and record["val_average_acc"] >= 0.95
        assert record["vendor_usage(GiB)"] > 0 and record["vendor_max_mem(GiB)"] >= record["vendor_usage(GiB)"]
        assert record["MFU"] is not None and 0 < record["MFU"] < 1
        assert record["sys_monitor"]["samples"] >= 1
        log_dir = Path(record["log_dir"])
        for name in ("result.json", "container.out.log", "stdout.log", "sys_monitor.jsonl", "cpu_monitor.jsonl"):
            assert (log_dir / name).is_file(), name
        result = json.loads((log_dir / "result.json").read_text())
        assert result["env"]["in_container"] is True
    table = (Path(summary["results"][0]["log_dir"]).parents[1] / "summary.md").read_text()
    # One summary row and one performance row (bs 16, offline, 1 client) per host,
    # and one of each for the aggregate of the two concurrent hosts.
    assert table.count("| digits:pytorch |") == 6 and table.count("| 16 | offline | 1 |") == 3
    assert table.count("| digits:pytorch | all 2 hosts |") == 2
    aggregate = summary["aggregates"][0]
    per_host = [r["*p_inference_core(qps)"] for r in summary["results"]]
    assert aggregate["*p_inference_core(qps)"] == pytest.approx(sum(per_host))
    assert_nothing_left(docker_client, remote_workdir)

    # The same code and Dockerfile: no upload, no build the second time.
    code, out = finish(start_run(config))
    assert code == 0, out[-4000:]
    assert "already present" in out and "reusing image" in out
    assert "building image" not in out


def test_unreachable_host_does_not_stop_the_other(
    tmp_path, hosts, digits_data, remote_workdir, wheels_dir, docker_client
):
    good = hosts[0]
    config = write_host_yaml(
        tmp_path,
        hosts,
        digits_data,
        remote_workdir,
        wheels_dir,
        HOSTS=[f"{good.address}:{good.port}", "127.0.0.9:9"],
    )
    code, out = finish(start_run(config))
    assert code == 1
    results = by_host(summary_of(tmp_path))
    assert results[f"{good.address}:{good.port}"]["status"] == "success"
    bad = results["127.0.0.9:9"]
    assert bad["failed_step"] == "ssh" and "host 127.0.0.9:9: unreachable" in bad["error"]
    assert "FAILED digits:pytorch on host 127.0.0.9:9 at step ssh" in out
    assert_nothing_left(docker_client, remote_workdir)


def test_wrong_key_and_unknown_host_key_are_refused(
    tmp_path, hosts, digits_data, remote_workdir, wheels_dir, docker_client
):
    # A third host that only accepts a different key; a fourth missing from known_hosts.
    other_key = make_unrelated_client_key(tmp_path)
    wrong_key_host = start_sshd(
        tmp_path / "h3", address="127.0.0.4", client_key_path=other_key, known_hosts_path=hosts[0].known_hosts_path
    )
    unknown_host = start_sshd(
        tmp_path / "h4",
        address="127.0.0.5",
        client_key_path=hosts[0].client_key_path,
        known_hosts_path=tmp_path / "elsewhere",
    )
    try:
        good = hosts[0]
        config = write_host_yaml(
            tmp_path,
            hosts,
            digits_data,
            remote_workdir,
            wheels_dir,
            HOSTS=[f"{h.address}:{h.port}" for h in (good, wrong_key_host, unknown_host)],
        )
        code, out = finish(start_run(config))
    finally:
        stop_all([wrong_key_host, unknown_host])
    assert code == 1
    results = by_host(summary_of(tmp_path))
    assert results[f"{good.address}:{good.port}"]["status"] == "success"
    assert "SSH authentication failed" in results[f"127.0.0.4:{wrong_key_host.port}"]["error"]
    assert "unknown host key" in results[f"127.0.0.5:{unknown_host.port}"]["error"]
    assert_nothing_left(docker_client, remote_workdir)


def test_docker_engine_down_on_one_host(tmp_path, hosts, digits_data, remote_workdir, wheels_dir, docker_client):
    good = hosts[0]
    # This host's sshd points the docker CLI at a socket with no daemon behind it.
    dead = start_sshd(
        tmp_path / "h6",
        address="127.0.0.6",
        client_key_path=good.client_key_path,
        known_hosts_path=good.known_hosts_path,
        extra_config=[f"SetEnv DOCKER_HOST=unix://{tmp_path}/no-docker.sock"],
    )
    try:
        config = write_host_yaml(tmp_path, [good, dead], digits_data, remote_workdir, wheels_dir)
        code, out = finish(start_run(config))
    finally:
        dead.stop()
    assert code == 1
    results = by_host(summary_of(tmp_path))
    assert results[f"{good.address}:{good.port}"]["status"] == "success"
    bad = results[f"127.0.0.6:{dead.port}"]
    assert bad["failed_step"] == "docker" and "Docker engine not reachable" in bad["error"]
    assert_nothing_left(docker_client, remote_workdir)


def test_dockerfile_that_fails_to_build(tmp_path, hosts, digits_data, remote_workdir, wheels_dir, docker_client):
    perf = copy_tree(tmp_path / "inference")
    dockerfile = perf / "docker_images" / "cpu" / "pytorch" / "Dockerfile"
    dockerfile.write_text(
        "ARG BASE_IMAGE=inferperf/debian-python:bookworm\nFROM ${BASE_IMAGE}\nRUN echo broken-on-purpose && false\n"
    )
    config = write_host_yaml(tmp_path, hosts[:1], digits_data, remote_workdir, wheels_dir, FLAGPERF_PATH=str(perf))
    code, out = finish(start_run(config, perf))
    assert code == 1
    record = summary_of(tmp_path)["results"][0]
    assert record["failed_step"] == "image"
    assert f"building {dockerfile} failed" in record["error"]
    build_logs = list((tmp_path / "result").glob("run*/build_*.log"))
    assert build_logs and "broken-on-purpose" in build_logs[0].read_text()
    assert_nothing_left(docker_client, remote_workdir)


def build_containers(docker_client, token: str) -> list:
    """The classic builder's containers running a RUN step whose command holds ``token``."""
    found = []
    for container in docker_client.containers.list(all=True, ignore_removed=True):
        command = " ".join(container.attrs.get("Config", {}).get("Cmd") or [])
        if token in command:
            found.append(container)
    return found


def test_sigint_during_an_image_build(tmp_path, hosts, digits_data, remote_workdir, wheels_dir, docker_client):
    """Ctrl-C while the image builds: the Docker SDK's build call blocks until the engine ends it,
    here a RUN step held open for 10 minutes. run.py exits 130 at once, every case reads
    interrupted at the image step, and the engine drops the build and its container."""
    perf = copy_tree(tmp_path / "inference")
    token = f"inferperf-build-held-open-{tmp_path.name}"
    (perf / "docker_images" / "cpu" / "pytorch" / "Dockerfile").write_text(
        f"ARG BASE_IMAGE=inferperf/debian-python:bookworm\nFROM ${{BASE_IMAGE}}\nRUN echo {token} && sleep 600\n"
    )
    config = write_host_yaml(tmp_path, hosts[:1], digits_data, remote_workdir, wheels_dir, FLAGPERF_PATH=str(perf))
    proc = start_run(config, perf)
    try:
        deadline = time.monotonic() + 300  # a hang guard: the build's RUN step starts within seconds
        while not build_containers(docker_client, token) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[0][-3000:]
            time.sleep(0.5)
        assert build_containers(docker_client, token), "the build's RUN step never started"
        proc.send_signal(signal.SIGINT)
        code, out = finish(proc, timeout=120)  # before the fix: blocked until the RUN step's 600 s ended
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert code == 130, out[-3000:]
    assert "Traceback" not in out
    record = summary_of(tmp_path)["results"][0]
    assert (record["status"], record["failed_step"]) == ("interrupted", "image"), record
    assert "interrupted: the engine drops the build as run.py exits" in record["error"]
    deadline = time.monotonic() + 60  # the engine notices the closed connection, then removes the container
    while build_containers(docker_client, token) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not build_containers(docker_client, token)
    assert_nothing_left(docker_client, remote_workdir)


def test_container_killed_mid_run(tmp_path, hosts, digits_data, remote_workdir, wheels_dir, docker_client):
    perf = long_running_tree(tmp_path / "inference")
    victim = hosts[0]
    config = write_host_yaml(
        tmp_path, hosts, digits_data, remote_workdir, wheels_dir, FLAGPERF_PATH=str(perf), CASE_TIMEOUT=60
    )
    proc = start_run(config, perf)
    container = wait_for_container(docker_client, f"-127.0.0.2-{victim.port}-")
    time.sleep(3)
    container.kill()
    code, out = finish(proc)
    assert code == 1
    results = by_host(summary_of(tmp_path))
    killed = results[f"{victim.address}:{victim.port}"]
    assert killed["status"] == "failed" and "status 137" in killed["error"]
    other = results[f"{hosts[1].address}:{hosts[1].port}"]
    assert other["status"] == "timeout" and "CASE_TIMEOUT of 60 s" in other["error"]
    assert_nothing_left(docker_client, remote_workdir)


def test_sigint_to_run_py_mid_run(tmp_path, hosts, digits_data, remote_workdir, wheels_dir, docker_client):
    perf = long_running_tree(tmp_path / "inference")
    config = write_host_yaml(tmp_path, hosts, digits_data, remote_workdir, wheels_dir, FLAGPERF_PATH=str(perf))
    proc = start_run(config, perf)
    wait_for_container(docker_client, f"-127.0.0.3-{hosts[1].port}-")
    time.sleep(2)
    proc.send_signal(signal.SIGINT)
    code, out = finish(proc, timeout=120)
    assert code == 130, out[-3000:]
    assert "interrupted: stopping containers and monitors" in out
    summary = summary_of(tmp_path)
    assert {r["status"] for r in summary["results"]} == {"interrupted"}
    assert_nothing_left(docker_client, remote_workdir)
