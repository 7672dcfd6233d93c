"""What the serving engines of every vendor share (``cpu/vllm.py``, ``cpu/llamacpp.py``, ``nvidia/vllm.py``):
the Python that runs the server (its own venv, named by a config key), an import check in that Python
that fails in one line naming the key, a free loopback port, the server's start through
``common/launch.py`` with its pid written beside its log, ``LaunchedEngine``, the engine around such a
server, and ``VllmEngine``, vLLM's OpenAI server as an engine, whose vendors add only what their build
needs (the CPU build's KV-cache size, the CUDA build's GPU memory share). A declared base for engines
(``tools/plugins.py::PLUGIN_IMPORTS``), not an engine: it sits outside every vendor's folder.
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from common.errors import ConfigError, EngineError, one_line
from common.launch import LaunchedServer, last_log_line
from contract.config import CaseConfig, origin_of
from contract.llm_base import ServingEngineBase, read_hf_config

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
        why = lines[-1].strip() if lines else "no output"
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


# ---- vLLM's OpenAI server, whatever its build -------------------------------------------------
VLLM_MODEL_DIR_KEY = "resolved_model_dir"  # the checkpoint folder the case found or built (llama's weights.py)
VLLM_VERSION_KEY = "vllm_version"  # what preflight found, so that the engine step need not import vLLM again
VLLM_SERVER_LOG = "vllm_server.log"
VLLM_SERVER_PID = "vllm_server.pid"
VLLM_REQUEST_TIMEOUT_S = 60.0  # per socket operation: a greedy request of 32 tokens takes under a second here
VLLM_DEFAULTS = {"vllm_max_model_len": 1024, "vllm_ready_timeout_s": 600}  # every build's keys


def vllm_version(python: str, config: CaseConfig, install_hint: str) -> str:
    """vLLM's version as ``python`` imports it; one ConfigError naming ``vllm_python`` when it cannot."""
    return module_version(python, "vllm", "vLLM", config, "vllm_python", install_hint)


def vllm_python(config: CaseConfig) -> str:
    """The interpreter that runs the server: ``vllm_python``, or this one."""
    return server_python(config, "vllm_python")


def check_vllm_keys(config: CaseConfig, defaults: dict[str, int]) -> None:
    """A build's integer keys (``defaults``: every build's ``VLLM_DEFAULTS`` and its own), each a positive
    integer; one ConfigError naming the first that is not."""
    for key in defaults:
        positive_int(config, key, defaults)


def record_vllm_version(config: CaseConfig, install_hint: str) -> str:
    """A preflight's last word on vLLM: its version as ``vllm_python`` imports it, kept in the config
    (``VLLM_VERSION_KEY``) so that the engine step need not ask again; returns that interpreter."""
    python = vllm_python(config)
    config.extra[VLLM_VERSION_KEY] = vllm_version(python, config, install_hint)
    return python


class VllmEngine(LaunchedEngine):
    """vLLM's OpenAI-compatible server on the case's checkpoint folder, as a serving engine.

    The constructor starts ``PYTHON -m vllm.entrypoints.openai.api_server --model DIR …`` on a free
    loopback port through ``common/launch.py`` and waits until it serves; greedy tokens are asked of
    it as token ids (``prompt`` a list of ids, ``temperature: 0``, ``min_tokens`` = ``max_tokens``,
    ``ignore_eos``, ``return_token_ids``). A vendor's subclass names its build: ``SOURCE`` (its file,
    for error lines), ``BUILD`` (its name in ``version()``), ``INSTALL_HINT``, and what the build
    adds to the command line and the environment (``build_args``, ``build_env``)."""

    SOURCE = "contract/serving_base.py"
    BUILD = "vllm"
    INSTALL_HINT = "vllm"
    DEFAULTS: dict[str, int] = VLLM_DEFAULTS

    def build_args(self, config: CaseConfig) -> list[str]:
        return []

    def build_env(self, config: CaseConfig) -> dict[str, str]:
        return {}

    def dtype(self, config: CaseConfig) -> str:
        return "float32"

    def __init__(self, config: CaseConfig, onnx_path: str | None, model: Any) -> None:
        super().__init__(config, onnx_path, model)
        folder = config.get(VLLM_MODEL_DIR_KEY)
        if not folder:
            raise EngineError(
                f"{self.SOURCE}: serves an LLM case's checkpoint folder (config '{VLLM_MODEL_DIR_KEY}'), none set"
            )
        self.folder = Path(folder)
        self.vocab = int(read_hf_config(self.folder, self.SOURCE).get("vocab_size") or 0)
        self.python = vllm_python(config)
        self.vllm_version = config.get(VLLM_VERSION_KEY) or vllm_version(self.python, config, self.INSTALL_HINT)
        port = free_port()
        self.url = f"http://127.0.0.1:{port}/v1"
        self.served_model = str(config.case)
        self.served_dtype = self.dtype(config)
        self.argv = [
            self.python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.folder),
            "--served-model-name",
            self.served_model,
            "--dtype",
            self.served_dtype,
            "--max-model-len",
            str(positive_int(config, "vllm_max_model_len", self.DEFAULTS)),
            "--seed",
            str(int(config.seed)),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *self.build_args(config),
        ]
        env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **self.build_env(config)}
        log_dir = Path(config.log_dir)
        self.server = LaunchedServer(
            self.argv,
            self.url,
            log_dir / VLLM_SERVER_LOG,
            float(positive_int(config, "vllm_ready_timeout_s", self.DEFAULTS)),
            env=env,
            what=f"{self.SOURCE}: vLLM",
        )
        self.label = f"{self.SOURCE}: the vLLM server"
        self.ready_s = start_server(self.server, log_dir / VLLM_SERVER_PID)

    # ---- what the framework reads --------------------------------------------------------
    def version(self) -> str:
        return f"{self.BUILD} {self.vllm_version}"

    def compile_report(self) -> dict:
        dtype = self.served_dtype
        precision = {"float32": "FP32", "float16": "FP16", "bfloat16": "BF16"}.get(dtype, dtype.upper())
        return {"compile_precision": precision, "format": "vllm server", "folder": str(self.folder)}

    # ---- greedy tokens over HTTP ------------------------------------------------------------
    def _greedy(self, ids: list[int], n: int) -> list[int]:
        body = {
            "model": self.served_model,
            "prompt": ids,
            "max_tokens": n,
            "min_tokens": n,
            "temperature": 0.0,
            "ignore_eos": True,
            "return_token_ids": True,
        }
        request = urllib.request.Request(
            self.url + "/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(request, timeout=VLLM_REQUEST_TIMEOUT_S) as response:
                answer = json.loads(response.read())
            return [int(token) for token in answer["choices"][0]["token_ids"]]
        # http.client's HTTPException: an answer broken off (IncompleteRead, when the server was killed as it
        # answered: uncaught, the case fails as a bug with a traceback instead of naming the server's exit)
        except (
            urllib.error.URLError,
            http.client.HTTPException,
            OSError,
            ValueError,
            KeyError,
            IndexError,
            TypeError,
        ) as exc:
            if self.server.proc is not None:
                try:  # a server that was killed: its exit status, once the kernel has it
                    self.server.proc.wait(1.0)
                except subprocess.TimeoutExpired:
                    pass
            raise EngineError(
                self.failure() or f"{self.SOURCE}: a greedy completion at {self.url} failed: {one_line(exc)}"
            ) from None

    def generate(self, input_ids: Any, n: int) -> Any:
        import numpy as np

        rows = [self._greedy([int(t) for t in row], n) for row in np.asarray(input_ids)]
        if any(len(row) != n for row in rows):
            raise EngineError(f"{self.SOURCE}: the server returned {[len(r) for r in rows]} tokens, asked for {n} each")
        return np.asarray(rows, dtype=np.int64)
