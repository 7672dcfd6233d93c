"""A host's Docker engine, served to the SDK through a private local unix socket.

Two ways to reach it, each Docker API connection being one stream to the engine's
``docker system dial-stdio`` (what the docker CLI's ssh transport does):

- ``DockerOverSsh``: a channel on the already-verified SSH connection (MODE docker);
- ``DockerOverCommand``: a local command whose stdin and stdout are the connection,
  e.g. ``srun --jobid J --overlap --unbuffered docker system dial-stdio`` (MODE slurm
  with SLURM_CONTAINER: docker: the node's engine, inside the case's allocation).

docker-py's own ``ssh://`` transport opens fresh paramiko connections that
only read ``~/.ssh/known_hosts`` and ``~/.ssh/config``; it cannot use the
key file and known_hosts named in host.yaml. Instead each Docker API
connection here is a channel on the existing SSH transport running
``docker system dial-stdio`` (what the docker CLI's ssh transport does), served
to the SDK through the socket.

Each channel (or command) starts a ``docker`` CLI process on the host, so the SDK client must
keep its connections (``utils/executors/docker.py``: one connection pool per client,
not docker-py's pool per URL): a handful of channels serve a whole run.
"""

from __future__ import annotations

import os
import select
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import paramiko
from loguru import logger

_BUFFER = 65536
EXEC_TIMEOUT_S = 30
DRAIN_TIMEOUT_S = 10


class EngineForward:
    """A host's Docker engine served on a private unix socket (a 0700 temporary folder)
    at ``base_url``: every connection to it is handed to ``_serve`` on its own thread;
    ``close`` ends them all at once. The base of both ways below."""

    def __init__(self, label: str) -> None:
        self.label = label
        self._dir = Path(tempfile.mkdtemp(prefix="inferperf-docker-"))
        os.chmod(self._dir, 0o700)
        self.socket_path = self._dir / "docker.sock"
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(self.socket_path))
        self._server.listen(16)
        self._closed = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.channels_opened = 0
        self._accept_thread = threading.Thread(target=self._accept, name=f"docker-fwd-{label}", daemon=True)
        self._accept_thread.start()

    @property
    def base_url(self) -> str:
        return f"unix://{self.socket_path}"

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            with self._lock:
                self._threads = [t for t in self._threads if t.is_alive()] + [thread]
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def _close_streams(self) -> None:
        """End every connection still open (called by close, after the listener)."""

    def close(self) -> None:
        """Stop at once: close the listener and every open stream (a pump would
        otherwise notice only at its next select timeout), then reap the threads."""
        self._closed.set()
        try:
            self._server.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self._server.close()
        except OSError:
            pass
        self._close_streams()
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout=2)
        shutil.rmtree(self._dir, ignore_errors=True)


class DockerOverSsh(EngineForward):
    """Each connection a channel running ``docker system dial-stdio``. Such a channel is ready only once
    the host's sshd has started a shell and the docker CLI (docs/decisions.md), and a case's three containers are
    created side by side, each on a connection of its own: so once the first connection is served,
    ``SPARE_CHANNELS`` more are started, and a new connection takes one of them. They are started once:
    the SDK's pool keeps the connections they serve for the cases after."""

    SPARE_CHANNELS = 2

    def __init__(self, transport: paramiko.Transport, label: str) -> None:
        self.transport = transport
        self._open: set = set()  # live (conn, channel) pairs, closed at once by close()
        self._spares: list[paramiko.Channel] = []  # started, not yet serving a connection
        self._spares_started = False
        super().__init__(label)

    def _open_channel(self) -> paramiko.Channel:
        channel = self.transport.open_session(timeout=15)
        # paramiko waits for the exec reply without a timeout: bound it.
        watchdog = threading.Timer(EXEC_TIMEOUT_S, channel.close)
        watchdog.start()
        try:
            channel.exec_command("docker system dial-stdio")
        finally:
            watchdog.cancel()
        if channel.closed:
            channel.close()
            raise paramiko.SSHException(f"no reply to the exec request within {EXEC_TIMEOUT_S} s")
        return channel

    def _take_spare(self) -> paramiko.Channel | None:
        """A started channel still alive, or None."""
        with self._lock:
            while self._spares:
                channel = self._spares.pop(0)
                if not (channel.closed or channel.eof_received or channel.exit_status_ready()):
                    return channel
                channel.close()
        return None

    def _start_spares(self) -> None:
        """Start ``SPARE_CHANNELS`` channels, each on its own thread; once."""
        with self._lock:
            if self._closed.is_set() or self._spares_started:
                return
            self._spares_started = True
        for _ in range(self.SPARE_CHANNELS):
            threading.Thread(target=self._start_spare, name=f"docker-spare-{self.label}", daemon=True).start()

    def _start_spare(self) -> None:
        channel = None
        try:
            channel = self._open_channel()
        except Exception as exc:  # noqa: BLE001 - a spare is a saving: a connection opens its own channel
            logger.debug(f"host {self.label}: a spare docker dial-stdio channel failed: {type(exc).__name__}: {exc}")
        with self._lock:
            if channel is not None and not self._closed.is_set():
                self._spares.append(channel)
                return
        if channel is not None:
            channel.close()

    def _serve(self, conn: socket.socket) -> None:
        channel = self._take_spare()
        try:
            if channel is None:
                channel = self._open_channel()
        except Exception as exc:  # whatever it was, the client must see the connection end, not hang
            logger.warning(f"host {self.label}: docker dial-stdio channel failed: {type(exc).__name__}: {exc}")
            conn.close()
            return
        self._start_spares()
        pair = (conn, channel)
        with self._lock:
            self.channels_opened += 1
            self._open.add(pair)
        watched: list[socket.socket | paramiko.Channel] = [conn, channel]
        try:
            while not self._closed.is_set():
                readable, _, _ = select.select(watched, [], [], 0.5)
                if conn in readable:
                    data = conn.recv(_BUFFER)
                    if not data:
                        channel.shutdown_write()
                        # Keep reading the response until the engine closes.
                        channel.settimeout(DRAIN_TIMEOUT_S)  # a dial-stdio that never closes ends here
                        while True:
                            chunk = channel.recv(_BUFFER)
                            if not chunk:
                                break
                            conn.sendall(chunk)
                        break
                    channel.sendall(data)
                if channel in readable and not self._from_channel(conn, channel):
                    break
        except (OSError, EOFError, paramiko.SSHException):
            pass
        except Exception as exc:
            logger.warning(f"host {self.label}: docker dial-stdio relay failed: {type(exc).__name__}: {exc}")
        finally:
            with self._lock:
                self._open.discard(pair)
            channel.close()
            try:
                conn.close()
            except OSError:
                pass

    def _from_channel(self, conn: socket.socket, channel: paramiko.Channel) -> bool:
        """Forward what the channel holds; False once it has ended.

        The channel's select() handle is readable for stdout data, stderr data and EOF
        alike. Only ever read what is there: a blocking recv() after a line on stderr
        (a warning from the docker CLI) would wait for a response to a request that is
        still sitting unread in ``conn`` - a deadlock until the client's timeout."""
        if channel.recv_stderr_ready():
            text = channel.recv_stderr(_BUFFER).decode(errors="replace").strip()
            if text:
                logger.debug(f"host {self.label}: docker dial-stdio: {text[:300]}")
        if channel.recv_ready():
            data = channel.recv(_BUFFER)
            if not data:
                return False
            conn.sendall(data)
            return True
        if channel.eof_received or channel.closed:
            return False
        time.sleep(0.005)  # readable with nothing to read yet: do not spin
        return True

    def _close_streams(self) -> None:
        with self._lock:
            pairs = list(self._open)
            spares, self._spares = self._spares, []
        for channel in spares:
            channel.close()
        for conn, channel in pairs:
            channel.close()
            try:
                conn.close()
            except OSError:
                pass


class DockerOverCommand(EngineForward):
    """Each connection is one run of ``argv`` with the connection as its stdin and
    stdout: the kernel carries the bytes, no pump thread. The command must pass its
    stdio through unbuffered (srun: ``--unbuffered``); it runs in its own session, so a
    Ctrl-C at the terminal reaches run.py only, which ends these itself."""

    def __init__(self, argv: list[str], label: str, env: dict[str, str] | None = None) -> None:
        self.argv = list(argv)
        self.env = env
        self._procs: list[subprocess.Popen] = []
        super().__init__(label)

    def _serve(self, conn: socket.socket) -> None:
        try:
            proc = subprocess.Popen(
                self.argv,
                stdin=conn.fileno(),
                stdout=conn.fileno(),
                stderr=subprocess.PIPE,
                env=self.env,
                start_new_session=True,
            )
        except OSError as exc:
            logger.warning(f"host {self.label}: cannot run {self.argv[0]} for the Docker engine: {exc.strerror or exc}")
            conn.close()
            return
        conn.close()  # the child holds it now
        with self._lock:
            self.channels_opened += 1
            self._procs = [p for p in self._procs if p.poll() is None] + [proc]
        _, err = proc.communicate()
        text = err.decode(errors="replace").strip()
        if proc.returncode not in (0, None) and text and not self._closed.is_set():
            logger.debug(f"host {self.label}: docker dial-stdio ended with status {proc.returncode}: {text[-300:]}")

    def _close_streams(self) -> None:
        with self._lock:
            procs = [p for p in self._procs if p.poll() is None]
        for proc in procs:
            proc.terminate()
        deadline = time.monotonic() + 5
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
