"""``run.py --endpoint http://HOST:PORT/v1 --served-model NAME [options]``: benchmark a server the
user already runs, with the load modes, workloads, SLO and capacity search of ``tools/serving``.

Writes ``<results>/run<id>/`` at once when it is done (nothing half-written): ``serving/result.json``
(every step's figures, the server's own /metrics figures, the capacity search, the Pareto points, each
request's record), ``serving/report.html`` (``tools/serving/plots.py``), ``serving/requests.jsonl`` and
``serving/steps.csv`` (``tools/serving/exports.py``) and
``summary.json`` / ``summary.md`` (one row per step). Exit status: 0 done (failed requests are
counted in the rows, not fatal); 2 bad option (an SLO bound below 0, a concurrency of 0, a model
the server does not serve, a URL or --output-dir that cannot work, a 401/403 "authentication"); 3
a prompt file or trace that is not valid JSON/JSONL, or with --strict a step INVALID or not judged
(written first); 4 the server does not speak the OpenAI API, or a --launch server exited during a
step (written first, the step's verdict names it); 5 the endpoint is unreachable; 130 interrupted
(SIGINT), 143 terminated (SIGTERM).

The same options come from host.yaml's ``ENDPOINT`` mapping (``run.py --config host.yaml``): each
entry is an option's name with underscores (``served_model``, ``request_rate``), ``url`` for
``--endpoint``; a list is a comma list (``concurrency: [1, 2, 4]``; ``launch``: the command's
words), a mapping is JSON (``slo``, ``extra_body``). ``config_argv`` turns the mapping into this
command line, so each option is parsed and checked here once; an error then names host.yaml and
``ENDPOINT.<entry>`` instead of the flag.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import math
import os
import re
import secrets
import shlex
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable

from common.errors import (
    ConfigError,
    DataError,
    EngineError,
    HostError,
    InferPerfError,
    StorageError,
    one_line,
    shown,
)
from common.files import atomic_dir, json_text
from tools.serving import capacity as capacity_search
from tools.serving import exports, plots, workload
from tools.serving import metrics as server_metrics
from tools.serving.client import scrub
from tools.serving.figures import DEFAULT_MAX_ERROR_RATE, DEFAULT_TIMESLICES, SLO, StepStop, step_figures
from tools.serving.load import ARRIVALS, Endpoint, Load, run_load, sessions_of

DEFAULT_REQUESTS = 64


class _OneLineParser(argparse.ArgumentParser):
    """host.yaml's ENDPOINT: a bad option is a ConfigError (one line), not argparse's usage and exit."""

    def error(self, message: str):  # one line, exit 2 (argparse prints the usage and exits)
        raise ConfigError(message)


def parse_args(argv: list[str], one_line_errors: bool = False) -> argparse.Namespace:
    return _parser(one_line_errors).parse_args(argv)


def _parser(one_line_errors: bool = False) -> argparse.ArgumentParser:
    kind = _OneLineParser if one_line_errors else argparse.ArgumentParser
    p = kind(prog="run.py --endpoint", description=__doc__.split("\n\n")[0])
    p.add_argument("--endpoint", required=True, help="the server's OpenAI base URL, http://HOST:PORT/v1")
    p.add_argument("--served-model", required=True, help="the model name the server serves (GET /v1/models)")
    p.add_argument(
        "--api", choices=("completions", "chat"), default=None, help="default completions (chat with --multi-turn)"
    )
    p.add_argument(
        "--tokenizer",
        default=None,
        help="a Hugging Face tokenizer folder: count tokens with it (else the server's usage)",
    )
    p.add_argument(
        "--count-tokens",
        choices=("tokenizer", "usage"),
        default="tokenizer",
        help="with --tokenizer: count with it (default) or with the server's usage",
    )
    p.add_argument(
        "--concurrency",
        default=None,
        help="closed-loop streams; a comma list sweeps (1,2,4); with --request-rate, both sweeps run",
    )
    p.add_argument("--request-rate", default=None, help="requests/s (inf: all at once); a comma list sweeps")
    p.add_argument("--arrival", choices=ARRIVALS, default="poisson")
    p.add_argument("--burstiness", type=float, default=1.0, help="gamma arrivals' shape (1 = Poisson; < 1 burstier)")
    p.add_argument("--max-concurrency", type=int, default=None, help="cap a request rate's requests in flight")
    p.add_argument(
        "--num-requests", type=int, default=DEFAULT_REQUESTS, help="requests per step (the minimum, with --precision)"
    )
    p.add_argument("--warmup", type=int, default=2, help="requests before each step, not counted")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--input-len", default="128", help="N, uniform:MIN:MAX or normal:MEAN:STD (synthetic prompts)")
    p.add_argument(
        "--output-len", default=None, help="as --input-len (default 128, or the prompt file's reply lengths)"
    )
    p.add_argument("--prompt-file", default=None, help="ShareGPT JSON or JSONL of prompts")
    p.add_argument("--shared-prefix", default=None, help="GROUPS:PREFIX_LEN: requests share one of GROUPS prefixes")
    p.add_argument(
        "--multi-turn",
        type=int,
        default=None,
        help="turns per conversation (synthetic, or the prompt file's conversations)",
    )
    p.add_argument("--trace", default=None, help="JSONL trace with timestamp (ms), input_length, output_length")
    p.add_argument("--slo", default=None, help="ttft_ms=200,tpot_ms=50,e2e_ms=5000,percentile=90 (or a JSON object)")
    p.add_argument(
        "--capacity",
        default=None,
        help="concurrency:LOW:HIGH or rate:LOW:HIGH: bisect for the largest load meeting --slo",
    )
    p.add_argument(
        "--precision",
        type=float,
        default=None,
        help="measure each step until requests/s and output tokens/s are within ±this",
    )
    p.add_argument("--max-duration-s", type=float, default=300.0)
    p.add_argument("--stall-timeout-s", type=float, default=30.0, help="no byte for this long mid-request: a stall")
    p.add_argument("--request-timeout-s", type=float, default=600.0)
    p.add_argument("--extra-body", default='{"ignore_eos": true}', help="JSON merged into every request body")
    p.add_argument("--output-dir", default=None, help="where run<id>/ goes (default inference/result)")
    p.add_argument(
        "--launch",
        default=None,
        help="start this server command first (no shell), wait until --endpoint serves, stop it after",
    )
    p.add_argument(
        "--launch-timeout-s", type=float, default=600.0, help="how long --launch's server may take to be ready"
    )
    p.add_argument(
        "--launch-log", default=None, help="the launched server's output (default <results>/launch-<time>.log)"
    )
    p.add_argument(
        "--api-key",
        default=None,
        help="sent as 'Authorization: Bearer KEY' (default: the OPENAI_API_KEY environment variable); never written",
    )
    p.add_argument(
        "--max-error-rate",
        type=float,
        default=DEFAULT_MAX_ERROR_RATE,
        help="a step whose share of failed requests is above this is INVALID (default 0.01)",
    )
    p.add_argument(
        "--strict", action="store_true", help="exit 3 when a step is INVALID or left a check not judged (as run.py)"
    )
    p.add_argument(
        "--where",
        default=None,
        help="where the client ran relative to the server (same host, another host, ...); recorded",
    )
    p.add_argument(
        "--metrics-url",
        default=None,
        help="the server's Prometheus metrics (default: the endpoint's origin + /metrics; 'off': not scraped)",
    )
    p.add_argument(
        "--metrics-interval-s",
        type=float,
        default=server_metrics.DEFAULT_INTERVAL_S,
        help="how often /metrics is sampled during a step (default 1; 0: only before and after it)",
    )
    p.add_argument(
        "--timeslices",
        type=int,
        default=DEFAULT_TIMESLICES,
        help="cut each step into this many equal slices, each with its tokens/s and TTFT (default 5)",
    )
    return p


# ---- host.yaml's ENDPOINT: the same options as a mapping ---------------------------------------
CONFIG_KEY = "ENDPOINT"
# the run folder is host.yaml's FLAGPERF_LOG_PATH; a key belongs in OPENAI_API_KEY, not in a config file
NOT_IN_CONFIG = ("help", "output_dir", "api_key")
PATH_ENTRIES = ("prompt_file", "trace", "tokenizer", "launch_log")  # relative: to host.yaml's folder base


FLAGS = ("strict",)


def config_entries() -> dict[str, str]:
    """ENDPOINT's entries -> the option each stands for (the parser's own options: one definition)."""
    return {
        "url" if action.dest == "endpoint" else action.dest: action.option_strings[-1]
        for action in _parser()._actions
        if action.option_strings and action.dest not in NOT_IN_CONFIG
    }


def config_argv(entries: Any, origin: str, output_dir: Path, base: Path) -> list[str]:
    """host.yaml's ENDPOINT mapping as this command line (module docstring), its results in
    ``output_dir``, a relative path (``PATH_ENTRIES``) relative to ``base`` as every host.yaml
    path is; ConfigError naming ``origin`` and the entry for what no option can take."""
    if not isinstance(entries, dict) or not entries:
        raise ConfigError(f"{origin}: key '{CONFIG_KEY}' must map option names to values, e.g. url and served_model")
    known = config_entries()
    argv: list[str] = []
    for name, value in entries.items():
        if name not in known:
            raise ConfigError(
                f"{origin}: key '{CONFIG_KEY}': unknown entry {shown(name)} (known: {', '.join(sorted(known))})"
            )
        if value is None or value is False:
            continue
        if value is True and name in FLAGS:  # a flag that takes no value (strict: true)
            argv.append(known[name])
            continue
        if isinstance(value, dict):
            try:
                text = json.dumps(value)
            except (TypeError, ValueError):
                raise ConfigError(f"{origin}: key '{CONFIG_KEY}.{name}': {shown(value)} is not JSON") from None
        elif isinstance(value, list):
            if not all(isinstance(item, (str, int, float)) for item in value):
                raise ConfigError(f"{origin}: key '{CONFIG_KEY}.{name}': {shown(value)} must be a list of values")
            text = shlex.join(map(str, value)) if name == "launch" else ",".join(map(str, value))
        else:
            text = str(value)
        if name in PATH_ENTRIES:
            text = str(base / Path(text).expanduser())  # an absolute path stays itself
        argv += [known[name], text]
    return argv + ["--output-dir", str(output_dir)]


def in_config_terms(message: str, origin: str) -> str:
    """An option's error said in host.yaml's terms: ``--request-rate`` becomes ``ENDPOINT.request_rate``."""
    options = {option: name for name, option in config_entries().items()}

    def entry(match: re.Match) -> str:
        name = options.get(match.group(0))
        return match.group(0) if name is None else f"{CONFIG_KEY}.{name}"

    return f"{origin}: " + re.sub(r"--[a-z][a-z-]*", entry, message)


def _numbers(text: str | None, key: str, kind: type) -> list[Any]:
    if text is None:
        return []
    out = []
    for part in text.split(","):
        try:
            value = float(part) if kind is float else int(part)
        except ValueError:
            raise ConfigError(f"{key}: {shown(part)} is not a{'n integer' if kind is int else ' number'}") from None
        if kind is float and not (value > 0):
            raise ConfigError(f"{key}: {shown(part)} must be positive (or inf)")
        if kind is int and value < 1:
            raise ConfigError(f"{key}: {shown(part)} must be a positive integer")
        out.append(value)
    return out


def parse_slo(text: str | None) -> SLO | None:
    if text is None:
        return None
    if text.strip().startswith("{"):
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            raise ConfigError(f"--slo: {shown(text)} is not a JSON object") from None
    else:
        data = {}
        for part in text.split(","):
            name, sep, value = part.partition("=")
            try:
                data[name.strip()] = float(value)
            except ValueError:
                raise ConfigError(f"--slo: {shown(part)} is not NAME=NUMBER") from None
            if not sep:
                raise ConfigError(f"--slo: {shown(part)} is not NAME=NUMBER")
    return SLO.parse(data, "--slo")


MAX_MODELS_BYTES = 16 << 20  # a model list larger than this is refused (one line), not read without end
MODELS_DEADLINE_S = 30.0  # the whole model list, however slowly it comes


def check_url(url: str, key: str = "--endpoint") -> tuple[str, int]:
    """The host and port of an http(s) URL; ConfigError, before any connection, for a URL that
    urllib or aiohttp would refuse or silently read otherwise (a bad IPv6 literal, a port over
    65535, whitespace, credentials that result.json would carry, a query)."""
    import ipaddress
    from urllib.parse import urlsplit

    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"{key}: {shown(url)} is not an http:// or https:// URL")
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        raise ConfigError(f"{key}: {shown(url)} holds whitespace or a control character")
    try:
        parts = urlsplit(url)
        port, host = parts.port, parts.hostname
    except ValueError as exc:
        raise ConfigError(f"{key}: {shown(url)} is not a valid URL ({exc})") from None
    if not host:
        raise ConfigError(f"{key}: {shown(url)} names no host")
    if "[" in parts.netloc:
        try:
            ipaddress.IPv6Address(host.split("%")[0])
        except ValueError:
            raise ConfigError(f"{key}: {shown(url)}: {shown(host)} is not an IPv6 address") from None
    else:
        try:
            host.encode("idna")
        except UnicodeError as exc:
            raise ConfigError(f"{key}: {shown(url)}: the host is not a valid name ({exc})") from None
    if port == 0:
        raise ConfigError(f"{key}: {shown(url)}: port 0 is no server's port")
    if parts.username is not None or parts.password is not None:
        raise ConfigError(f"{key}: credentials in the URL would be written with the results; use --api-key")
    if parts.query or parts.fragment:
        raise ConfigError(f"{key}: {shown(url)} has a query or fragment; give the base URL (…/v1)")
    return host, port if port is not None else (443 if parts.scheme == "https" else 80)


def api_key(args: argparse.Namespace) -> str | None:
    """--api-key, else OPENAI_API_KEY (as OpenAI's own client); None when neither is set."""
    return args.api_key or os.environ.get("OPENAI_API_KEY") or None


def _read_models(response: Any, probe: str, url: str) -> bytes:
    """The model list's bytes: at most MAX_MODELS_BYTES, within MODELS_DEADLINE_S."""
    deadline = time.monotonic() + MODELS_DEADLINE_S
    chunks: list[bytes] = []
    size = 0
    while True:
        piece = response.read1(1 << 16)
        if not piece:
            return b"".join(chunks)
        chunks.append(piece)
        size += len(piece)
        if size > MAX_MODELS_BYTES:
            raise EngineError(f"--endpoint {url}: GET {probe} sent over {MAX_MODELS_BYTES >> 20} MiB of model list")
        if time.monotonic() > deadline:
            raise EngineError(f"--endpoint {url}: GET {probe} took over {MODELS_DEADLINE_S:g} s to send its model list")


def check_endpoint(url: str, model: str, timeout_s: float = 10.0, key: str | None = None) -> list[str]:
    """GET /models: HostError when unreachable, EngineError when it is not the OpenAI API,
    ConfigError when ``model`` is not among what it serves or the server refuses ``key``
    (401/403: "authentication"). Returns the served names."""
    check_url(url)
    probe = url.rstrip("/") + "/models"
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({})
        )  # as the client: no proxy from the environment
        with opener.open(urllib.request.Request(probe, headers=headers), timeout=timeout_s) as response:
            kind = response.headers.get("Content-Type", "")
            raw = _read_models(response, probe, url)
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            given = "the key given was refused" if key else "no key was given: --api-key or OPENAI_API_KEY"
            raise ConfigError(
                f"--endpoint {url}: authentication failed (GET {probe} answered HTTP {exc.code}; {given})"
            ) from None
        hint = "; the OpenAI routes usually sit under /v1" if not url.rstrip("/").endswith("/v1") else ""
        raise EngineError(
            f"--endpoint {url}: not an OpenAI-compatible server (GET {probe} answered HTTP {exc.code}{hint})"
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = scrub(str(getattr(exc, "reason", exc)), key)
        raise HostError(f"--endpoint {url}: unreachable ({reason})") from None
    except http.client.HTTPException as exc:  # something answered, not in HTTP (an SSH port's banner)
        said = scrub(str(exc)[:80], key)
        raise EngineError(
            f"--endpoint {url}: not an OpenAI-compatible server (GET {probe}: {type(exc).__name__} {said!r})"
        ) from None
    except ValueError as exc:  # a URL urllib refuses that check_url let through
        raise ConfigError(f"--endpoint {url}: {exc}") from None
    try:
        data = json.loads(raw)
        names = [str(item["id"]) for item in data["data"]]
    except (ValueError, KeyError, TypeError, RecursionError):
        raise EngineError(
            f"--endpoint {url}: not an OpenAI-compatible server (GET {probe} gave no model list; Content-Type {kind!r})"
        ) from None
    if model not in names:
        shown_names = ", ".join(map(repr, names[:20])) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
        raise ConfigError(f"--served-model {model!r}: the server at {url} serves {shown_names or 'no model'}")
    return names


def check_output_dir(root: Path, key: str = "--output-dir") -> None:
    """ConfigError, before any request, when ``root`` cannot hold the run: a file, under a file, or
    not writable (the requests would be sent and their results lost)."""
    path = root
    while not path.exists():
        if path.parent == path:
            return
        path = path.parent
    if not path.is_dir():
        raise ConfigError(f"{key}: {path} is a file, not a folder: the results could not be written there")
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"{key}: {path} is not writable: the results could not be written there")


def check_port_free(url: str) -> None:
    """--launch: ConfigError when something already accepts connections at the URL's host and port:
    the benchmark would measure that server, not the launched one."""
    import socket

    host, port = check_url(url)
    try:
        with socket.create_connection((host, port), timeout=2.0):
            pass
    except OSError:
        return
    raise ConfigError(
        f"--launch: {host}:{port} already accepts connections (another server): it, not the launched one, "
        "would be measured; stop it or give --endpoint another port"
    )


def where(url: str) -> str:
    """Where the client ran relative to the server, as far as the URL tells (``--where`` says more)."""
    import ipaddress
    from urllib.parse import urlsplit

    host = urlsplit(url).hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    return "same host (loopback)" if loopback else f"another host ({host}) unless --where says otherwise"


def load_tokenizer(path: str | None) -> Any:
    if path is None:
        return None
    if not Path(path, "tokenizer.json").is_file() and not Path(path, "tokenizer_config.json").is_file():
        raise ConfigError(f"--tokenizer: {path} holds no tokenizer (tokenizer.json or tokenizer_config.json)")
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - any loader failure is the folder's
        raise ConfigError(f"--tokenizer: {path}: {one_line(exc)}") from None


class Plan:
    """The options, checked, and what they make: the loads, the workload, the SLO."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        concurrency = _numbers(args.concurrency, "--concurrency", int)
        rates = _numbers(args.request_rate, "--request-rate", float)
        if args.max_concurrency is not None and args.max_concurrency < 1:
            raise ConfigError(f"--max-concurrency: {args.max_concurrency} must be a positive integer")
        for key, value in (("--num-requests", args.num_requests),):
            if value < 1:
                raise ConfigError(f"{key}: {value} must be a positive integer")
        if args.warmup < 0:
            raise ConfigError(f"--warmup: {args.warmup} must be >= 0")
        if args.precision is not None and not 0 < args.precision < 1:
            raise ConfigError(f"--precision: {args.precision} must be a share in (0, 1), e.g. 0.05")
        timeouts = (
            ("--stall-timeout-s", args.stall_timeout_s),
            ("--request-timeout-s", args.request_timeout_s),
            ("--max-duration-s", args.max_duration_s),
        )
        for key, value in timeouts:
            if not value > 0:
                raise ConfigError(f"{key}: {value} must be positive")
        if not 0 <= args.max_error_rate < 1:
            raise ConfigError(f"--max-error-rate: {args.max_error_rate} must be a share in [0, 1), e.g. 0.01")
        if not (args.metrics_interval_s >= 0 and math.isfinite(args.metrics_interval_s)):
            raise ConfigError(
                f"--metrics-interval-s: {args.metrics_interval_s} must be >= 0 (0: before and after only)"
            )
        if not 1 <= args.timeslices <= 1000:
            raise ConfigError(f"--timeslices: {args.timeslices} must be an integer in 1..1000")
        self.metrics_url: str | None = None
        if args.metrics_url is None:
            self.metrics_url = server_metrics.metrics_url(args.endpoint)
        elif args.metrics_url != "off":
            check_url(args.metrics_url, "--metrics-url")
            self.metrics_url = args.metrics_url
        self.metrics_failure: str | None = None  # /metrics not exposed at an earlier step: not asked again
        self.slo = parse_slo(args.slo)
        self.capacity = None
        if args.capacity is not None:
            parts = args.capacity.split(":")
            if len(parts) != 3 or parts[0] not in ("concurrency", "rate"):
                raise ConfigError(f"--capacity: {shown(args.capacity)} is not concurrency:LOW:HIGH or rate:LOW:HIGH")
            kind = parts[0]
            low, high = _numbers(f"{parts[1]},{parts[2]}", "--capacity", int if kind == "concurrency" else float)
            if not low < high or math.isinf(high):
                raise ConfigError(f"--capacity: {shown(args.capacity)} needs LOW < HIGH, both finite")
            if self.slo is None:
                raise ConfigError("--capacity needs --slo (the bounds a load must meet)")
            self.capacity = (kind, low, high)
        if args.trace is not None and (concurrency or args.prompt_file or args.multi_turn):
            raise ConfigError(
                "--trace: replays its own timestamps and lengths (no --concurrency, --prompt-file or --multi-turn)"
            )
        if args.multi_turn is not None and args.multi_turn < 1:
            raise ConfigError(f"--multi-turn: {args.multi_turn} must be a positive integer")
        if args.trace is not None and rates:
            raise ConfigError("--trace: replays its own timestamps (no --request-rate)")
        self.loads = [Load(concurrency=c) for c in concurrency]
        self.loads += [
            Load(rate=r, arrival=args.arrival, burstiness=args.burstiness, max_concurrency=args.max_concurrency)
            for r in rates
        ]
        if args.trace is not None:
            self.loads = [Load(max_concurrency=args.max_concurrency)]
        if not self.loads and self.capacity is None:
            self.loads = [Load(concurrency=1)]
        Load(rate=1.0, arrival=args.arrival, burstiness=args.burstiness)  # checks the shape options even without a rate
        self.input_len = workload.LengthSpec.parse(args.input_len, "--input-len")
        self.output_len = (
            workload.LengthSpec.parse(args.output_len, "--output-len") if args.output_len is not None else None
        )
        self.shared = None
        if args.shared_prefix is not None:
            groups = _numbers(args.shared_prefix.replace(":", ","), "--shared-prefix", int)
            if len(groups) != 2:
                raise ConfigError(f"--shared-prefix: {shown(args.shared_prefix)} is not GROUPS:PREFIX_LEN")
            self.shared = tuple(groups)
        try:
            self.extra = json.loads(args.extra_body)
        except (ValueError, RecursionError):
            raise ConfigError(f"--extra-body: {shown(args.extra_body)} is not a JSON object") from None
        if not isinstance(self.extra, dict):
            raise ConfigError(f"--extra-body: {shown(args.extra_body)} is not a JSON object")
        for path, key in ((args.prompt_file, "--prompt-file"), (args.trace, "--trace")):
            if path is not None and not Path(path).is_file():
                raise ConfigError(f"{key}: {path} is not a file")
        self.chat = args.api == "chat" or (args.api is None and args.multi_turn is not None)
        if args.multi_turn is not None and not self.chat:
            raise ConfigError("--multi-turn needs --api chat (a conversation is a list of messages)")
        self.text = workload.Text(None)
        # Read the files now: a bad one stops the run before any request.
        self.prompts = workload.read_prompts(args.prompt_file) if args.prompt_file else None
        self.trace = workload.read_trace(args.trace, self.output_len, args.seed, self.text) if args.trace else None

    def sessions(self, count: int, seed: int) -> list[list]:
        a = self.args
        out_len = self.output_len or workload.LengthSpec("fixed", 128)
        if self.trace is not None:
            return sessions_of(self.trace)
        if a.multi_turn is not None:
            if self.prompts is not None:
                convs = [turns[: a.multi_turn] for turns, _ in self.prompts]
                convs = [convs[i % len(convs)] for i in range(count)]
            else:
                convs = workload.synthetic_conversations(count, a.multi_turn, self.input_len, seed, self.text)
            return workload.multi_turn(convs, out_len, seed)
        if self.shared is not None:
            return sessions_of(
                workload.shared_prefix(count, self.shared[0], self.shared[1], self.input_len, out_len, seed, self.text)
            )
        if self.prompts is not None:
            return sessions_of(workload.from_prompt_file(a.prompt_file, count, self.output_len, seed, self.text))
        return sessions_of(workload.synthetic(count, self.input_len, out_len, seed, self.text))


# How long a signalled run's in-flight requests get to unwind before the process leaves without them.
SHUTDOWN_S = 2.0


def run_async(main: Any) -> Any:
    """``asyncio.run(main)``, except that when a signal's exception (``Terminated``, ``Interrupted``)
    leaves the loop, the requests still in flight are cancelled and given ``SHUTDOWN_S`` to unwind,
    not waited for without end (asyncio.run waits for every task, however long it takes to unwind)."""
    import logging

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(main)
    finally:
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            _, left = loop.run_until_complete(asyncio.wait(pending, timeout=SHUTDOWN_S))
            if left:  # the process is leaving: no "Task was destroyed but it is pending" line for each
                logging.getLogger("asyncio").setLevel(logging.CRITICAL)
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def run_step(endpoint: Endpoint, plan: Plan, load: Load, requests: int | None = None) -> tuple[dict, list]:
    """Warm-up (not counted), then one measured step at ``load`` (``requests``: at least this
    many instead of --num-requests); its figures and records."""
    a = plan.args
    if a.warmup:
        run_async(run_load(endpoint, plan.sessions(a.warmup, a.seed + 7919)[: a.warmup], load, seed=a.seed + 7919))
    least = requests or a.num_requests
    cap = least if a.precision is None else least * 50
    sessions = plan.sessions(cap, a.seed)
    stop = StepStop(least, a.precision, a.max_duration_s)
    sampler = None
    if plan.metrics_url is not None and plan.metrics_failure is None:
        sampler = server_metrics.Sampler(plan.metrics_url, a.metrics_interval_s, endpoint.headers)
    result = run_async(measured(run_load(endpoint, sessions, load, seed=a.seed, stop=stop), sampler))
    stopped = stop.reason or (f"all {cap} requests issued" if a.precision is not None else None)
    block = step_figures(result.records, plan.slo, a.precision, stopped, a.max_error_rate, a.timeslices)
    block["load"] = load.to_dict()
    block["label"] = load.label
    if sampler is not None:
        block["server_metrics"] = sampler.report([r.ttft_ns / 1e6 for r in result.records if r.ok and r.ttft_ns])
        if not block["server_metrics"]["exposed"]:
            plan.metrics_failure = block["server_metrics"]["note"]
            block["server_metrics"]["note"] = scrub(block["server_metrics"]["note"], endpoint.api_key)
    elif plan.metrics_url is None:
        block["server_metrics"] = {"exposed": False, "note": "not scraped (--metrics-url off)"}
    else:
        block["server_metrics"] = {
            "url": plan.metrics_url,
            "exposed": False,
            "note": f"{plan.metrics_failure} (at an earlier step; not asked again)",
        }
    return block, result.records


async def measured(load: Any, sampler: server_metrics.Sampler | None) -> Any:
    """``load`` (a run_load coroutine) with the server's /metrics scraped before and after it and sampled
    during it (``sampler``; None: not scraped). The sampler never raises and never outlives the load."""
    if sampler is None:
        return await load
    try:
        await sampler.start()
    except BaseException:  # interrupted before the load began: it never runs
        load.close()
        sampler.cancel()
        raise
    try:
        result = await load
    except BaseException:
        sampler.cancel()
        raise
    await sampler.stop()
    return result


def requests_to_decide(percentile: float) -> int:
    """The fewest requests whose Wilson interval can reach ``percentile`` % when every one meets the
    SLO (n / (n + z²) >= p): 35 for 90 %, 381 for 99 %, 1 for 100 % (judged without an interval)."""
    p = percentile / 100
    return 1 if p >= 1 else math.floor(1.959964**2 * p / (1 - p)) + 1


def pareto(steps: list[dict]) -> list[dict]:
    """The steps not beaten on both tokens/s per user and output tokens/s."""
    points = [
        {
            "label": s["label"],
            "tokens_per_s_per_user": s["tokens_per_s_per_user"],
            "output_tokens_per_s": s["throughput"]["output_tokens_per_s"]["value"],
        }
        for s in steps
        if s.get("tokens_per_s_per_user") and s["throughput"]["output_tokens_per_s"]["value"]
    ]
    return [
        p
        for p in points
        if not any(
            q is not p
            and q["tokens_per_s_per_user"] >= p["tokens_per_s_per_user"]
            and q["output_tokens_per_s"] >= p["output_tokens_per_s"]
            and (q["tokens_per_s_per_user"], q["output_tokens_per_s"])
            != (p["tokens_per_s_per_user"], p["output_tokens_per_s"])
            for q in points
        )
    ]


def _fmt(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _pm(block: dict) -> str:
    pm = block.get("plus_minus")
    return f"{_fmt(block.get('value'))} ±{pm:.1%}" if pm is not None else f"{_fmt(block.get('value'))} ±?"


def summary_rows(steps: list[dict]) -> list[dict]:
    rows = []
    for s in steps:
        t = s["throughput"]
        slo = s.get("slo") or {}
        rows.append(
            {
                "step": s["label"],
                "requests": f"{s['completed']}/{s['requests']}",
                "failed": s["failed"],
                "errors": error_kinds(s) or "—",
                "requests_per_s": _pm(t["requests_per_s"]),
                "output_tokens_per_s": _pm(t["output_tokens_per_s"]),
                "ttft_p50_ms": _fmt(s["ttft_ms"]["p50"]),
                "ttft_p90_ms": _fmt(s["ttft_ms"]["p90"]),
                "ttfa_p50_ms": _fmt((s.get("ttfa_ms") or {}).get("p50")),
                "tpot_p50_ms": _fmt(s["tpot_ms"]["p50"], 2),
                "itl_p50_ms": _fmt(s["itl_ms"]["p50"], 2),
                "e2e_p50_ms": _fmt(s["e2e_ms"]["p50"]),
                "tokens_per_s_per_user": _fmt(s["tokens_per_s_per_user"]),
                "goodput_requests_per_s": _pm(t["goodput_requests_per_s"]) if "goodput_requests_per_s" in t else "—",
                "slo_attainment": f"{slo['attainment']:.0%} ({slo['verdict']})" if slo else "—",
                "verdict": verdict_text(s["verdict"]),
            }
        )
    return rows


def error_kinds(step: dict) -> str:
    """The step's failed requests by kind, most first: ``stall 2, http_500 1``."""
    return ", ".join(f"{kind} {n}" for kind, n in sorted(step["errors"].items(), key=lambda item: (-item[1], item[0])))


def verdict_text(verdict: dict) -> str:
    text = "VALID" if verdict["valid"] else "INVALID: " + "; ".join(verdict["reasons"])
    unjudged = verdict.get("not_judged") or []
    return text + ("" if not unjudged else " (not judged: " + "; ".join(unjudged) + ")")


def step_line(block: dict) -> str:
    """The console's line for a step: completions, throughput, failures by kind, verdict."""
    out = _pm(block["throughput"]["output_tokens_per_s"])
    kinds = error_kinds(block)
    failed = f", {block['failed']} failed ({kinds})" if kinds else ""
    return (
        f"{block['label']}: {block['completed']}/{block['requests']} completed{failed}, output {out} tokens/s, "
        f"{verdict_text(block['verdict'])}"
    )


def markdown(rows: list[dict], header: str) -> str:
    if not rows:
        return header + "\n\n(no steps)\n"
    keys = list(rows[0])
    lines = [header, "", "| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def run(
    argv: list[str], results_root: Path, one_line_errors: bool = False, on_written: Callable[[Path], None] | None = None
) -> int:
    args = parse_args(argv, one_line_errors)
    check_url(args.endpoint)
    plan = Plan(args)
    root = Path(args.output_dir) if args.output_dir else results_root
    check_output_dir(root, "--output-dir" if args.output_dir else "the results folder")
    tokenizer = load_tokenizer(args.tokenizer)
    plan.text = workload.Text(tokenizer)
    if args.launch is None:
        return measure(args, plan, tokenizer, results_root, on_written)
    if args.launch_timeout_s <= 0:
        raise ConfigError(f"--launch-timeout-s: {args.launch_timeout_s} must be positive")
    from common.launch import LaunchedServer

    log = Path(args.launch_log) if args.launch_log else root / f"launch-{time.strftime('%Y%m%d-%H%M%S')}.log"
    check_output_dir(log.parent, "--launch-log")
    check_port_free(args.endpoint)
    with LaunchedServer(args.launch, args.endpoint, log, args.launch_timeout_s) as server:
        if server.exited() is not None:  # it answered, then ended: something else may be serving that port
            raise EngineError(f"--launch: the server exited with status {server.exited()} as it became ready")
        print(f"server ready at {args.endpoint} after {server.ready_s:.1f} s (its log: {log})", flush=True)
        return measure(args, plan, tokenizer, results_root, on_written, server)


def measure(
    args: argparse.Namespace,
    plan: Plan,
    tokenizer: Any,
    results_root: Path,
    on_written: Callable[[Path], None] | None = None,
    server: Any = None,
) -> int:
    """Every load step against the endpoint, then the run folder; ``on_written(folder)`` after it is
    complete (run.py adds it to the results history there). ``server``: the --launch server
    (``common.launch.LaunchedServer``); when it exits during a step, that step's verdict names
    it, no further step runs, the run is written and the exit status is 4."""
    key = api_key(args)
    served = check_endpoint(args.endpoint, args.served_model, key=key)
    endpoint = Endpoint(
        args.endpoint,
        args.served_model,
        plan.chat,
        plan.extra,
        args.stall_timeout_s,
        args.request_timeout_s,
        tokenizer,
        args.count_tokens == "usage",
        api_key=key,
    )
    started = time.time()
    steps, records = [], {}
    exported: list[tuple[str, str, list]] = []  # (phase, label, records) for requests.jsonl
    died: list[str] = []

    def watch(block: dict) -> None:
        """Name a launched server's exit in the step's verdict (and stop the run after it)."""
        status = server.exited() if server is not None else None
        if status is None:
            return
        from common.launch import last_log_line

        reason = f"the launched server exited with status {status} during this step{last_log_line(server.log_path)}"
        block["verdict"]["valid"] = False
        block["verdict"]["reasons"].append(reason)
        died.append(reason)

    for load in plan.loads:
        block, recs = run_step(endpoint, plan, load)
        watch(block)
        steps.append(block)
        records[block["label"]] = [r.to_dict() for r in recs]
        exported.append(("step", block["label"], recs))
        print(scrub(step_line(block), key), flush=True)
        if died:
            print(f"--launch: {died[0]}: no further step is run", flush=True)
            break
    found = None
    if plan.capacity is not None and not died:
        kind, low, high = plan.capacity
        probed: list[dict] = []

        def probe(value: float) -> str:
            if kind == "concurrency":
                load = Load(concurrency=int(value))
            else:
                load = Load(
                    rate=value, arrival=args.arrival, burstiness=args.burstiness, max_concurrency=args.max_concurrency
                )
            if died:  # the launched server is gone: nothing more to probe
                return "misses"
            block, recs = run_step(endpoint, plan, load, decidable)
            if block["slo"]["verdict"] == "undecided" and server_alive():  # near the bound: once more, 4x as long
                block, recs = run_step(endpoint, plan, load, 4 * max(decidable, block["requests"]))
                block["slo"]["remeasured"] = True
            watch(block)
            probed.append(block)
            exported.append(("capacity", block["label"], recs))
            print(
                f"capacity probe {load.label}: SLO {block['slo']['verdict']} ({block['slo']['attainment']:.0%})",
                flush=True,
            )
            return block["slo"]["verdict"]

        def server_alive() -> bool:
            return server is None or server.exited() is None

        assert plan.slo is not None  # --capacity needs --slo (refused with the options otherwise)
        decidable = max(args.num_requests, requests_to_decide(plan.slo.percentile))

        found = capacity_search.search(kind, probe, low, high)
        steps_capacity = probed
    else:
        steps_capacity = []
    tokens = sorted({src for s in steps + steps_capacity for src in s["token_source"]})
    result = {
        "kind": "serving",
        "endpoint": args.endpoint,
        "served_model": args.served_model,
        "served_models": served,
        "api": "chat" if plan.chat else "completions",
        "token_source": tokens,
        "tokenizer": args.tokenizer,
        "client_location": args.where or where(args.endpoint),
        "api_key_sent": key is not None,  # the key itself is never written
        "max_error_rate": args.max_error_rate,
        "launched_server_exited": died[0] if died else None,
        "server_metrics": {
            "url": plan.metrics_url,
            "interval_s": args.metrics_interval_s,
            "server": next(
                (
                    s["server_metrics"].get("server")
                    for s in steps + steps_capacity
                    if s["server_metrics"].get("exposed")
                ),
                None,
            ),
            "exposed": any(s["server_metrics"].get("exposed") for s in steps + steps_capacity),
        },
        "timeslices": args.timeslices,
        "exports": {"requests": "serving/requests.jsonl", "steps": "serving/steps.csv"},
        "seed": args.seed,
        "workload": {
            "prompt_file": args.prompt_file,
            "trace": args.trace,
            "input_len": args.input_len,
            "output_len": args.output_len,
            "shared_prefix": args.shared_prefix,
            "multi_turn": args.multi_turn,
            "num_requests": args.num_requests,
            "warmup": args.warmup,
            "extra_body": plan.extra,
        },
        "slo": plan.slo.to_dict() if plan.slo else None,
        "steps": steps,
        "capacity": found.to_dict() if found is not None else None,
        "capacity_steps": steps_capacity,
        "pareto": pareto(steps),
        "started_at": started,
        "duration_s": time.time() - started,
        "records": records,
    }
    rows = summary_rows(steps + steps_capacity)
    run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)
    header = f"# serving: {args.served_model} at {args.endpoint} (tokens counted by {', '.join(tokens) or 'nothing'})"
    notes = sorted({s["token_count_note"] for s in steps + steps_capacity if s.get("token_count_note")})
    notes += run_notes(steps + steps_capacity)
    header += "".join(f"\n\nnote: {n}" for n in notes)
    footer = server_section(steps + steps_capacity, plan.metrics_url)
    if found is not None:
        above = ", above the range" if found.above_range else ""
        header += (
            f"\n\ncapacity ({found.kind}): {found.capacity} "
            f"(interval {found.interval}, {len(found.probes)} probes{above})"
        )
    results_root = Path(args.output_dir) if args.output_dir else results_root
    try:
        results_root.mkdir(parents=True, exist_ok=True)
        with atomic_dir(results_root, f"run{run_id}") as tmp:
            (tmp / "serving").mkdir()
            (tmp / "serving" / "result.json").write_text(json_text(result), encoding="utf-8")
            (tmp / "serving" / "report.html").write_text(plots.report(result), encoding="utf-8")
            (tmp / "summary.json").write_text(
                json_text({"run_id": run_id, "kind": "serving", "rows": rows, "capacity": result["capacity"]}),
                encoding="utf-8",
            )
            (tmp / "serving" / "requests.jsonl").write_text(
                "".join(
                    line + "\n" for phase, label, recs in exported for line in exports.request_lines(phase, label, recs)
                ),
                encoding="utf-8",
            )
            (tmp / "serving" / "steps.csv").write_text(
                exports.steps_csv([("step", s) for s in steps] + [("capacity", s) for s in steps_capacity]),
                encoding="utf-8",
            )
            (tmp / "summary.md").write_text(markdown(rows, header) + footer, encoding="utf-8")
            final = results_root / f"run{run_id}"
            os.replace(tmp, final)
    except OSError as exc:
        raise StorageError(f"the results could not be written to {results_root}: {one_line(exc)}") from None
    print(scrub(markdown(rows, header) + footer, key))
    print(f"results: {final}")
    if on_written is not None:
        on_written(final)
    if died:
        return EngineError.exit_code
    failing = [
        s["label"] for s in steps + steps_capacity if not s["verdict"]["valid"] or s["verdict"].get("not_judged")
    ]
    if args.strict and failing:
        print(f"--strict: {len(failing)} step(s) INVALID or not judged: {', '.join(failing)}", file=sys.stderr)
        return DataError.exit_code
    return 0


def server_section(steps: list[dict], url: str | None) -> str:
    """summary.md's section of the server's own figures (its /metrics), a row per step beside the client's
    TTFT, and the TTFT cross-check; one line when the server exposes none."""
    blocks = [s.get("server_metrics") or {} for s in steps]
    if not steps:
        return ""
    if url is None:
        return "\nserver metrics: not scraped (--metrics-url off)\n"
    if not any(b.get("exposed") for b in blocks):
        note = next((b["note"] for b in blocks if b.get("note")), "not exposed")
        return f"\nserver metrics: {note.removesuffix(' (at an earlier step; not asked again)')}\n"
    rows = [server_metrics.summary_row(s["label"], b, s["ttft_ms"]) for s, b in zip(steps, blocks)]
    keys = list(next(r for r in rows if len(r) > 2))
    rows = [r if len(r) > 2 else {k: r.get(k, server_metrics.NOT_EXPOSED) for k in keys} for r in rows]
    text = "\n" + markdown(rows, f"## The server's own figures (GET {url}; mean / peak over the step's samples)")
    checks = [
        (s["label"], b["ttft_crosscheck"])
        for s, b in zip(steps, blocks)
        if b.get("exposed") and isinstance(b.get("ttft_crosscheck"), dict) and b["ttft_crosscheck"].get("judged")
    ]
    for label, check in checks:
        text += (
            f"\nTTFT cross-check, {label}: client mean {check['client_mean_ms']:.2f} ms, server "
            f"{check['server_mean_ms']:.2f} ms (client - server {check['difference_mean_ms']:+.2f} ms); p50 client "
            f"{check['client_p50_ms']:.2f} ms, server {server_metrics.shown(check['server_p50_ms'], 2)} ms "
            f"(its bucket {check['server_p50_bucket_ms']})" + (f"; {check['note']}" if check.get("note") else "")
        )
    if checks:
        text += f"\n\n{server_metrics.CROSSCHECK_WHY}.\n"
    return text


def run_notes(steps: list[dict]) -> list[str]:
    """summary.md's notes on what the audits found: usage figures refused, total tokens/s n/a."""
    notes = []
    refused = sum(s["audits"]["usage_refused"]["requests"] for s in steps if "audits" in s)
    if refused:
        example = next(e for s in steps for e in s["audits"]["usage_refused"]["examples"])
        notes.append(f"{refused} request(s)' usage refused as impossible and counted otherwise (e.g. {example})")
    if any((s["throughput"].get("total_tokens_per_s") or {}).get("not_judged") for s in steps):
        notes.append("total tokens/s is n/a where some completed requests' prompt tokens are unknown")
    for s in steps:
        r = s.get("reasoning") or {}
        if r.get("requests"):
            notes.append(
                f"{s['label']}: {r['requests']} replies reasoned: {r['reasoning_tokens']} reasoning tokens and "
                f"{r['answer_tokens']} answer tokens (reasoning counted by {', '.join(r['counted_by'])}); "
                f"time to the first answer token p50 {_fmt((s.get('ttfa_ms') or {}).get('p50'))} ms against "
                f"TTFT p50 {_fmt(s['ttft_ms']['p50'])} ms"
                + (f"; {r['without_answer']} without an answer token" if r.get("without_answer") else "")
            )
    return notes


class Terminated(BaseException):
    """SIGTERM, raised where the run is so that it unwinds as an interrupt does."""


class Interrupted(BaseException):
    """SIGINT, raised where the run is, as SIGTERM is: not through asyncio.run's own SIGINT handling,
    which cancels the main task and waits for it to unwind, without a bound."""


def _terminate(signum, _frame) -> None:
    raise Terminated()


def _interrupt(signum, _frame) -> None:
    raise Interrupted()


def main(
    argv: list[str] | None = None,
    results_root: Path | None = None,
    origin: str | None = None,
    on_written: Callable[[Path], None] | None = None,
) -> int:
    """``origin``: the options came from this host.yaml's ENDPOINT (``config_argv``), and errors say so;
    ``on_written``: called with the run folder once it is written."""
    import signal
    import threading

    argv = sys.argv[1:] if argv is None else argv
    root = Path(results_root) if results_root is not None else Path(__file__).resolve().parents[2] / "result"
    main_thread = threading.current_thread() is threading.main_thread()
    previous = (
        {
            sig: signal.signal(sig, handler)
            for sig, handler in ((signal.SIGTERM, _terminate), (signal.SIGINT, _interrupt))
        }
        if main_thread
        else {}
    )
    try:
        return run(argv, root, one_line_errors=origin is not None, on_written=on_written)
    except Terminated:
        print("terminated: nothing written", file=sys.stderr)
        return 143
    except Interrupted:
        print("interrupted: nothing written", file=sys.stderr)
        return 130
    except InferPerfError as exc:
        message = one_line(exc)
        print(f"error: {message if origin is None else in_config_terms(message, origin)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted: nothing written", file=sys.stderr)
        return 130
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    raise SystemExit(main())
