"""``run.py --endpoint``'s options: the parser (one definition, also host.yaml's ``ENDPOINT`` entries,
``config_argv``), their checks, and ``Plan``, what they make (the loads, the workload, the SLO). Every
check here runs before any request is sent; a bad option is one ``ConfigError`` line (exit 2)."""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import re
import shlex
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from common.errors import ConfigError, EngineError, HostError, one_line, shown
from tools.serving import metrics as server_metrics
from tools.serving import workload
from tools.serving.client import scrub
from tools.serving.figures import DEFAULT_MAX_ERROR_RATE, DEFAULT_TIMESLICES, SLO
from tools.serving.load import ARRIVALS, Load, sessions_of

DEFAULT_REQUESTS = 64


class _OneLineParser(argparse.ArgumentParser):
    """host.yaml's ENDPOINT: a bad option is a ConfigError (one line), not argparse's usage and exit."""

    def error(self, message: str):  # one line, exit 2 (argparse prints the usage and exits)
        raise ConfigError(message)


def parse_args(argv: list[str], one_line_errors: bool = False) -> argparse.Namespace:
    return _parser(one_line_errors).parse_args(argv)


DESCRIPTION = (
    "``run.py --endpoint http://HOST:PORT/v1 --served-model NAME [options]``: benchmark a server the\n"
    "user already runs, with the load modes, workloads, SLO and capacity search of ``tools/serving``."
)


def _parser(one_line_errors: bool = False) -> argparse.ArgumentParser:
    kind = _OneLineParser if one_line_errors else argparse.ArgumentParser
    p = kind(prog="run.py --endpoint", description=DESCRIPTION)
    _server_options(p)
    _load_options(p)
    _workload_options(p)
    _judging_options(p)
    _run_options(p)
    return p


def _server_options(p: argparse.ArgumentParser) -> None:
    """The server and how tokens are counted."""
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


def _load_options(p: argparse.ArgumentParser) -> None:
    """The load: streams, rates, arrivals, requests."""
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


def _workload_options(p: argparse.ArgumentParser) -> None:
    """The prompts and reply lengths."""
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


def _judging_options(p: argparse.ArgumentParser) -> None:
    """The bounds, the precision and the timeouts a step is judged by."""
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


def _run_options(p: argparse.ArgumentParser) -> None:
    """Where results go, --launch, the key, the verdict and the server's /metrics."""
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


def config_argv(entries: Any, origin: str, output_dir: Path | None, base: Path) -> list[str]:
    """host.yaml's ENDPOINT mapping as this command line (module docstring), its results in
    ``output_dir`` (None: not said), a relative path (``PATH_ENTRIES``) relative to ``base`` as every host.yaml
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
    return argv + (["--output-dir", str(output_dir)] if output_dir is not None else [])


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


def _check_numbers(args: argparse.Namespace) -> None:
    """The numeric options' bounds (each one ConfigError line)."""
    if args.max_concurrency is not None and args.max_concurrency < 1:
        raise ConfigError(f"--max-concurrency: {args.max_concurrency} must be a positive integer")
    if args.num_requests < 1:
        raise ConfigError(f"--num-requests: {args.num_requests} must be a positive integer")
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
        raise ConfigError(f"--metrics-interval-s: {args.metrics_interval_s} must be >= 0 (0: before and after only)")
    if not 1 <= args.timeslices <= 1000:
        raise ConfigError(f"--timeslices: {args.timeslices} must be an integer in 1..1000")
    if args.multi_turn is not None and args.multi_turn < 1:
        raise ConfigError(f"--multi-turn: {args.multi_turn} must be a positive integer")


def _metrics_url(args: argparse.Namespace) -> str | None:
    """The server's /metrics URL: the endpoint's origin's by default; None with ``--metrics-url off``."""
    if args.metrics_url is None:
        return server_metrics.metrics_url(args.endpoint)
    if args.metrics_url == "off":
        return None
    check_url(args.metrics_url, "--metrics-url")
    return args.metrics_url


def _capacity(text: str | None, slo: SLO | None) -> tuple[str, float, float] | None:
    """--capacity as (kind, low, high); None without it."""
    if text is None:
        return None
    parts = text.split(":")
    if len(parts) != 3 or parts[0] not in ("concurrency", "rate"):
        raise ConfigError(f"--capacity: {shown(text)} is not concurrency:LOW:HIGH or rate:LOW:HIGH")
    kind = parts[0]
    low, high = _numbers(f"{parts[1]},{parts[2]}", "--capacity", int if kind == "concurrency" else float)
    if not low < high or math.isinf(high):
        raise ConfigError(f"--capacity: {shown(text)} needs LOW < HIGH, both finite")
    if slo is None:
        raise ConfigError("--capacity needs --slo (the bounds a load must meet)")
    return kind, low, high


def _loads(args: argparse.Namespace, capacity: bool) -> list[Load]:
    """The steps' loads: each concurrency, then each rate; the trace's own; one stream by default."""
    concurrency = _numbers(args.concurrency, "--concurrency", int)
    rates = _numbers(args.request_rate, "--request-rate", float)
    if args.trace is not None and (concurrency or args.prompt_file or args.multi_turn):
        raise ConfigError(
            "--trace: replays its own timestamps and lengths (no --concurrency, --prompt-file or --multi-turn)"
        )
    if args.trace is not None and rates:
        raise ConfigError("--trace: replays its own timestamps (no --request-rate)")
    loads = [Load(concurrency=c) for c in concurrency]
    loads += [
        Load(rate=r, arrival=args.arrival, burstiness=args.burstiness, max_concurrency=args.max_concurrency)
        for r in rates
    ]
    if args.trace is not None:
        loads = [Load(max_concurrency=args.max_concurrency)]
    if not loads and not capacity:
        loads = [Load(concurrency=1)]
    Load(rate=1.0, arrival=args.arrival, burstiness=args.burstiness)  # checks the shape options even without a rate
    return loads


def _shared_prefix(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    groups = _numbers(text.replace(":", ","), "--shared-prefix", int)
    if len(groups) != 2:
        raise ConfigError(f"--shared-prefix: {shown(text)} is not GROUPS:PREFIX_LEN")
    return groups[0], groups[1]


def _extra_body(text: str) -> dict:
    try:
        extra = json.loads(text)
    except (ValueError, RecursionError):
        raise ConfigError(f"--extra-body: {shown(text)} is not a JSON object") from None
    if not isinstance(extra, dict):
        raise ConfigError(f"--extra-body: {shown(text)} is not a JSON object")
    return extra


class Plan:
    """The options, checked, and what they make: the loads, the workload, the SLO."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        _check_numbers(args)
        self.metrics_url = _metrics_url(args)
        self.metrics_failure: str | None = None  # /metrics not exposed at an earlier step: not asked again
        self.slo = parse_slo(args.slo)
        self.capacity = _capacity(args.capacity, self.slo)
        self.loads = _loads(args, self.capacity is not None)
        self.input_len = workload.LengthSpec.parse(args.input_len, "--input-len")
        self.output_len = (
            workload.LengthSpec.parse(args.output_len, "--output-len") if args.output_len is not None else None
        )
        self.shared = _shared_prefix(args.shared_prefix)
        self.extra = _extra_body(args.extra_body)
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
