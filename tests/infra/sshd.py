"""Start REAL OpenSSH servers for tests (no pytest dependency).

Each :class:`SshdHost` is an unprivileged-config ``/usr/sbin/sshd -D -e``
listening on a loopback address (127.0.0.2, 127.0.0.3, ... all work on Linux
without any configuration because the whole 127.0.0.0/8 is routed to ``lo``)
and a free port, with a throwaway ed25519 host key and a throwaway client key
pair whose public half is the only authorized key.

Typical use::

    host = start_sshd(tmp_path / "h1", address="127.0.0.2")
    try:
        ...  # connect to host.address:host.port as host.user with
             # host.client_key_path, verifying with host.known_hosts_path
    finally:
        host.stop()

Several hosts sharing one client key and one known_hosts file::

    hosts = start_sshd_hosts(tmp_path, 2)   # 127.0.0.2 and 127.0.0.3

Fault helpers: :func:`write_wrong_known_hosts` (host key changed / unknown)
and :func:`make_unrelated_client_key` (key not authorized).

Requirements: Debian's ``openssh-server`` and ``openssh-client``
(scripts/install_system_deps.sh).  sshd must run as root to log in as root;
run as another user it can only log in as that same user (``user`` is the
current user).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence, Union

SSHD_BIN = "/usr/sbin/sshd"  # sshd refuses to start unless given an absolute path
SSH_KEYGEN = "ssh-keygen"
PRIVSEP_DIR = "/run/sshd"  # sshd exits with "Missing privilege separation directory" without it

PathLike = Union[str, os.PathLike]


class SshdError(RuntimeError):
    """sshd (or ssh-keygen) could not be started / did not come up."""


def _current_user() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


def known_hosts_name(address: str, port: int) -> str:
    """Host name as written in known_hosts: ``[addr]:port`` unless port 22."""
    return address if port == 22 else f"[{address}]:{port}"


def generate_keypair(path: PathLike, comment: str = "inferperf-test") -> Path:
    """Create an unencrypted ed25519 key pair at ``path`` / ``path.pub``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for p in (path, path.with_name(path.name + ".pub")):
        if p.exists():
            p.unlink()
    if shutil.which(SSH_KEYGEN) is None:
        raise SshdError("ssh-keygen not found; install openssh-client (scripts/install_system_deps.sh)")
    proc = subprocess.run(
        [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    if proc.returncode != 0:
        raise SshdError(f"ssh-keygen failed for {path}: {proc.stdout.strip()}")
    os.chmod(path, 0o600)
    return path


def read_pubkey(path: PathLike) -> str:
    """``"ssh-ed25519 AAAA..."`` (type and base64 blob, no comment)."""
    text = Path(path).read_text().split()
    return f"{text[0]} {text[1]}"


def free_port(address: str = "127.0.0.2") -> int:
    """A TCP port currently free on ``address`` (bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def _wait_for_banner(address: str, port: int, proc: subprocess.Popen, timeout: float) -> bool:
    """True once the port answers with an SSH banner; False if sshd died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection((address, port), timeout=1.0) as s:
                s.settimeout(2.0)
                if s.recv(64).startswith(b"SSH-"):
                    return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


@dataclass
class SshdHost:
    address: str
    port: int
    client_key_path: str
    known_hosts_path: str
    host_pubkey: str  # "ssh-ed25519 AAAA..." of the server's host key
    user: str
    workdir: str = ""
    config_path: str = ""
    log_path: str = ""
    host_key_path: str = ""
    process: Optional[subprocess.Popen] = field(default=None, repr=False)

    @property
    def known_hosts_name(self) -> str:
        return known_hosts_name(self.address, self.port)

    @property
    def known_hosts_line(self) -> str:
        return f"{self.known_hosts_name} {self.host_pubkey}"

    @property
    def docker_base_url(self) -> str:
        return f"ssh://{self.user}@{self.address}:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def ssh_options(self) -> List[str]:
        """OpenSSH client options that pin this host's key and client key and
        ignore the user's ~/.ssh/config, agent and known_hosts."""
        return [
            "-F",
            "/dev/null",
            "-i",
            self.client_key_path,
            "-p",
            str(self.port),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "IdentityAgent=none",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            f"UserKnownHostsFile={self.known_hosts_path}",
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            "ConnectTimeout=10",
            "-o",
            "LogLevel=ERROR",
        ]

    def ssh_command(self, *remote_cmd: str) -> List[str]:
        """argv for ``ssh`` running ``remote_cmd`` on this host."""
        return ["ssh", *self.ssh_options(), f"{self.user}@{self.address}", "--", *remote_cmd]

    def ssh_config_block(self, alias: Optional[str] = None) -> str:
        """A ``Host`` block for an ssh_config file (OpenSSH or paramiko)."""
        alias = alias or self.address
        return (
            f"Host {alias}\n"
            f"    HostName {self.address}\n"
            f"    Port {self.port}\n"
            f"    User {self.user}\n"
            f"    IdentityFile {self.client_key_path}\n"
            f"    IdentitiesOnly yes\n"
            f"    UserKnownHostsFile {self.known_hosts_path}\n"
            f"    StrictHostKeyChecking yes\n"
        )

    def stop(self, timeout: float = 10.0) -> None:
        """Terminate sshd (the listener; sessions it forked die with it) and wait."""
        proc = self.process
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=timeout)
        # The listener was started in its own session/process group; its
        # pre-auth per-connection children stay in that group: end them too.
        # (Logged-in sessions get their own session and end when the client
        # disconnects.)
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
        self.process = None

    def __enter__(self) -> "SshdHost":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _sshd_config(
    address: str, port: int, host_key: Path, authorized_keys: Path, pidfile: Path, extra: Sequence[str] = ()
) -> str:
    return "\n".join(
        [
            *extra,
            f"ListenAddress {address}:{port}",
            f"HostKey {host_key}",
            f"AuthorizedKeysFile {authorized_keys}",
            f"PidFile {pidfile}",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "UseDNS no",
            "AllowTcpForwarding yes",
            "AllowStreamLocalForwarding yes",
            "StreamLocalBindUnlink yes",
            "X11Forwarding no",
            "PrintMotd no",
            "PrintLastLog no",
            # docker's ssh transport opens a session per HTTP connection
            "MaxSessions 64",
            "MaxStartups 64:30:128",
            "LoginGraceTime 30",
            "Subsystem sftp internal-sftp",
            "",
        ]
    )


def start_sshd(
    workdir: PathLike,
    address: str = "127.0.0.2",
    port: Optional[int] = None,
    *,
    client_key_path: Optional[PathLike] = None,
    known_hosts_path: Optional[PathLike] = None,
    authorized_keys: Sequence[str] = (),
    extra_config: Sequence[str] = (),
    timeout: float = 15.0,
    retries: int = 5,
) -> SshdHost:
    """Start a real sshd on ``address:port`` (free port when ``port`` is None).

    ``workdir`` gets the host key, config, pidfile, log, authorized_keys and,
    unless given, the client key pair (``client_key``) and ``known_hosts``.
    Pass ``client_key_path`` to reuse an existing key (several hosts, one
    key) and ``known_hosts_path`` to append this host's entry to a shared
    known_hosts file.  ``authorized_keys``: extra public key lines to accept.
    ``extra_config``: sshd_config lines placed first (first value wins in sshd),
    e.g. ``SetEnv DOCKER_HOST=unix:///nowhere`` to give a host a dead engine.
    Raises :class:`SshdError` with sshd's log when it does not come up.
    """
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    if not os.path.exists(SSHD_BIN):
        raise SshdError(f"{SSHD_BIN} not found; install openssh-server (scripts/install_system_deps.sh)")
    if not os.path.isdir(PRIVSEP_DIR):
        try:
            os.makedirs(PRIVSEP_DIR, mode=0o755, exist_ok=True)
        except OSError as exc:
            raise SshdError(f"cannot create sshd privilege separation dir {PRIVSEP_DIR}: {exc}")

    host_key = generate_keypair(workdir / "ssh_host_ed25519_key", comment=f"host-{address}")
    host_pubkey = read_pubkey(host_key.with_name(host_key.name + ".pub"))

    if client_key_path is None:
        client_key = generate_keypair(workdir / "client_key", comment="inferperf-client")
    else:
        client_key = Path(client_key_path).resolve()
        if not client_key.with_name(client_key.name + ".pub").exists():
            raise SshdError(f"public key {client_key}.pub not found")
    auth_keys = workdir / "authorized_keys"
    lines = [read_pubkey(client_key.with_name(client_key.name + ".pub"))]
    lines += [k.strip() for k in authorized_keys if k.strip()]
    auth_keys.write_text("\n".join(lines) + "\n")
    os.chmod(auth_keys, 0o600)

    pidfile = workdir / "sshd.pid"
    config = workdir / "sshd_config"
    log = workdir / "sshd.log"
    user = _current_user()

    attempts = 1 if port is not None else max(1, retries)
    last_log = ""
    for _ in range(attempts):
        use_port = port if port is not None else free_port(address)
        config.write_text(_sshd_config(address, use_port, host_key, auth_keys, pidfile, extra_config))
        # Validate the config first: clearer error than a dead process.
        check = subprocess.run(
            [SSHD_BIN, "-t", "-f", str(config)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        if check.returncode != 0:
            raise SshdError(f"sshd config test failed: {check.stdout.strip()}")
        with open(log, "ab") as logf:
            proc = subprocess.Popen(
                [SSHD_BIN, "-D", "-e", "-f", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        if _wait_for_banner(address, use_port, proc, timeout):
            break
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        last_log = log.read_text(errors="replace")[-2000:]
        if "Address already in use" not in last_log:
            raise SshdError(f"sshd on {address}:{use_port} did not start: {last_log.strip()}")
    else:
        raise SshdError(f"sshd on {address} did not start after {attempts} attempts: {last_log.strip()}")

    kh = Path(known_hosts_path).resolve() if known_hosts_path else workdir / "known_hosts"
    entry = f"{known_hosts_name(address, use_port)} {host_pubkey}\n"
    with open(kh, "a") as f:
        f.write(entry)

    return SshdHost(
        address=address,
        port=use_port,
        client_key_path=str(client_key),
        known_hosts_path=str(kh),
        host_pubkey=host_pubkey,
        user=user,
        workdir=str(workdir),
        config_path=str(config),
        log_path=str(log),
        host_key_path=str(host_key),
        process=proc,
    )


def start_sshd_hosts(workdir: PathLike, count: int, first_octet: int = 2, **kwargs) -> List[SshdHost]:
    """Start ``count`` hosts on 127.0.0.<first_octet>, 127.0.0.<first_octet+1>, ...

    They share one client key (``workdir/client_key``) and one known_hosts
    file (``workdir/known_hosts``) listing all of them.  On failure the hosts
    already started are stopped before the exception propagates.
    """
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    key = generate_keypair(workdir / "client_key", comment="inferperf-client")
    kh = workdir / "known_hosts"
    kh.write_text("")
    hosts: List[SshdHost] = []
    try:
        for i in range(count):
            address = f"127.0.0.{first_octet + i}"
            hosts.append(
                start_sshd(
                    workdir / f"host{i + 1}", address=address, client_key_path=key, known_hosts_path=kh, **kwargs
                )
            )
    except BaseException:
        stop_all(hosts)
        raise
    return hosts


def stop_all(hosts: Sequence[SshdHost]) -> None:
    for h in hosts:
        h.stop()


def write_wrong_known_hosts(host: SshdHost, path: PathLike) -> Path:
    """known_hosts that lists ``host`` (same ``[addr]:port``) with a DIFFERENT,
    freshly generated ed25519 key: a strict client must refuse to connect
    (OpenSSH: "REMOTE HOST IDENTIFICATION HAS CHANGED", paramiko:
    ``BadHostKeyException``).  For the "unknown host" case use an empty file."""
    path = Path(path).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    other = generate_keypair(path.with_name(path.name + ".otherkey"), comment="wrong-host-key")
    wrong = read_pubkey(other.with_name(other.name + ".pub"))
    path.write_text(f"{host.known_hosts_name} {wrong}\n")
    return path


def make_unrelated_client_key(workdir: PathLike, name: str = "unrelated_client_key") -> str:
    """Path of a new client private key that no test sshd authorizes."""
    return str(generate_keypair(Path(workdir).resolve() / name, comment="unauthorized-client"))


def write_ssh_config(path: PathLike, hosts: Sequence[SshdHost], aliases: Optional[Sequence[str]] = None) -> Path:
    """An ssh_config file with one ``Host`` block per host (aliases default
    to the addresses).  Use with ``ssh -F path`` or paramiko.SSHConfig."""
    path = Path(path)
    aliases = list(aliases) if aliases else [h.address for h in hosts]
    path.write_text("\n".join(h.ssh_config_block(a) for h, a in zip(hosts, aliases)))
    return path
