"""What the cpu vendor's serving engines share (``vllm.py``, ``llamacpp.py``): the Python that runs the
server (its own venv, named by a config key), an import check in that Python that fails in one line
naming the key, a free loopback port, the server's start through ``common/launch.py`` with its pid
written beside its log, and ``LaunchedEngine``, the engine around such a server. Not an engine (the
leading ``_`` keeps it out of the registry).
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from common.errors import ConfigError, one_line
from common.launch import LaunchedServer, last_log_line
from inference_engine.llm_base import ServingEngineBase
from tools.config import CaseConfig, origin_of

IMPORT_TIMEOUT_S = 300


def server_python(config: CaseConfig, key: str) -> str:
    """The interpreter named by ``key`` (a path), or this one when it is null."""
    value = config.get(key)
    if value is None:
        return sys.executable
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{origin_of(config, key)}: key '{key}' must be null or a path, got {value!r}")
    return value


def positive_int(config: CaseConfig, key: str, defaults: dict[str, int]) -> int:
    """``key``'s value (its default from ``defaults``), or one ConfigError naming it."""
    value = config.get(key, defaults[key])
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{origin_of(config, key)}: key '{key}' must be a positive integer, got {value!r}")
    return value


def module_version(python: str, module: str, label: str, config: CaseConfig, key: str, install_hint: str) -> str:
    """``module.__version__`` as ``python`` imports it; one ConfigError naming ``key`` when it cannot."""
    where = f"{origin_of(config, key)}: key '{key}'"
    try:
        done = subprocess.run(
            [python, "-c", f"import {module}; print({module}.__version__)"],
            capture_output=True,
            text=True,
            timeout=IMPORT_TIMEOUT_S,
            check=False,
        )
    except OSError as exc:
        raise ConfigError(f"{where} is {python!r}: cannot run it ({exc.strerror or exc}); {install_hint}") from None
    except subprocess.TimeoutExpired:
        raise ConfigError(f"{where} is {python!r}: 'import {module}' took over {IMPORT_TIMEOUT_S} s") from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        why = one_line(lines[-1] if lines else "no output")
        raise ConfigError(
            f"{where} is {python!r}: {label} cannot be imported there ({why}); "
            f"install {install_hint}, or name a Python that has it"
        )
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "unknown"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_server(server: LaunchedServer, pid_file: Path) -> float:
    """Start ``server``, write its pid to ``pid_file``, wait until it serves: seconds to ready. A server
    that is not ready (it exited, or ran out of time) is stopped before the EngineError goes on."""
    server.start()
    assert server.proc is not None  # started
    pid_file.write_text(f"{server.proc.pid}\n", encoding="utf-8")
    try:
        return server.wait_ready()
    except BaseException:
        server.stop()
        raise


def exit_line(server: LaunchedServer, what: str) -> str | None:
    """``what`` exited with its status and last log line, once the server has ended; else None."""
    status = server.exited()
    if status is None:
        return None
    return f"{what} exited with status {status}{last_log_line(server.log_path)}"


class LaunchedEngine(ServingEngineBase):
    """A serving engine whose server is a ``LaunchedServer``: its facts for result.json, its exit as the
    reason it can no longer serve, and its stop. A subclass sets ``server``, ``argv``, ``ready_s`` and
    ``label`` (the server's name in error lines) in its constructor, and ``version()``."""

    server: LaunchedServer
    argv: list[str]
    ready_s: float
    label: str = "the server"

    def served_by(self) -> dict:
        return {
            "url": self.url,
            "served_model": self.served_model,
            "server": self.version(),
            "command": self.argv,
            "ready_s": self.ready_s,
            "log": str(self.server.log_path),
        }

    def failure(self) -> str | None:
        return exit_line(self.server, self.label)

    def close(self) -> None:
        self.server.stop()
