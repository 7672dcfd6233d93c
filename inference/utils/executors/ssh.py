"""SSH to the hosts with paramiko: verified host keys, key auth, bounded commands, SFTP.

Remote commands are argument lists joined with shlex; each one runs as the
leader of its own session so that a timeout can stop the whole remote process
group, not only the local end of the channel.
"""

from __future__ import annotations

import ipaddress
import os
import posixpath
import shlex
import socket
import stat
import time
from dataclasses import dataclass
from pathlib import Path

import paramiko
from loguru import logger

from common.errors import HostError
from utils.host_config import Host

CONNECT_TIMEOUT = 15.0
KILL_GRACE = 5.0


@dataclass
class CommandResult:
    exit_code: int
    stdout: str
    stderr: str


class SshHost:
    def __init__(
        self,
        host: Host,
        user: str,
        key_file: str | None,
        known_hosts: str,
        trust_on_first_use: bool = False,
    ) -> None:
        self.host = host
        self.user = user
        self.key_file = key_file
        self.known_hosts = known_hosts
        self.trust_on_first_use = trust_on_first_use
        self.client: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None

    @property
    def label(self) -> str:
        return self.host.label

    def error(self, message: str) -> HostError:
        return HostError(f"host {self.label}: {message}")

    def _this_machine(self) -> str:
        """For a loopback address on SSH's port (a new user's "127.0.0.1"): how to reach this
        machine's Docker engine without SSH. An sshd on another loopback port is meant."""
        try:
            loopback = ipaddress.ip_address(self.host.address).is_loopback and self.host.port == 22
        except ValueError:
            loopback = False
        return '; for this machine\'s Docker engine without SSH, write HOSTS: ["localhost"]' if loopback else ""

    # ---- connection ---------------------------------------------------------
    def connect(self) -> None:
        client = paramiko.SSHClient()
        if os.path.isfile(self.known_hosts):
            try:
                client.load_host_keys(self.known_hosts)
            except (OSError, paramiko.SSHException) as exc:
                raise self.error(f"cannot read known_hosts {self.known_hosts}: {exc}") from None
        # RejectPolicy unless the user opted in to trust-on-first-use in host.yaml.
        client.set_missing_host_key_policy(
            paramiko.AutoAddPolicy() if self.trust_on_first_use else paramiko.RejectPolicy()
        )
        before = _known_key_count(client)
        try:
            client.connect(
                self.host.address,
                port=self.host.port,
                username=self.user,
                key_filename=self.key_file,
                look_for_keys=self.key_file is None,
                allow_agent=True,
                timeout=CONNECT_TIMEOUT,
                banner_timeout=CONNECT_TIMEOUT,
                auth_timeout=CONNECT_TIMEOUT,
            )
        except paramiko.BadHostKeyException:
            client.close()
            raise self.error(
                f"host key does not match the one in {self.known_hosts} (possible man-in-the-middle); refusing to "
                "connect"
            ) from None
        except paramiko.AuthenticationException as exc:
            client.close()
            key = f"key {self.key_file}" if self.key_file else "agent/default keys"
            raise self.error(
                f"SSH authentication failed for user {self.user} with {key}: {exc}{self._this_machine()}"
            ) from None
        except paramiko.SSHException as exc:
            client.close()
            text = str(exc)
            if "not found in known_hosts" in text:
                hint = self._this_machine()
                raise self.error(
                    f"unknown host key (not in {self.known_hosts}); verify and add it, or set TRUST_ON_FIRST_USE: "
                    f"true{hint}"
                ) from None
            raise self.error(f"SSH failed: {text}") from None
        except (OSError, socket.timeout) as exc:
            client.close()
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            raise self.error(f"unreachable on port {self.host.port}: {reason}{self._this_machine()}") from None
        if self.trust_on_first_use and _known_key_count(client) > before:
            Path(self.known_hosts).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            client.save_host_keys(self.known_hosts)
            logger.warning(f"host {self.label}: trusted its host key on first use and saved it to {self.known_hosts}")
        transport = client.get_transport()
        if transport is None:  # connect() returned without one: not connected after all
            client.close()
            raise self.error("SSH connection closed right after it opened")
        transport.set_keepalive(15)
        self.client = client

    def close(self) -> None:
        if self._sftp is not None:
            self._sftp.close()
            self._sftp = None
        if self.client is not None:
            self.client.close()
            self.client = None

    @property
    def transport(self) -> paramiko.Transport:
        transport = self.client.get_transport() if self.client is not None else None
        if transport is None:
            raise self.error("not connected")
        return transport

    # ---- commands -----------------------------------------------------------
    def run(self, argv: list[str], timeout: float = 60.0, check: bool = True) -> CommandResult:
        """Run ``argv`` remotely; on timeout stop its process group and raise."""
        # sshd starts the command as a session leader, so its pid is also the
        # group id; `exec` keeps that pid for the real command.
        command = "echo $$; exec " + shlex.join(argv)
        channel = self.transport.open_session(timeout=CONNECT_TIMEOUT)
        channel.settimeout(1.0)
        channel.exec_command(command)
        stdout, stderr = bytearray(), bytearray()
        deadline = time.monotonic() + timeout
        while not channel.exit_status_ready() or channel.recv_ready() or channel.recv_stderr_ready():
            if time.monotonic() > deadline:
                pid = _first_line(stdout)
                channel.close()
                self._kill_group(pid)
                raise self.error(f"command timed out after {timeout:.0f} s and was stopped: {shlex.join(argv)}")
            got = False
            if channel.recv_ready():
                stdout += channel.recv(65536)
                got = True
            if channel.recv_stderr_ready():
                stderr += channel.recv_stderr(65536)
                got = True
            if not got:
                time.sleep(0.01)
        code = channel.recv_exit_status()
        channel.close()
        out = bytes(stdout).decode(errors="replace").split("\n", 1)
        result = CommandResult(code, out[1] if len(out) > 1 else "", bytes(stderr).decode(errors="replace"))
        if check and code != 0:
            detail = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise self.error(f"`{shlex.join(argv)}` exited with status {code}: {detail}")
        return result

    def _kill_group(self, pid: str | None) -> None:
        if not pid or not pid.isdigit():
            return
        for signal_name in ("TERM", "KILL"):
            try:
                self.run(["kill", f"-{signal_name}", "--", f"-{pid}"], timeout=10, check=False)
            except HostError:
                return
            alive = self.run(["kill", "-0", "--", f"-{pid}"], timeout=10, check=False)
            if alive.exit_code != 0:
                return
            time.sleep(KILL_GRACE if signal_name == "TERM" else 0)

    # ---- files --------------------------------------------------------------
    @property
    def sftp(self) -> paramiko.SFTPClient:
        if self._sftp is None:
            self._sftp = self.client.open_sftp() if self.client else None
            if self._sftp is None:
                raise self.error("not connected")
        return self._sftp

    def is_dir(self, path: str) -> bool:
        try:
            mode = self.sftp.stat(path).st_mode
            return mode is not None and stat.S_ISDIR(mode)
        except OSError:
            return False

    def exists(self, path: str) -> bool:
        try:
            self.sftp.stat(path)
            return True
        except OSError:
            return False

    def makedirs(self, path: str) -> None:
        parts = []
        while path not in ("", "/") and not self.exists(path):
            parts.append(path)
            path = posixpath.dirname(path)
        for directory in reversed(parts):
            try:
                self.sftp.mkdir(directory)
            except OSError:
                if not self.is_dir(directory):
                    raise self.error(f"cannot create directory {directory}") from None

    def put_tree(self, local: Path, remote: str, skip: tuple[str, ...] = ()) -> int:
        """Upload a directory tree; returns the number of files copied."""
        count = 0
        self.makedirs(remote)
        for root, dirs, files in os.walk(local):
            dirs[:] = sorted(d for d in dirs if d not in skip)
            rel = os.path.relpath(root, local)
            target_dir = remote if rel == "." else posixpath.join(remote, *Path(rel).parts)
            if rel != ".":
                self.sftp.mkdir(target_dir)
            for name in sorted(files):
                if name.endswith((".pyc", ".pyo")):
                    continue
                self.sftp.put(os.path.join(root, name), posixpath.join(target_dir, name))
                count += 1
        return count

    def get_files(self, remote_dir: str, local_dir: Path) -> list[str]:
        """Fetch the plain files of one remote directory (not recursive)."""
        local_dir.mkdir(parents=True, exist_ok=True)
        fetched: list[str] = []
        try:
            entries = self.sftp.listdir_attr(remote_dir)
        except OSError:
            return fetched
        for entry in entries:
            if entry.st_mode is not None and stat.S_ISREG(entry.st_mode):
                self.sftp.get(posixpath.join(remote_dir, entry.filename), str(local_dir / entry.filename))
                fetched.append(entry.filename)
        return fetched

    def remove_tree(self, path: str, timeout: float = 120) -> None:
        if not path.startswith("/") or path.count("/") < 3:
            raise self.error(f"refusing to remove suspicious path {path!r}")
        self.run(["rm", "-rf", "--", path], timeout=timeout)


def _known_key_count(client: paramiko.SSHClient) -> int:
    return sum(len(keys) for keys in client.get_host_keys().values())


def _first_line(data: bytearray) -> str | None:
    line = bytes(data).split(b"\n", 1)[0].strip()
    return line.decode() if line else None
