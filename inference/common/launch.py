"""Start a server, wait until it serves, and stop it with nothing left running.

``run.py --endpoint URL --served-model NAME --launch "python -m vllm.entrypoints.openai.api_server …"``
starts the command (split like a shell would, never run by one) in its own process group, its
output in a log file, and waits until ``GET URL/models`` answers with a model list. The
benchmark then runs as against any endpoint, and the server is stopped afterwards whatever
happened: SIGTERM to its whole group, then SIGKILL after ``STOP_GRACE_S``. A server that exits
before it is ready, or is not ready within the time allowed, is an engine error (exit 4) naming
its status or the time and the last line of its log.

No handler runs when the launcher is killed by SIGKILL, so every server is started through
``common/server_guard.py``, which becomes the server (same pid, group and exit status) and leaves
a watchdog behind: when the launcher ends, however it ends, the server's whole group is stopped.

Shared (``common/``) because both sides start servers: ``run.py --launch`` (``tools/serving/cli.py``)
and a serving engine's engine step (``inference_engine/cpu/vllm.py``), which may not import ``tools/``.
"""

from __future__ import annotations

import http.client
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable

from common.errors import ConfigError, EngineError
from common.lifetime import PARENT_ENV

STOP_GRACE_S = 10.0  # common/server_guard.py's GRACE_S too
GUARD = Path(__file__).resolve().with_name("server_guard.py")  # run as a file: any cwd, any sys.path
POLL_S = 0.5


def last_log_line(path: Path) -> str:
    """A server log's last line as ``; last log line: …``, or ``""`` when it has none."""
    try:
        lines = [
            line.strip() for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()
        ]
    except OSError:
        return ""
    return f"; last log line: {lines[-1][:200]}" if lines else ""


MODEL_LIST_BYTES = 16 << 20  # as the client reads it (tools/serving/options.py): a server may serve many models


def serving(url: str, timeout_s: float = 2.0) -> bool:
    """Whether ``url``/models answers as an OpenAI-compatible server: a model list, or a refusal for want of
    an API key (401/403: vLLM's ``--api-key``; the client then sends its own and names a wrong one). No
    proxy, as the client."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url.rstrip("/") + "/models", timeout=timeout_s) as response:
            return isinstance(json.loads(response.read(MODEL_LIST_BYTES)).get("data"), list)
    except urllib.error.HTTPError as exc:
        return exc.code in (401, 403)
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError, AttributeError, RecursionError):
        return False


class LaunchedServer:
    """``command`` is a string (split like a shell would) or an argument list; ``env`` is added to
    this process's environment; ``what`` names the server in every error line (the option or the
    engine that launched it)."""

    def __init__(
        self,
        command: str | list[str],
        url: str,
        log_path: Path,
        ready_timeout_s: float = 600.0,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        what: str = "--launch",
    ) -> None:
        self.what = what
        if isinstance(command, list):
            self.argv = list(command)
        else:
            try:
                self.argv = shlex.split(command)
            except ValueError as exc:
                raise ConfigError(f"{what}: {command!r} does not split into arguments ({exc})") from None
        if not self.argv:
            raise ConfigError(f"{what}: an empty command")
        self.env = dict(env or {})
        self.url, self.log_path, self.ready_timeout_s, self.cwd = url, Path(log_path), ready_timeout_s, cwd
        # The readiness wait's clock and sleep: an instance's own attributes, so a test may replace them.
        self.clock: Callable[[], float] = time.monotonic
        self.sleep: Callable[[float], None] = time.sleep
        self.proc: subprocess.Popen | None = None
        self.ready_s: float | None = None

    def __enter__(self) -> "LaunchedServer":
        self.start()
        try:
            self.ready_s = self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        """Start the server (through ``GUARD``); an EngineError naming the command when it cannot be started."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, **self.env, **{PARENT_ENV: str(os.getpid())})
        report, written = os.pipe()  # the guard's word on the exec: its reason, or nothing once the server runs
        guarded = [sys.executable, "-I", str(GUARD), str(os.getpid()), str(written), "--", *self.argv]
        try:
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    guarded,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=self.cwd,
                    env=env,
                    start_new_session=True,
                    pass_fds=(written,),
                )
        except OSError as exc:  # the log, the folder (cwd) or this Python
            os.close(report)
            raise EngineError(f"{self.what}: cannot start {self.argv[0]!r} ({exc.strerror or exc})") from None
        finally:
            os.close(written)
        with os.fdopen(report, "rb") as words:
            reason = words.read().decode(errors="replace")
        if reason:
            self.proc.wait()
            raise EngineError(f"{self.what}: cannot start {self.argv[0]!r} ({reason})")

    def wait_ready(self) -> float:
        """Seconds until the server answered; EngineError when it exited or ran out of time."""
        assert self.proc is not None  # started by __enter__
        started = self.clock()
        while True:
            status = self.proc.poll()
            if status is not None:
                raise EngineError(
                    f"{self.what}: the server exited with status {status} before it was ready at "
                    f"{self.url}{last_log_line(self.log_path)}"
                )
            if serving(self.url):
                return self.clock() - started
            if self.clock() - started > self.ready_timeout_s:
                raise EngineError(
                    f"{self.what}: the server was not ready at {self.url} after "
                    f"{self.ready_timeout_s:g} s{last_log_line(self.log_path)}"
                )
            self.sleep(POLL_S)

    def exited(self) -> int | None:
        """The server's exit status once it has ended (killed: minus the signal), else None."""
        return None if self.proc is None else self.proc.poll()

    def stop(self) -> int | None:
        """SIGTERM to the server's process group, SIGKILL after the grace; its exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        try:  # the group's other members (vLLM's engine core) too, whatever the leader did
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return self.proc.wait()
