"""The Docker engine over SSH (utils/executors/docker_forward.py::DockerOverSsh), against a real
OpenSSH server on loopback and the real engine: a new connection is served by a channel started
beforehand, and closing the forward leaves no channel, and so no ``docker system dial-stdio``, behind."""

from __future__ import annotations

import socket
import subprocess
import threading
import time

import pytest

from tests.infra.docker_env import require
from tests.infra.docker_session import docker_client  # noqa: F401 - fixture
from tests.infra.sshd import SshdError, start_sshd
from utils.executors.docker_forward import DockerOverSsh
from utils.executors.ssh import SshHost
from utils.host_config import Host


@pytest.fixture
def forward(tmp_path, docker_client):
    try:
        host = start_sshd(tmp_path / "sshd", address="127.0.0.8")
    except SshdError as exc:
        require(False, f"OpenSSH server unavailable: {exc}")
    ssh = SshHost(
        Host(host.address, host.port),
        host.user,
        key_file=host.client_key_path,
        known_hosts=host.known_hosts_path,
        trust_on_first_use=False,
    )
    ssh.connect()
    fwd = DockerOverSsh(ssh.client.get_transport(), "h")
    yield fwd
    fwd.close()
    ssh.close()
    host.stop()


def ping(fwd: DockerOverSsh) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(60)
        conn.connect(str(fwd.socket_path))
        conn.sendall(b"GET /_ping HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n")
        reply = b""
        while chunk := conn.recv(65536):
            reply += chunk
    return reply


def spares_ready(fwd: DockerOverSsh, count: int, timeout: float = 60) -> list:
    deadline = time.monotonic() + timeout  # polled: sshd and the docker CLI start on a shared machine
    while time.monotonic() < deadline:
        with fwd._lock:
            if len(fwd._spares) >= count:
                return list(fwd._spares)
        time.sleep(0.05)
    pytest.fail(f"{count} spare channels not started within {timeout} s")


def dial_stdio_processes() -> list[str]:
    ps = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout
    return [line for line in ps.splitlines() if "docker system dial-stdio" in line and "ps -ww" not in line]


def test_new_connections_take_the_channels_started_beforehand(forward):
    assert b"200 OK" in ping(forward)  # the first connection opens its own channel, then spares start
    spares = spares_ready(forward, DockerOverSsh.SPARE_CHANNELS)
    served: list = []
    original = forward._take_spare

    def taking() -> object:
        channel = original()
        served.append(channel)
        return channel

    forward._take_spare = taking  # type: ignore[method-assign]
    replies: list[bytes] = []
    threads = [threading.Thread(target=lambda: replies.append(ping(forward))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    assert len(replies) == 2 and all(b"200 OK" in reply for reply in replies)
    assert {id(channel) for channel in served} == {id(channel) for channel in spares}
    # Started once: the SDK's pool keeps the connections they now serve, so none are started after.
    assert b"200 OK" in ping(forward)
    with forward._lock:
        assert forward._spares == []


def test_a_spare_that_died_is_passed_over(forward):
    assert b"200 OK" in ping(forward)
    first, *_ = spares_ready(forward, DockerOverSsh.SPARE_CHANNELS)
    first.close()  # its dial-stdio ends, as one would if the host's engine restarted
    assert b"200 OK" in ping(forward)


def test_closing_the_forward_ends_every_channel_spares_included(forward):
    before = set(dial_stdio_processes())
    assert b"200 OK" in ping(forward)
    spares_ready(forward, DockerOverSsh.SPARE_CHANNELS)
    assert len(set(dial_stdio_processes()) - before) >= DockerOverSsh.SPARE_CHANNELS
    forward.close()
    deadline = time.monotonic() + 30  # polled: sshd ends a closed channel's command on its own time
    while (left := set(dial_stdio_processes()) - before) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left == set()
