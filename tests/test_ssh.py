"""utils.executors.ssh against a real OpenSSH server on a loopback address."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from common.errors import HostError
from tests.infra.docker_env import require
from tests.infra.sshd import SshdError, make_unrelated_client_key, start_sshd, write_wrong_known_hosts
from utils.executors.ssh import SshHost
from utils.host_config import Host

pytestmark = pytest.mark.ssh


@pytest.fixture
def sshd(tmp_path):
    try:
        host = start_sshd(tmp_path / "sshd", address="127.0.0.7")
    except SshdError as exc:
        require(False, f"OpenSSH server unavailable: {exc}")
    yield host
    host.stop()


def client(sshd, **overrides) -> SshHost:
    options = {"key_file": sshd.client_key_path, "known_hosts": sshd.known_hosts_path, "trust_on_first_use": False}
    options.update(overrides)
    return SshHost(Host(sshd.address, sshd.port), sshd.user, **options)


def test_arguments_are_passed_verbatim_not_through_a_shell(sshd):
    ssh = client(sshd)
    ssh.connect()
    try:
        result = ssh.run(["printf", "%s|", "a b", "$(id)", "; rm -rf /tmp/x", "it's"])
        assert result.stdout == "a b|$(id)|; rm -rf /tmp/x|it's|"
        with pytest.raises(HostError, match=r"`false` exited with status 1"):
            ssh.run(["false"])
    finally:
        ssh.close()


def test_timeout_stops_the_remote_process_too(sshd):
    ssh = client(sshd)
    ssh.connect()
    marker = "41.731"
    try:
        with pytest.raises(HostError, match="timed out after 1 s and was stopped"):
            ssh.run(["sh", "-c", f"sleep {marker}; echo never"], timeout=1)
    finally:
        ssh.close()
    deadline = time.monotonic() + 20  # polled: the remote shell may take a moment to go on a loaded machine
    while (
        left := subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True).stdout.strip()
    ) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == "", "remote process survived the timeout"


def test_unknown_host_key_is_refused_unless_trust_on_first_use(sshd, tmp_path):
    empty = tmp_path / "known_hosts_empty"
    empty.write_text("")
    with pytest.raises(HostError, match=f"host {sshd.address}:{sshd.port}: unknown host key"):
        client(sshd, known_hosts=str(empty)).connect()
    trusting = client(sshd, known_hosts=str(empty), trust_on_first_use=True)
    trusting.connect()
    trusting.close()
    assert sshd.host_pubkey.split()[1] in empty.read_text()
    strict = client(sshd, known_hosts=str(empty))
    strict.connect()  # the saved key now verifies
    strict.close()


def test_changed_host_key_and_wrong_client_key(sshd, tmp_path):
    wrong = write_wrong_known_hosts(sshd, tmp_path / "wrong_known_hosts")
    with pytest.raises(HostError, match="host key does not match"):
        client(sshd, known_hosts=str(wrong)).connect()
    with pytest.raises(HostError, match="SSH authentication failed"):
        client(sshd, key_file=make_unrelated_client_key(tmp_path)).connect()


def test_unreachable_port(tmp_path):
    ssh = SshHost(Host("127.0.0.7", 9), "root", None, str(tmp_path / "kh"))
    with pytest.raises(HostError, match="host 127.0.0.7:9: unreachable on port 9"):
        ssh.connect()


def test_sftp_tree_upload_and_fetch(sshd, tmp_path):
    local = tmp_path / "tree"
    (local / "pkg" / "__pycache__").mkdir(parents=True)
    (local / "pkg" / "a.py").write_text("A")
    (local / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"x")
    (local / "top.yaml").write_text("k: v\n")
    remote = str(tmp_path / "remote" / "code")
    ssh = client(sshd)
    ssh.connect()
    try:
        assert ssh.put_tree(local, remote, skip=("__pycache__",)) == 2
        assert (Path(remote) / "pkg" / "a.py").read_text() == "A"
        assert not (Path(remote) / "pkg" / "__pycache__").exists()
        fetched = ssh.get_files(remote, tmp_path / "back")
        assert fetched == ["top.yaml"] and (tmp_path / "back" / "top.yaml").read_text() == "k: v\n"
        ssh.remove_tree(str(tmp_path / "remote"))
        assert not (tmp_path / "remote").exists()
    finally:
        ssh.close()
