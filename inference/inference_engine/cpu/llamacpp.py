"""llama.cpp's server (PyPI ``llama-cpp-python[server]``, built from source) as the cpu vendor's second
serving engine (``contract/llm_base.py``, ``ServingEngineBase``): chosen with
``compiler: llamacpp`` in the llama case's config, where vLLM's CPU build cannot run
(``_vllm_cpu_support.py`` says why: on x86-64 a CPU without AVX2) or to compare the two.

Export (step 4): the case's checkpoint (the random-weight Llama by default, a Hugging Face folder with
``weight_dir``) is converted to GGUF, fp32, by llama.cpp's own ``convert_hf_to_gguf.py`` from
``llamacpp_source``, run in ``llamacpp_python`` (``_gguf_convert.py``: the one exception it makes for a
tokenizer the converter does not list, and the vocabulary check in llama.cpp). The case caches the file
by content hash like every export (``benchmarks/llama/pytorch/export.py``: ``<cache_dir>/llama_gguf_<key>/``).

The engine step starts ``PYTHON -m llama_cpp.server --model X.gguf --model_alias CASE --n_ctx …
--n_threads … --seed … --interrupt_requests false --host 127.0.0.1 --port P`` through
``common/launch.py`` (its own process group, output in ``<log_dir>/llamacpp_server.log``, pid in
``llamacpp_server.pid``), waits until ``GET /v1/models`` answers, and ``close`` stops it (SIGTERM to its
group, SIGKILL after 10 s).

What llama-cpp-python's server (0.3.36) takes and gives, and what the engine does about it:
  prompt   a string (or a list of one string): token-id prompts are refused (HTTP 422). The load
           steps send the text of the prompt ids, cut until it tokenises to at most as many tokens
           (``prompt``), which the server tokenises again (its log's "prompt eval" lines say how many).
  eos      no ``ignore_eos``; ``min_tokens`` = ``max_tokens`` keeps the end-of-sequence token out
           (its ``MinTokensLogitsProcessor``), so every request generates its full length.
  greedy   ``temperature: 0`` selects the argmax, but after its default penalties (``repeat_penalty``
           1.1): the load steps send ``repeat_penalty: 1``.
  ids      the answer is text; no token ids. So the greedy check's (and FlagPerf's prefill pass's)
           tokens come from ``_llamacpp_greedy.py``: the same llama_cpp library and build, on the same
           GGUF, in one process started beside the server, token ids in and out, the argmax of the
           logits with the end-of-sequence ids excluded. It checks the converted model and llama.cpp's
           numerics against the PyTorch model; it does not see the server's HTTP layer.
  batching one request at a time (the server holds a lock around the model): streams beyond one wait
           their turn, so concurrency raises TTFT, not throughput. By default a new request interrupts
           the one streaming (it ends with ``[DONE]`` after a few tokens): ``--interrupt_requests false``.
  usage    a stream carries no ``usage``: output tokens are counted from the stream's events (one a
           token), input tokens are not counted.

In MODE docker the case runs in this engine's own image, ``docker_images/cpu/llamacpp/`` (``IMAGE``, read by
``contract/registry.py::engine_facts``: llama-cpp-python[server] built from its sdist in the image, with
the converter's source in ``/opt/venv/src/llama.cpp``), not the framework's ``docker_images/cpu/pytorch/``;
there ``llamacpp_python`` and ``llamacpp_source`` stay null (``configs/host_llamacpp_docker.yaml``).

Config keys (``configs/llama/configurations.yaml``):
  llamacpp_python           the Python that has llama_cpp (its own venv); null = this interpreter
  llamacpp_source           a llama.cpp source folder holding convert_hf_to_gguf.py and gguf-py/;
                            null = ``<llamacpp_python's venv>/src/llama.cpp``
  llamacpp_n_ctx            --n_ctx, the context (default 1024)
  llamacpp_threads          --n_threads and --n_threads_batch; 0 = every core (the server's own
                            default is half of them)
  llamacpp_ready_timeout_s  how long the server may take to serve (default 600; its start-up: docs/serving.md)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from common.errors import ConfigError, EngineError, one_line
from common.launch import STOP_GRACE_S, LaunchedServer
from contract.config import CaseConfig, origin_of
from contract.llm_base import eos_token_ids, read_hf_config
from contract.serving_base import (
    LaunchedEngine,
    free_port,
    module_version,
    positive_int,
    server_python,
    start_server,
)

_SOURCE = "inference_engine/cpu/llamacpp.py"
IMAGE = "llamacpp"  # docker_images/cpu/llamacpp/: the case runs in this engine's image (contract/registry.py)
HERE = Path(__file__).resolve().parent
CONVERT_SCRIPT = HERE / "_gguf_convert.py"
GREEDY_SCRIPT = HERE / "_llamacpp_greedy.py"
INSTALL_HINT = (
    "llama-cpp-python[server]==0.3.36 (an sdist: built with cmake, about 15 min on 2 shared cores; docs/serving.md, "
    "'llama.cpp's server')"
)
MODEL_DIR_KEY = "resolved_model_dir"  # the checkpoint folder the case found or built
VERSION_KEY = "llamacpp_version"  # what preflight found; part of the GGUF's cache key
SERVER_LOG = "llamacpp_server.log"
SERVER_PID = "llamacpp_server.pid"
GREEDY_LOG = "llamacpp_greedy.log"
CONVERT_TIMEOUT_S = 1800
REQUEST_TIMEOUT_S = 120.0  # one greedy answer of the probe: a few hundred ms here
PROMPT_CUTS = 16  # re-tokenise and cut at most this often (2.8 times for 128 random ids, on average)
DEFAULTS = {"llamacpp_n_ctx": 1024, "llamacpp_ready_timeout_s": 600}


def llamacpp_python(config: CaseConfig) -> str:
    return server_python(config, "llamacpp_python")


def llamacpp_source(config: CaseConfig, python: str) -> Path:
    """The llama.cpp source folder with the converter (``llamacpp_source``, or the venv's ``src/llama.cpp``)."""
    value = config.get("llamacpp_source")
    if value is None:
        prefix = Path(sys.prefix) if python == sys.executable else Path(python).parent.parent
        return prefix / "src" / "llama.cpp"
    if not isinstance(value, str) or not value:
        raise ConfigError(
            f"{origin_of(config, 'llamacpp_source')}: key 'llamacpp_source' must be null or a folder, got {value!r}"
        )
    return Path(value)


def threads(config: CaseConfig) -> int:
    """``llamacpp_threads`` (checked by the framework as every ``*_threads`` key), 0 = every core."""
    return int(config.get("llamacpp_threads") or 0) or os.cpu_count() or 1


def preflight(config: CaseConfig) -> None:
    for key in DEFAULTS:
        positive_int(config, key, DEFAULTS)
    python = llamacpp_python(config)
    config.extra[VERSION_KEY] = module_version(
        python, "llama_cpp", "llama_cpp (llama-cpp-python)", config, "llamacpp_python", INSTALL_HINT
    )
    source = llamacpp_source(config, python)
    if not (source / "convert_hf_to_gguf.py").is_file() or not (source / "gguf-py").is_dir():
        key = "llamacpp_source"
        where = origin_of(config, key) if config.get(key) is not None else "default (llamacpp_python's venv)"
        raise ConfigError(
            f"{where}: key '{key}' is {str(source)!r}: no convert_hf_to_gguf.py and gguf-py/ there (a llama.cpp "
            "source folder: llama-cpp-python's sdist has one in vendor/llama.cpp)"
        )


class InferModel(LaunchedEngine):
    export_format = "gguf"
    entry_file = "model.gguf"
    build_keys = (VERSION_KEY, "llamacpp_source")

    @classmethod
    def build(cls, source_dir: Path, out_dir: Path, config: CaseConfig) -> None:
        python = llamacpp_python(config)
        argv = [python, str(CONVERT_SCRIPT), str(llamacpp_source(config, python)), str(source_dir)]
        argv.append(str(Path(out_dir) / cls.entry_file))  # type: ignore[operator]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=CONVERT_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EngineError(f"{_SOURCE}: the GGUF conversion did not run: {one_line(exc)}") from None
        (Path(out_dir) / "convert.log").write_text(done.stdout + done.stderr, encoding="utf-8")
        if done.returncode != 0:
            lines = [line for line in done.stderr.splitlines() if line.strip()]
            why = one_line(lines[-1] if lines else "no output")
            raise EngineError(f"{_SOURCE}: the GGUF conversion of {source_dir} failed: {why}")

    def __init__(self, config: CaseConfig, onnx_path: str | None, model: Any) -> None:
        super().__init__(config, onnx_path, model)
        folder = config.get(MODEL_DIR_KEY)
        if not folder or not onnx_path:
            raise EngineError(f"{_SOURCE}: serves the case's checkpoint as GGUF (export step), none was built")
        self.folder, self.gguf = Path(folder), Path(onnx_path)
        hf = read_hf_config(self.folder, _SOURCE)
        self.vocab, self.eos_ids = int(hf.get("vocab_size") or 0), list(eos_token_ids(hf))
        self.python = llamacpp_python(config)
        self.llamacpp_version = config.get(VERSION_KEY) or "unknown"
        self.n_ctx = positive_int(config, "llamacpp_n_ctx", DEFAULTS)
        self.threads = threads(config)
        self.seed = int(config.seed)
        port = free_port()
        self.url = f"http://127.0.0.1:{port}/v1"
        self.served_model = str(config.case)
        self.argv = [self.python, "-m", "llama_cpp.server", "--model", str(self.gguf)]
        self.argv += ["--model_alias", self.served_model, "--n_ctx", str(self.n_ctx)]
        self.argv += ["--n_threads", str(self.threads), "--n_threads_batch", str(self.threads)]
        self.argv += ["--seed", str(self.seed), "--interrupt_requests", "false"]  # else a request cuts the one before
        self.argv += ["--host", "127.0.0.1", "--port", str(port)]
        log_dir = Path(config.log_dir)
        self.log_dir = log_dir
        self.server = LaunchedServer(
            self.argv,
            self.url,
            log_dir / SERVER_LOG,
            float(positive_int(config, "llamacpp_ready_timeout_s", DEFAULTS)),
            what=f"{_SOURCE}: llama.cpp",
        )
        self.label = f"{_SOURCE}: the llama.cpp server"
        self.greedy_proc: subprocess.Popen | None = None
        self._tokenizer: Any = None
        self.ready_s = start_server(self.server, log_dir / SERVER_PID)

    # ---- what the framework reads --------------------------------------------------------
    def version(self) -> str:
        return f"llama-cpp-python {self.llamacpp_version}"

    def compile_report(self) -> dict:
        return {"compile_precision": "FP32", "format": "gguf (llama.cpp server)", "file": str(self.gguf)}

    def served_by(self) -> dict:
        return {
            **super().served_by(),
            "greedy_tokens_from": "llama_cpp.Llama on the same GGUF (the server answers text, not ids)",
        }

    def close(self) -> None:
        try:
            self._stop_greedy()
        finally:
            super().close()

    # ---- the requests of the load steps --------------------------------------------------------
    def prompt(self, ids: list[int]) -> Any:
        """The server takes strings only: the text of ``ids`` (the checkpoint's tokenizer, whose ids llama.cpp's
        vocabulary reproduces: ``_gguf_convert.py`` checks it), cut until it tokenises to at most ``len(ids)``
        tokens. The plain text is longer: a random id that is a lone byte of a UTF-8 sequence decodes to
        U+FFFD, three tokens again, and 128 random ids of the random Llama re-tokenise to about 174."""
        if self._tokenizer is None:
            from transformers import AutoTokenizer
            from transformers.utils import logging as hf_logging

            hf_logging.set_verbosity_error()
            self._tokenizer = AutoTokenizer.from_pretrained(str(self.folder), local_files_only=True)
        text, n = self._tokenizer.decode(ids), len(ids)
        for _ in range(PROMPT_CUTS):
            encoded = self._tokenizer.encode(text, add_special_tokens=False)
            if len(encoded) <= n:
                return text
            text = self._tokenizer.decode(encoded[:n])
        while text and len(self._tokenizer.encode(text, add_special_tokens=False)) > n:
            text = text[:-1]  # a cut that keeps splitting a character: drop characters instead
        return text

    def request_extra(self, max_tokens: int) -> dict:
        return {"temperature": 0.0, "repeat_penalty": 1.0, "min_tokens": max_tokens}

    # ---- greedy token ids: llama.cpp on the same GGUF, ids in and out ----------------------------
    def _greedy_process(self) -> subprocess.Popen:
        if self.greedy_proc is None:
            argv = [self.python, str(GREEDY_SCRIPT), str(self.gguf), str(self.n_ctx), str(self.seed), str(self.threads)]
            with open(self.log_dir / GREEDY_LOG, "ab") as log:
                try:
                    self.greedy_proc = subprocess.Popen(
                        argv,
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=log,
                        text=True,
                        start_new_session=True,
                    )
                except OSError as exc:
                    raise EngineError(f"{_SOURCE}: cannot start {argv[0]!r} ({exc.strerror or exc})") from None
            self._answer()  # its "ready" line
        return self.greedy_proc

    def _answer(self) -> dict:
        assert self.greedy_proc is not None and self.greedy_proc.stdout is not None
        line = self.greedy_proc.stdout.readline()
        try:
            answer = json.loads(line)
        except ValueError:
            status = self.greedy_proc.poll()
            raise EngineError(
                f"{_SOURCE}: llama.cpp's greedy process ({GREEDY_SCRIPT.name}) "
                + (f"exited with status {status}" if status is not None else f"answered {line[:80]!r}")
                + f"; see {self.log_dir / GREEDY_LOG}"
            ) from None
        if "error" in answer:
            raise EngineError(f"{_SOURCE}: llama.cpp's greedy process: {answer['error']}")
        return answer

    def _stop_greedy(self) -> None:
        proc, self.greedy_proc = self.greedy_proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            try:
                proc.stdin.close()
            except OSError:
                pass
        try:
            proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def generate(self, input_ids: Any, n: int) -> Any:
        import numpy as np

        proc = self._greedy_process()
        assert proc.stdin is not None
        rows = []
        for row in np.asarray(input_ids):
            request = {"ids": [int(t) for t in row], "n": int(n), "banned": self.eos_ids}
            try:
                proc.stdin.write(json.dumps(request) + "\n")
                proc.stdin.flush()
            except OSError:
                pass  # it exited: _answer says how
            rows.append([int(t) for t in self._answer()["tokens"]])
        if any(len(row) != n for row in rows):
            raise EngineError(f"{_SOURCE}: llama.cpp returned {[len(r) for r in rows]} tokens, asked for {n} each")
        return np.asarray(rows, dtype=np.int64)
