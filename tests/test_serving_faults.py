"""Bad servers and bad input against the serving client (``run.py --endpoint``): every fault is one
line with its documented exit status, or an error of its kind counted in the step with the run's
files written; never a traceback, a hang or a silently wrong figure. Every server here is real and
on 127.0.0.1 only (a raw ``socketserver`` one speaks whatever bytes a case needs, or the scripted
``tools.serving.loopback``); each is stopped, with its threads joined, before its test ends.

Nothing here judges by the wall clock: where a fault must end at a timeout, the timeout the test
sets (a 2-3 s stall) is far below the one the fault used to wait out (60-120 s), and the test
asserts the kind of error, not a duration.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import socketserver
import sys
import threading
from pathlib import Path
from typing import Callable

import pytest

from tests.infra.serving_summary import summary_md
from tools.serving import options as serving_options
from tools.serving.cli import main
from tools.serving.client import RequestSpec
from tools.serving.load import Endpoint, Load, run_load, sessions_of
from tools.serving.loopback import LoopbackServer, Plan, steady

DEEP = 100_000  # far past CPython's recursion limit (1000) and its JSON decoder's

MODELS = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()


def _event(payload: object) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _stream(*events: bytes, end: bool = True) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    return head + b"".join(_chunk(e) for e in events) + (b"0\r\n\r\n" if end else b"")


def _plain(status: int, body: bytes, kind: str = "application/json", close: bool = False) -> bytes:
    extra = "Connection: close\r\n" if close else ""
    return f"HTTP/1.1 {status} X\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


def _tokens(n: int, finish: str = "length", usage: dict | None = None) -> list[bytes]:
    events = [
        _event({"choices": [{"index": 0, "text": f" t{i}", "finish_reason": finish if i == n - 1 else None}]})
        for i in range(n)
    ]
    if usage is not None:
        events.append(_event({"choices": [], "usage": usage}))
    return events + [b"data: [DONE]\n\n"]


# (request line's path, body, this connection's request count, the server) -> bytes to send, or None to close
Respond = Callable[[str, dict, int, "RawServer"], "bytes | None"]


class RawServer:
    """An HTTP/1.1 server on 127.0.0.1 whose every answer is raw bytes from ``respond`` (keep-alive:
    one connection may carry several requests). ``hold``: after answering, keep the connection open
    without a byte until the server stops. Stopping releases every handler and joins its thread."""

    def __init__(self, respond: Respond, models: bytes | Callable | None = MODELS, hold: bool = False) -> None:
        self.respond, self.models, self.hold = respond, models, hold
        self.completions = 0
        self.headers: list[dict[str, str]] = []
        self.stopping = threading.Event()
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                outer._handle(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = False
            block_on_close = True  # server_close joins every handler
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> "RawServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(30)
        assert not self.thread.is_alive()

    def _handle(self, sock: socket.socket) -> None:
        sock.settimeout(0.2)
        buffer, count = b"", 0
        while not self.stopping.is_set():
            try:
                while b"\r\n\r\n" not in buffer:
                    data = sock.recv(65536)
                    if not data:
                        return
                    buffer += data
            except TimeoutError:
                continue
            except OSError:
                return
            head, _, buffer = buffer.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
            length = int(headers.get("content-length", "0"))
            try:
                while len(buffer) < length:
                    data = sock.recv(65536)
                    if not data:
                        return
                    buffer += data
            except OSError:
                return
            raw, buffer = buffer[:length], buffer[length:]
            self.headers.append(headers)
            count += 1
            if method == "GET" and path.endswith("/models"):
                answer = self.models(headers) if callable(self.models) else self.models
                if isinstance(answer, bytes) and not answer.startswith(b"HTTP/"):
                    answer = _plain(200, answer)
            else:
                self.completions += 1
                answer = self.respond(path, json.loads(raw or b"{}"), count, self)
            try:
                if answer is None:
                    return
                if callable(answer):  # writes itself (slowly, in pieces)
                    answer(sock, self.stopping)
                    return
                sock.sendall(answer)
            except OSError:
                return
            if self.hold:
                self.stopping.wait(60)
                return


@pytest.fixture
def run(tmp_path, capsys):
    """``run(url, *options) -> (code, out, err, run folder or None)`` of run.py --endpoint, written under tmp_path."""

    def go(url: str, *extra: str, model: str = "m", output: Path | None = None) -> tuple[int, str, str, Path | None]:
        out_dir = output if output is not None else tmp_path / "out"
        code = main(["--endpoint", url, "--served-model", model, "--output-dir", str(out_dir), "--warmup", "0", *extra])
        captured = capsys.readouterr()
        runs = sorted(out_dir.iterdir()) if out_dir.is_dir() else []
        runs = [r for r in runs if r.name.startswith("run")]
        assert "Traceback" not in captured.out + captured.err
        return code, captured.out, captured.err, runs[-1] if runs else None

    return go


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def _step(folder: Path) -> dict:
    return json.loads((folder / "serving" / "result.json").read_text())["steps"][0]


def _load(url: str, n: int = 1, **options) -> list:
    endpoint = Endpoint(url, "m", **{"stall_timeout_s": 3.0, "request_timeout_s": 60.0, **options})
    specs = [RequestSpec(i, "a b", 4) for i in range(n)]
    return asyncio.run(run_load(endpoint, sessions_of(specs), Load(concurrency=1))).records


# ---- JSON nested past Python's recursion limit ----------------------------------------------------
def test_deep_json_in_the_model_list_is_one_line_exit_4(run):
    with RawServer(lambda *a: None, models=b"[" * DEEP + b"]" * DEEP) as server:
        code, _, err, folder = run(server.url)
    assert code == 4 and "gave no model list" in _one_line(err) and folder is None


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_deep_json_in_an_sse_event_is_a_malformed_request_and_the_run_is_written(run, api):
    def respond(path, body, count, server):
        if server.completions % 2:  # the 1st, 3rd, ...
            return _stream(b"data: " + b"[" * DEEP + b"]" * DEEP + b"\n\n")
        return _stream(*_tokens(4, usage={"prompt_tokens": 2, "completion_tokens": 4}))

    with RawServer(respond) as server:
        code, out, _, folder = run(server.url, "--num-requests", "4", "--output-len", "4", "--api", api)
    step = _step(folder)
    assert code == 0 and step["errors"] == {"malformed": 2} and step["completed"] == 2
    assert "malformed 2" in out and "malformed 2" in summary_md(folder)


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_deep_json_in_a_prompt_file_or_trace_is_one_line_exit_3(run, tmp_path, suffix):
    deep = tmp_path / f"deep{suffix}"
    deep.write_text(("[" if suffix == ".json" else "") + "[" * DEEP + "]" * DEEP + ("]" if suffix == ".json" else ""))
    with LoopbackServer(model="m") as server:
        for option in ("--prompt-file", "--trace"):
            code, _, err, folder = run(server.url, option, str(deep))
            assert code == 3 and "nested too deeply" in _one_line(err) and folder is None
        assert server.requests == 0


@pytest.mark.parametrize("option", ["--extra-body", "--slo"])
def test_deep_json_in_an_option_is_one_line_exit_2(run, option):
    with LoopbackServer(model="m") as server:
        code, _, err, folder = run(server.url, option, "{" + '"a":{' * DEEP + "}" * DEEP + "}")
        assert server.requests == 0
    assert code == 2 and option in _one_line(err) and folder is None


# ---- the wrong JSON types in a stream ---------------------------------------------------------------
@pytest.mark.parametrize(
    "event, words",
    [
        ({"choices": [{"index": 0, "delta": ["t"], "finish_reason": None}]}, "delta is a list"),
        ({"choices": [{"index": 0, "delta": "t", "finish_reason": None}]}, "delta is a str"),
        ({"choices": {"1": {"delta": {"content": "t"}}}}, "without 'choices'"),
        ({"choices": [{"index": 0, "delta": {"content": 7}, "finish_reason": None}]}, "not a string"),
    ],
)
def test_a_chat_chunk_of_the_wrong_json_type_is_malformed(event, words):
    with RawServer(lambda *a: _stream(_event(event), b"data: [DONE]\n\n")) as server:
        (record,) = _load(server.url, chat=True)
    assert record.error["kind"] == "malformed" and words in record.error["detail"]


# ---- error bodies, framing, closed connections -----------------------------------------------------
def test_an_error_body_that_is_not_utf8_is_counted_with_its_status():
    with RawServer(lambda *a: _plain(500, b"\xff\xfe\x80 broken \xc3", "text/plain")) as server:
        (record,) = _load(server.url)
    assert record.error["kind"] == "http_500" and "broken" in record.error["detail"]


@pytest.mark.parametrize(
    "tail",
    [b"zz\r\nhello\r\n", b"ffffffffffffffffffff\r\nhello", b"5\r\nhelloXX"],
    ids=["bad-size", "size-overflow", "no-crlf-after-data"],
)
def test_broken_chunked_encoding_ends_at_once_not_at_the_request_timeout(tail):
    """The first token arrives, then the broken chunk after a pause (a separate read): aiohttp keeps
    that parse error off the body's reader, which then waited out the whole request timeout (here
    60 s; 600 s by default). Now the request is ``malformed`` without waiting for any timeout."""

    def respond(path, body, count, server):
        def write(sock, stopping):
            sock.sendall(_stream(_tokens(2)[0], end=False))
            stopping.wait(0.3)
            sock.sendall(tail)
            stopping.wait(60)

        return write

    with RawServer(respond) as server:
        (record,) = _load(server.url, stall_timeout_s=30.0, request_timeout_s=60.0)
    assert record.error["kind"] == "malformed" and "cannot parse" in record.error["detail"]


def test_a_server_closing_kept_alive_connections_is_retried_on_a_fresh_one():
    """The server answers and then closes each connection without saying so (no Connection: close);
    the client's next request on it found it closed. Before: half the requests were failures."""
    usage = {"prompt_tokens": 2, "completion_tokens": 4}

    def respond(path, body, count, server):
        return _stream(*_tokens(4, usage=usage)) if count == 1 else None  # a 2nd request on it: closed

    with RawServer(respond) as server:
        records = _load(server.url, n=12)
    assert [r.error for r in records] == [None] * 12
    assert sum(r.retries for r in records) >= 1


def test_a_server_that_closes_before_answering_is_dropped_not_connect():
    with RawServer(lambda *a: None) as server:
        (record,) = _load(server.url)
    assert (
        record.error["kind"] == "dropped"
        and "before answering (again on a fresh connection)" in (record.error["detail"])
    )


def test_an_sse_line_without_end_is_malformed_at_its_bound():
    def respond(path, body, count, server):
        def write(sock, stopping):
            sock.sendall(_stream(end=False))
            piece = _chunk(b"x" * (1 << 20))
            for _ in range(17):
                sock.sendall(piece)
            stopping.wait(60)

        return write

    with RawServer(respond) as server:
        (record,) = _load(server.url, request_timeout_s=120.0)
    assert record.error["kind"] == "malformed" and "longer than 16 MiB" in record.error["detail"]


def test_a_garbage_status_line_is_malformed():
    with RawServer(lambda *a: b"HTTP/1.1 abc\r\n\r\n") as server:
        (record,) = _load(server.url)
    assert record.error["kind"] in ("malformed", "dropped") and record.error["kind"] != "connect"


# ---- URLs urllib or aiohttp would refuse or read otherwise ------------------------------------------
@pytest.mark.parametrize(
    "url, words",
    [
        ("http://[::1/v1", "not a valid URL"),
        ("http://[zz::1]:8000/v1", "IPv6 address"),
        ("http://127.0.0.1:70000/v1", "not a valid URL"),
        ("http://127.0.0.1:65536/v1", "not a valid URL"),
        ("http://127.0.0.1:0/v1", "port 0"),
        ("http://127.0.0.1:port/v1", "not a valid URL"),
        ("http:///v1", "names no host"),
        ("http://exa mple:8000/v1", "whitespace"),
        ("http://user:secret@127.0.0.1:8000/v1", "credentials"),
        ("http://127.0.0.1:8000/v1?x=1", "query"),
        ("ftp://127.0.0.1/v1", "not an http"),
    ],
)
def test_a_url_that_cannot_work_is_one_line_exit_2_before_any_connection(run, url, words):
    code, _, err, folder = run(url)
    line = _one_line(err)
    assert code == 2 and words in line and folder is None
    assert "secret" not in line or "credentials" not in words  # the refusal does not repeat a password


# ---- --launch, --output-dir -------------------------------------------------------------------------
def test_launch_on_a_port_another_server_serves_is_refused_and_launches_nothing(run, tmp_path):
    marker = tmp_path / "started"
    command = f"{sys.executable} -c \"open({str(marker)!r}, 'w').write('x'); import time; time.sleep(60)\""
    with LoopbackServer(model="m") as other:
        code, _, err, folder = run(other.url, "--launch", command, "--launch-timeout-s", "30")
        assert other.requests == 0
    assert code == 2 and "already accepts connections" in _one_line(err) and folder is None
    assert not marker.exists()  # the command never ran: nothing left running


def test_an_output_dir_that_is_a_file_is_refused_before_any_request(run, tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    with LoopbackServer(model="m") as server:
        for output in (blocker, blocker / "below"):
            code, _, err, folder = run(server.url, output=output)
            assert code == 2 and "is a file, not a folder" in _one_line(err) and folder is None
        assert server.requests == 0


def test_a_launch_log_under_a_file_is_refused_before_launching(run, tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    code, _, err, folder = run("http://127.0.0.1:9/v1", "--launch", "true", "--launch-log", str(blocker / "log"))
    assert code == 2 and "--launch-log" in _one_line(err) and folder is None


LAUNCHED = """
import json, os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

served = 0

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a):
        pass
    def do_GET(self):
        body = json.dumps({"data": [{"id": "m"}]}).encode()
        self.send_response(200); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def do_POST(self):
        global served
        self.rfile.read(int(self.headers["Content-Length"]))
        served += 1
        if served > int(sys.argv[2]):
            print("dying now", flush=True)
            os._exit(7)
        events = [{"choices": [{"index": 0, "text": " a", "finish_reason": "length"}]},
                  {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}]
        body = b"".join(b"data: " + json.dumps(e).encode() + b"\\n\\n" for e in events) + b"data: [DONE]\\n\\n"
        self.send_response(200); self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)

HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def test_a_launched_server_that_exits_during_a_step_is_named_in_its_verdict(run, tmp_path):
    script = tmp_path / "dies.py"
    script.write_text(LAUNCHED)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code, out, _, folder = run(
        f"http://127.0.0.1:{port}/v1",
        *("--launch", f"{sys.executable} {script} {port} 3", "--launch-log", str(tmp_path / "server.log")),
        *("--concurrency", "1,2", "--num-requests", "8", "--output-len", "1"),
    )
    assert code == 4 and folder is not None
    result = json.loads((folder / "serving" / "result.json").read_text())
    assert len(result["steps"]) == 1  # the second step was not run against a dead server
    reasons = " ".join(result["steps"][0]["verdict"]["reasons"])
    assert "the launched server exited with status 7 during this step; last log line: dying now" in reasons
    assert "exited with status 7" in summary_md(folder) and "no further step" in out


# ---- authentication and the API key ----------------------------------------------------------------
KEY = "sk-test-" + "5ecret" * 4


def _keyed(path, body, count, server):
    if server.headers[-1].get("authorization") != f"Bearer {KEY}":
        return _plain(401, b'{"error": "no key"}')
    if server.completions % 3 == 0:  # a server that echoes the key back in its error body
        return _plain(400, json.dumps({"error": f"bad request from key {KEY}"}).encode())
    return _stream(*_tokens(2, usage={"prompt_tokens": 2, "completion_tokens": 2}))


def _models_keyed(headers):
    return MODELS if headers.get("authorization") == f"Bearer {KEY}" else _plain(401, b"{}")


def test_a_401_on_the_model_list_says_authentication(run):
    with RawServer(_keyed, models=_models_keyed) as server:
        code, _, err, folder = run(server.url)
    assert code == 2 and "authentication failed" in _one_line(err) and "HTTP 401" in err and folder is None


@pytest.mark.parametrize("status", [401, 403])
def test_a_401_or_403_per_request_is_counted_as_authentication(run, status):
    with RawServer(lambda *a: _plain(status, b"{}")) as server:
        code, out, _, folder = run(server.url, "--num-requests", "3")
    assert code == 0 and _step(folder)["errors"] == {"authentication": 3}
    assert "authentication 3" in out and "authentication 3" in summary_md(folder)


@pytest.mark.parametrize("via", ["option", "environment"])
def test_the_api_key_is_sent_as_a_bearer_token_and_written_nowhere(run, tmp_path, monkeypatch, via):
    extra = ("--api-key", KEY) if via == "option" else ()
    if via == "environment":
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
    else:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with RawServer(_keyed, models=_models_keyed) as server:
        code, out, err, folder = run(server.url, "--num-requests", "6", "--output-len", "2", *extra)
        assert all(h.get("authorization") == f"Bearer {KEY}" for h in server.headers)
    step = _step(folder)
    assert code == 0 and step["completed"] == 4 and step["errors"] == {"http_400": 2}
    assert "***" in json.dumps(step["error_examples"])  # the echoed key, blanked
    written = [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert written and all(KEY not in p.read_text(errors="replace") for p in written)
    assert KEY not in out + err


# ---- model lists -------------------------------------------------------------------------------------
def test_a_model_list_over_a_mebibyte_is_read(run):
    many = {"data": [{"id": f"model-{i:07d}-" + "x" * 40} for i in range(60_000)] + [{"id": "m"}]}
    body = json.dumps(many).encode()
    assert len(body) > 3 << 20
    ok = _stream(*_tokens(2, usage={"prompt_tokens": 1, "completion_tokens": 2}))
    with RawServer(lambda *a: ok, models=body) as server:
        code, _, _, folder = run(server.url, "--num-requests", "2", "--output-len", "2")
    assert code == 0 and _step(folder)["completed"] == 2


def test_a_model_list_over_its_bound_is_one_line_exit_4(run):
    body = b'{"data": [' + b'{"id": "xxxxxxxxxxxxxxxx"},' * 700_000 + b'{"id": "m"}]}'
    with RawServer(lambda *a: None, models=body) as server:
        code, _, err, folder = run(server.url)
    assert code == 4 and "over 16 MiB of model list" in _one_line(err) and folder is None


def test_a_model_list_that_never_ends_is_cut_at_its_deadline(run, monkeypatch):
    """Bytes dribble in, each within the socket timeout: before, the read never ended (a hang)."""
    monkeypatch.setattr(serving_options, "MODELS_DEADLINE_S", 1.0)

    def dribble(headers):
        def write(sock, stopping):
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
            while not stopping.wait(0.05):
                sock.sendall(b" ")

        return write

    with RawServer(lambda *a: None, models=dribble) as server:
        code, _, err, folder = run(server.url)
    assert code == 4 and "to send its model list" in _one_line(err) and folder is None


# ---- usage figures that cannot be true, replies cut short -------------------------------------------
@pytest.mark.parametrize("completion", [-5, 10**12, "64", True])
def test_an_impossible_usage_is_refused_for_its_request_with_a_note(run, completion):
    ok = _stream(*_tokens(4, usage={"prompt_tokens": 2, "completion_tokens": completion}))
    with RawServer(lambda *a: ok) as server:
        code, _, _, folder = run(server.url, "--num-requests", "3", "--output-len", "4")
    step = _step(folder)
    assert code == 0 and step["completed"] == 3 and step["token_source"] == ["events"]
    assert step["output_tokens"] == 12 and 0 < step["throughput"]["output_tokens_per_s"]["value"] < 1e9
    assert step["audits"]["usage_refused"]["requests"] == 3
    assert "usage refused as impossible" in summary_md(folder)


def test_a_reply_cut_short_is_an_error_and_strict_fails_the_run(run):
    """finish_reason "length" after 3 of 8 tokens asked: before, it counted as complete."""
    with LoopbackServer(lambda i, body, n: Plan(gaps_s=[0.0] * 2), model="m") as server:
        code, out, err, folder = run(server.url, "--num-requests", "4", "--output-len", "8", "--strict")
    step = _step(folder)
    assert step["errors"] == {"cut_short": 4} and step["completed"] == 0
    assert code == 3 and "--strict" in err and "cut_short 4" in out
    assert any("error rate 100.0%" in r for r in step["verdict"]["reasons"])


def test_an_error_rate_above_its_bound_is_invalid_and_below_it_valid(run, tmp_path):
    plans = [Plan(status=500)] + [Plan(gaps_s=[0.0])] * 9
    for bound, invalid in (("0.01", True), ("0.2", False)):
        with LoopbackServer(lambda i, body, n: plans[i % 10], model="m") as server:
            code, _, _, folder = run(
                server.url, "--num-requests", "10", "--output-len", "2", "--max-error-rate", bound,
                output=tmp_path / bound,
            )  # fmt: skip
        reasons = _step(folder)["verdict"]["reasons"]
        assert code == 0 and any("above max_error_rate" in r for r in reasons) is invalid


def test_a_server_that_ignores_max_tokens_fails_the_output_length_audit(run):
    with LoopbackServer(steady(0.0, 0.0), model="m") as server:
        server.script = lambda i, body, n: Plan(gaps_s=[0.0] * (2 * body["max_tokens"] - 1))
        code, _, _, folder = run(server.url, "--num-requests", "4", "--output-len", "4")
    step = _step(folder)
    assert code == 0 and step["audits"]["output_length"]["ratio"] == 2.0
    assert any(
        re.search(r"output length audit: .* 8\.0 tokens .* 4\.0 were asked", r) for r in step["verdict"]["reasons"]
    )


def test_host_yaml_takes_strict_as_a_flag_and_no_api_key(tmp_path):
    from common.errors import ConfigError
    from tools.serving.options import config_argv

    argv = config_argv(
        {"url": "http://127.0.0.1:9/v1", "served_model": "m", "strict": True}, "h.yaml", tmp_path, tmp_path
    )
    assert "--strict" in argv and "True" not in argv
    assert "--strict" not in config_argv({"url": "u", "strict": False}, "h.yaml", tmp_path, tmp_path)
    with pytest.raises(ConfigError, match="unknown entry 'api_key'"):
        config_argv({"url": "u", "api_key": KEY}, "h.yaml", tmp_path, tmp_path)
