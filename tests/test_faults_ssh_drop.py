"""A host's SSH connection dropped mid-case (its sshd session processes SIGKILLed, the
server itself still up, as after a network blip or an sshd restart): the case fails
naming the lost connection, run.py does not hang, and the containers the case left on
the host are removed through a new connection."""

from __future__ import annotations

import signal
import time

import psutil
import pytest

from tests.conftest import long_running_tree
from tests.infra.docker_session import assert_nothing_left, digits_data, docker_client, summary_of, wheels_dir  # noqa: F401
from tests.infra.docker_ssh import (  # noqa: F401 - fixtures
    finish,
    hosts,
    remote_workdir,
    start_run,
    wait_for_container,
    write_host_yaml,
)

pytestmark = [pytest.mark.docker, pytest.mark.ssh, pytest.mark.slow]


def drop_connections(host) -> int:
    """SIGKILL every session process of this sshd (not the listener): the TCP connection ends."""
    sessions = psutil.Process(host.process.pid).children(recursive=True)
    for proc in sessions:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    return len(sessions)


def test_dropped_ssh_connection_fails_the_case_and_leaves_nothing(
    tmp_path, hosts, digits_data, remote_workdir, wheels_dir, docker_client
):  # noqa: F811
    perf = long_running_tree(tmp_path / "inference")
    config = write_host_yaml(tmp_path, hosts[:1], digits_data, remote_workdir, wheels_dir, FLAGPERF_PATH=str(perf))
    proc = start_run(config, perf)
    try:
        wait_for_container(docker_client, f"-{hosts[0].address}-{hosts[0].port}-")
        time.sleep(2)
        assert drop_connections(hosts[0]) >= 1
        dropped_at = time.monotonic()
        code, out = finish(proc, timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert time.monotonic() - dropped_at < 120, "run.py took too long to notice the lost connection"
    assert code == 1, out[-3000:]
    assert "Traceback" not in out
    (record,) = summary_of(tmp_path)["results"]
    assert record["status"] == "failed" and record["failed_step"] == "host", record
    assert "connection" in record["error"] and "lost" in record["error"], record["error"]
    assert "reconnected after the lost connection and removed the case's containers" in out
    # The new connection also brought back what the case had written so far.
    local = next((tmp_path / "result").glob("run*/digits:pytorch/*_noderank0"))
    assert (local / "container.out.log").is_file() and (local / "sys_monitor.jsonl").is_file()
    assert (local / "stdout.log").stat().st_size > 0, "the pipeline's output up to the drop was not saved"
    assert_nothing_left(docker_client, remote_workdir)
