"""How the Docker executors reach a host: one declared interface, one implementation per way.

``HostTransport`` is everything ``DockerSession`` (utils/executors/docker.py) does to a host:
run a bounded command, a few file operations, and open the host's Docker engine. Its
implementations:

- ``SshTransport``: a host over SSH (``SshHost``: paramiko, host key checked; SFTP for
  files; the engine through ``docker system dial-stdio`` channels, ``DockerOverSsh``);
- ``LocalTransport``: this machine (``HOSTS: ["localhost"]`` or DOCKER_LOCAL: true): the
  local file system, local processes, the engine through ``docker.from_env()``;
- ``SlurmTransport`` (utils/executors/slurm_docker.py): a Slurm node: files through the
  shared directory, the engine through ``srun`` steps of the case's job.

``sync_code`` copies inference/ to a host through any of them, once per code version.
"""

from __future__ import annotations

import os
import posixpath
import secrets
import shlex
import shutil
import signal
import stat
import subprocess
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import docker

from common.errors import HostError
from common.files import hash_tree, listed
from utils.executors.docker_forward import DockerOverSsh, EngineForward
from utils.executors.ssh import CommandResult, SshHost
from utils.host_config import Host

API_POOL_SIZE = 16  # concurrent Docker API connections per host (waits, log streams, calls)
CODE_SKIP = ("onnxs", "result", "__pycache__", ".pytest_cache")  # never copied to a host


class HostTransport(ABC):
    """A host as the Docker executors use it. Paths are the host's (POSIX) paths.

    Every method that fails raises ``HostError`` naming the host (``error``), except where
    a docstring says otherwise (SFTP's OSError, for the caller to word)."""

    local: bool  # the host's files are this machine's files
    engine_words: str  # how messages name the host's Docker engine
    who: str = "host"  # how messages name the host: "host" or "node"

    @property
    @abstractmethod
    def label(self) -> str:
        """The host as HOSTS names it."""

    @property
    @abstractmethod
    def connected(self) -> bool:
        """``connect`` was called and ``close`` was not."""

    @property
    @abstractmethod
    def alive(self) -> bool:
        """The connection still carries traffic (False after a drop)."""

    def error(self, message: str) -> HostError:
        return HostError(f"{self.who} {self.label}: {message}")

    @abstractmethod
    def connect(self) -> None: ...

    @abstractmethod
    def close(self) -> None:
        """Idempotent."""

    @abstractmethod
    def open_docker(self) -> tuple[docker.DockerClient, EngineForward | None]:
        """A client of the host's engine, and what forwards its connections (None: the SDK's own)."""

    @abstractmethod
    def run(self, argv: list[str], timeout: float = 60.0, check: bool = True) -> CommandResult:
        """Run ``argv`` on the host; stop its whole process group on timeout and raise."""

    @abstractmethod
    def is_dir(self, path: str) -> bool: ...

    @abstractmethod
    def exists(self, path: str) -> bool: ...

    @abstractmethod
    def makedirs(self, path: str) -> None: ...

    @abstractmethod
    def user_ids(self, created_dir: str) -> str:
        """``uid:gid`` the containers run as: the owner of ``created_dir``, which this transport just created."""

    @abstractmethod
    def put_tree(self, local: Path, remote: str, skip: tuple[str, ...] = ()) -> int:
        """Copy a local tree to the host (no ``skip`` names, no bytecode); return the files copied."""

    @abstractmethod
    def write_text(self, path: str, text: str) -> None: ...

    @abstractmethod
    def rename(self, source: str, target: str) -> None:
        """Atomic; OSError when ``target`` exists."""

    @abstractmethod
    def get_files(self, remote_dir: str, local_dir: Path) -> list[str]:
        """Copy the plain files of one directory (not recursive) into ``local_dir``; their names."""

    @abstractmethod
    def remove_files(self, directory: str, names: list[str]) -> None:
        """Remove these files, then the (now empty) directory; OSError when it is not empty."""

    @abstractmethod
    def rmdir(self, path: str) -> bool:
        """Remove an empty directory; False when it cannot be."""

    @abstractmethod
    def remove_tree(self, path: str, timeout: float = 120) -> None:
        """``rm -rf`` of a path at least three levels deep (anything shallower is refused)."""


def _done(call: Callable[[str], object], path: str) -> bool:
    """True when ``call(path)`` succeeded, False when it raised OSError."""
    try:
        call(path)
    except OSError:
        return False
    return True


class SshTransport(SshHost, HostTransport):
    """A host reached over SSH: ``SshHost`` (connection, commands, SFTP) plus the few file
    operations the session uses, each one SFTP request."""

    local = False
    engine_words = "Docker engine"

    @property
    def connected(self) -> bool:
        return self.client is not None

    @property
    def alive(self) -> bool:
        transport = self.client.get_transport() if self.client is not None else None
        return transport is not None and transport.is_active()

    def open_docker(self) -> tuple[docker.DockerClient, DockerOverSsh]:
        forward = DockerOverSsh(self.transport, self.label)
        try:
            return docker.DockerClient(base_url=forward.base_url, timeout=120, max_pool_size=API_POOL_SIZE), forward
        except BaseException:
            forward.close()
            raise

    def user_ids(self, created_dir: str) -> str:
        """Read from the directory's SFTP stat (one request, where ``id`` would cost a command
        channel). Under a set-group-ID parent the group is the parent's, so then ask ``id``."""
        attrs = self.sftp.stat(created_dir)
        if attrs.st_uid is not None and attrs.st_gid is not None and not (attrs.st_mode or 0) & stat.S_ISGID:
            return f"{attrs.st_uid}:{attrs.st_gid}"
        return self.run(["sh", "-c", 'echo "$(id -u):$(id -g)"'], timeout=20).stdout.strip()

    def write_text(self, path: str, text: str) -> None:
        with self.sftp.open(path, "w") as handle:
            handle.write(text)

    def rename(self, source: str, target: str) -> None:
        self.sftp.posix_rename(source, target)

    def remove_files(self, directory: str, names: list[str]) -> None:
        for name in names:
            self.sftp.remove(posixpath.join(directory, name))
        self.sftp.rmdir(directory)

    def rmdir(self, path: str) -> bool:
        return _done(self.sftp.rmdir, path)


class LocalTransport(HostTransport):
    """This machine as the host: files through the local file system, commands as local
    processes, the engine through ``docker.from_env()``."""

    local = True
    engine_words = "the local Docker engine"

    def __init__(self, host: Host, who: str = "host") -> None:
        self.host = host
        self.who = who
        self._connected = False

    @property
    def label(self) -> str:
        return self.host.label

    @property
    def connected(self) -> bool:
        return self._connected

    @property
    def alive(self) -> bool:
        return self._connected

    def connect(self) -> None:
        self._connected = True

    def close(self) -> None:
        self._connected = False

    def open_docker(self) -> tuple[docker.DockerClient, EngineForward | None]:
        return docker.from_env(timeout=120, max_pool_size=API_POOL_SIZE), None

    def run(self, argv: list[str], timeout: float = 60.0, check: bool = True) -> CommandResult:
        try:
            process = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True
            )
        except OSError as exc:
            raise self.error(f"cannot run {shlex.join(argv)}: {exc.strerror or exc}") from None
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            process.communicate()
            raise self.error(f"command timed out after {timeout:.0f} s and was stopped: {shlex.join(argv)}") from None
        result = CommandResult(process.returncode, out.decode(errors="replace"), err.decode(errors="replace"))
        if check and result.exit_code != 0:
            detail = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise self.error(f"`{shlex.join(argv)}` exited with status {result.exit_code}: {detail}")
        return result

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def exists(self, path: str) -> bool:
        return os.path.lexists(path)

    def makedirs(self, path: str) -> None:
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise self.error(f"cannot create directory {path}: {exc.strerror or exc}") from None

    def user_ids(self, created_dir: str) -> str:
        return f"{os.getuid()}:{os.getgid()}"

    def put_tree(self, local: Path, remote: str, skip: tuple[str, ...] = ()) -> int:
        count = 0

        def ignore(_root, names):
            nonlocal count
            skipped = {n for n in names if n in skip or n.endswith((".pyc", ".pyo"))}
            count += sum(1 for n in names if n not in skipped and not os.path.isdir(os.path.join(_root, n)))
            return skipped

        shutil.copytree(local, remote, ignore=ignore, symlinks=False)
        return count

    def write_text(self, path: str, text: str) -> None:
        Path(path).write_text(text, encoding="utf-8")

    def rename(self, source: str, target: str) -> None:
        os.rename(source, target)

    def get_files(self, remote_dir: str, local_dir: Path) -> list[str]:
        local_dir.mkdir(parents=True, exist_ok=True)
        fetched: list[str] = []
        for entry in listed(remote_dir):
            if entry.is_file(follow_symlinks=False):
                shutil.copyfile(entry.path, local_dir / entry.name)
                fetched.append(entry.name)
        return fetched

    def remove_files(self, directory: str, names: list[str]) -> None:
        for name in names:
            os.unlink(os.path.join(directory, name))
        os.rmdir(directory)

    def rmdir(self, path: str) -> bool:
        return _done(os.rmdir, path)

    def remove_tree(self, path: str, timeout: float = 120) -> None:
        if not path.startswith("/") or path.count("/") < 3:
            raise self.error(f"refusing to remove suspicious path {path!r}")
        shutil.rmtree(path, ignore_errors=True)
        if os.path.lexists(path):
            # Files a container wrote as another user: let rm report what it cannot remove.
            self.run(["rm", "-rf", "--", path], timeout=timeout)


# ---- the code on a host ----------------------------------------------------------------------
@dataclass(frozen=True)
class CodeCopy:
    """inference/ on a host: ``<workdir>/code/<version>/inference``."""

    inference_dir: str
    version: str
    copied: int | None  # files copied now; None: a complete copy was there already


def code_version(perf_dir: Path) -> str:
    """The hash of exactly what ``sync_code`` copies."""
    return hash_tree([perf_dir], suffixes=None, skip_dirs=CODE_SKIP, relative_to_parent=False)[:16]


def sync_code(transport: HostTransport, perf_dir: Path, workdir: str) -> CodeCopy:
    """Copy inference/ to ``<workdir>/code/<version>/`` once per code version: into a staging
    folder, marked complete, then renamed into place (two hosts sharing a folder race
    harmlessly); a complete copy is reused. ``onnxs/`` is created empty (a mount point)."""
    version = code_version(perf_dir)
    root = posixpath.join(workdir, "code")
    final = posixpath.join(root, version)
    copy = CodeCopy(posixpath.join(final, "inference"), version, None)
    if transport.exists(posixpath.join(final, ".complete")):
        return copy
    staging = posixpath.join(root, f".staging-{version}-{secrets.token_hex(4)}")
    try:
        transport.makedirs(root)
        count = transport.put_tree(perf_dir, posixpath.join(staging, "inference"), skip=CODE_SKIP)
        transport.makedirs(posixpath.join(staging, "inference", "onnxs"))
        transport.write_text(posixpath.join(staging, ".complete"), version)
        try:
            transport.rename(staging, final)
        except OSError:
            if not transport.exists(posixpath.join(final, ".complete")):
                raise
    finally:
        if transport.exists(staging):
            transport.remove_tree(staging)
    return CodeCopy(copy.inference_dir, version, count)
