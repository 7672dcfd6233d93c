"""A real OpenAI-compatible streaming server on loopback whose timings and faults are scripted.

It speaks HTTP/1.1 (keep-alive, chunked SSE) on asyncio streams and answers
``GET /v1/models``, ``POST /v1/completions`` and ``POST /v1/chat/completions``. Each request
gets a ``Plan`` from the script: its status, TTFT, the gaps between its tokens, and a fault
(``stall``: stop sending and hold the connection; ``drop``: cut the connection; ``malformed``:
an event that is not JSON; ``error``: an error object in the stream) after some token.
``usage`` counts one prompt token per whitespace-separated word. A plan's first ``reasoning_tokens``
tokens stream as a chat delta's ``reasoning_content`` (``reasoning_field``), as a reasoning model's do on
vLLM and SGLang; the rest as ``content``.

``metrics=VllmMetrics(...)`` serves ``GET /metrics`` in vLLM's names (a chosen set of them, or bytes
that are not the Prometheus format, or an HTTP status instead): requests running are the requests in
flight, the TTFT histogram observes each request's scripted TTFT, the prefix-cache and preemption
counters and the speculative-decoding counters grow by fixed amounts per request. Without it
``/metrics`` answers 404, as a server that exposes none.

Timing is either real (``asyncio.sleep`` to an absolute schedule from the request's arrival)
or stepped on a ``SteppedClock`` shared with the client: the server sets the clock to each
token's scripted time, sends the token, and waits until the client has read the clock
before the next, so the client's TTFT, ITL, TPOT and E2E come out exact on any machine.

Used by the tests, by ``bench/serving_client_capacity.py`` (``stamp``: each token's text is
the server's ``perf_counter_ns`` at sending, so the client's own delay can be measured) and
from the command line: ``python -m tools.serving.loopback --ttft-ms 20 --itl-ms 5`` prints
``PORT <n>`` and serves until SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

FAULTS = (None, "stall", "drop", "malformed", "error", "unfinished")


@dataclass
class Plan:
    status: int = 200
    ttft_s: float = 0.0
    gaps_s: list[float] = field(default_factory=list)  # one per token after the first
    fault: str | None = None
    fault_at: int = 0  # tokens sent before the fault
    done_marker: bool = True  # end with ``data: [DONE]`` (TGI-style servers do not)
    text: str | None = None  # every token's text (default `` t<i>``; "" as a token that decodes to nothing)
    reasoning_tokens: int = (
        0  # chat: the first N tokens are the reasoning's (``reasoning_field``), the rest the answer's
    )
    reasoning_field: str = "reasoning_content"  # vLLM's and SGLang's name (newer vLLM also sends "reasoning")
    usage_reasoning: bool = False  # usage carries completion_tokens_details.reasoning_tokens (as OpenAI's does)

    @property
    def tokens(self) -> int:
        return len(self.gaps_s) + 1


Script = Callable[[int, dict, int], Plan]  # (request index, body, requests in flight including this one) -> Plan


def steady(ttft_ms: float, itl_ms: float, slope_ms: float = 0.0) -> Script:
    """Every request: ``max_tokens`` tokens, TTFT ``ttft_ms`` + ``slope_ms`` per other request
    in flight (a server whose latency rises with its load at a known rate), then ``itl_ms`` apart."""

    def plan(index: int, body: dict, in_flight: int) -> Plan:
        tokens = max(int(body.get("max_tokens") or 16), 1)
        return Plan(ttft_s=(ttft_ms + slope_ms * (in_flight - 1)) / 1e3, gaps_s=[itl_ms / 1e3] * (tokens - 1))

    return plan


TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
QUEUE_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 20.0, 40.0, 60.0, 120.0, 240.0, 480.0, 960.0)
METRIC_FIGURES = (
    "kv_cache_usage",
    "running",
    "waiting",
    "prefix_cache",
    "preemptions",
    "ttft",
    "queue_time",
    "spec_decode",
)


@dataclass
class VllmMetrics:
    """The loopback's ``GET /metrics``, in vLLM 0.32's names and labels (``engine``, ``model_name``).
    ``expose``: which figures (``METRIC_FIGURES``; default all); ``body``: answer these bytes instead
    (a broken exposition); ``status``: answer this status instead of 200."""

    expose: tuple[str, ...] = METRIC_FIGURES
    kv_cache_usage: float = 0.25  # the gauge's value (0..1)
    waiting: int = 0
    prefix_hit_share: float = 0.5  # of each request's prompt tokens, counted as prefix-cache hits
    preemptions_per_request: int = 0
    queue_time_s: float = 0.0  # each request's observation in the queue-time histogram
    spec_draft_tokens_per_request: int = 0
    spec_accepted_per_request: int = 0
    spec_drafts_per_request: int = 0
    body: bytes | None = None
    status: int = 200
    scrapes: int = 0  # how many times /metrics was asked for


class _Histogram:
    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds, self.counts, self.sum, self.count = bounds, [0] * len(bounds), 0.0, 0

    def observe(self, value: float) -> None:
        self.sum += value
        self.count += 1
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1

    def lines(self, name: str, labels: str) -> list[str]:
        out = [f"# HELP {name} Histogram.", f"# TYPE {name} histogram"]
        out += [f'{name}_bucket{{{labels},le="{b}"}} {float(c)}' for b, c in zip(self.bounds, self.counts)]
        out += [f'{name}_bucket{{{labels},le="+Inf"}} {float(self.count)}', f"{name}_sum{{{labels}}} {self.sum}"]
        return out + [f"{name}_count{{{labels}}} {float(self.count)}"]


class SteppedClock:
    """A clock in ns that only the server moves (thread-safe), counting the client's reads."""

    def __init__(self, start_ns: int = 0) -> None:
        self._lock = threading.Lock()
        self.value = start_ns
        self.reads = 0

    def __call__(self) -> int:
        with self._lock:
            self.reads += 1
            return self.value

    def set(self, value_ns: int) -> int:
        with self._lock:
            self.value = value_ns
            return self.reads


class LoopbackServer:
    """``with LoopbackServer(script, model="m") as server: server.url`` (…/v1), on its own thread."""

    def __init__(
        self,
        script: Script | None = None,
        model: str = "loopback",
        host: str = "127.0.0.1",
        port: int = 0,
        clock: SteppedClock | None = None,
        openai: bool = True,
        stamp: bool = False,
        metrics: VllmMetrics | None = None,
    ) -> None:
        self.script = script or steady(0.0, 0.0)
        self.model = model
        self.host, self.port = host, port
        self.clock = clock
        self.openai = openai
        self.stamp = stamp
        self.metrics = metrics
        self._ttft = _Histogram(TTFT_BUCKETS)
        self._queue = _Histogram(QUEUE_BUCKETS)
        self._counters = {
            "prefix_queries": 0,
            "prefix_hits": 0,
            "preemptions": 0,
            "drafts": 0,
            "draft": 0,
            "accepted": 0,
        }
        self.requests = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.bodies: list[dict] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stopping: asyncio.Event | None = None
        self._handlers: set[asyncio.Task] = set()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def __enter__(self) -> "LoopbackServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="loopback-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the loopback server did not start within 10 s")

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        asyncio.run(self.serve())

    async def serve(self, on_ready: Callable[[int], None] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        self._server = await asyncio.start_server(self._connection, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        if on_ready is not None:
            on_ready(self.port)
        try:
            await self._stopping.wait()
        finally:
            self._server.close()
            for task in list(self._handlers):
                task.cancel()
            await asyncio.gather(*self._handlers, return_exceptions=True)

    # ---- HTTP ----------------------------------------------------------------------------
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None  # a connection handler runs as a task
        self._handlers.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {
                    k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)
                }
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                keep = await self._answer(method, path.split("?")[0], body, writer)
                if not keep:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            self._handlers.discard(task)
            writer.transport.abort() if writer.transport is not None else None

    async def _plain(
        self, writer: asyncio.StreamWriter, status: int, payload: object, kind: str = "application/json"
    ) -> None:
        data = (json.dumps(payload) if kind == "application/json" else str(payload)).encode()
        reason = {200: "OK", 404: "Not Found", 429: "Too Many Requests", 500: "Internal Server Error"}.get(
            status, "Error"
        )
        writer.write(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data
        )
        await writer.drain()

    def metrics_text(self) -> str:
        """``GET /metrics``'s text in vLLM's names (``VllmMetrics``)."""
        m = self.metrics
        assert m is not None
        labels = f'engine="0",model_name="{self.model}"'
        lines: list[str] = []

        def one(name: str, kind: str, value: float) -> None:
            lines.extend([f"# HELP {name} {kind}.", f"# TYPE {name} {kind}", f"{name}{{{labels}}} {float(value)}"])

        c = self._counters
        if "running" in m.expose:
            one("vllm:num_requests_running", "gauge", self.in_flight)
        if "waiting" in m.expose:
            one("vllm:num_requests_waiting", "gauge", m.waiting)
        if "kv_cache_usage" in m.expose:
            one("vllm:kv_cache_usage_perc", "gauge", m.kv_cache_usage)
        if "prefix_cache" in m.expose:
            one("vllm:prefix_cache_queries_total", "counter", c["prefix_queries"])
            one("vllm:prefix_cache_hits_total", "counter", c["prefix_hits"])
        if "preemptions" in m.expose:
            one("vllm:num_preemptions_total", "counter", c["preemptions"])
        if "spec_decode" in m.expose:
            one("vllm:spec_decode_num_drafts_total", "counter", c["drafts"])
            one("vllm:spec_decode_num_draft_tokens_total", "counter", c["draft"])
            one("vllm:spec_decode_num_accepted_tokens_total", "counter", c["accepted"])
        if "ttft" in m.expose:
            lines += self._ttft.lines("vllm:time_to_first_token_seconds", labels)
        if "queue_time" in m.expose:
            lines += self._queue.lines("vllm:request_queue_time_seconds", labels)
        return "\n".join(lines) + "\n"

    async def _answer(self, method: str, path: str, raw: bytes, writer: asyncio.StreamWriter) -> bool:
        if method == "GET" and path == "/metrics" and self.metrics is not None:
            self.metrics.scrapes += 1
            if self.metrics.status != 200:
                await self._plain(writer, self.metrics.status, "no metrics here", "text/plain")
            elif self.metrics.body is not None:
                head = (
                    f"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {len(self.metrics.body)}\r\n\r\n"
                )
                writer.write(head.encode() + self.metrics.body)
                await writer.drain()
            else:
                await self._plain(writer, 200, self.metrics_text(), "text/plain; version=0.0.4")
            return True
        if not self.openai:
            await self._plain(writer, 404, "<html><body>not here</body></html>", "text/html")
            return True
        if method == "GET" and path == "/v1/models":
            await self._plain(
                writer, 200, {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "loopback"}]}
            )
            return True
        chat = path == "/v1/chat/completions"
        if method != "POST" or path not in ("/v1/completions", "/v1/chat/completions"):
            await self._plain(
                writer, 404, {"error": {"message": f"no route {method} {path}", "type": "NotFoundError", "code": 404}}
            )
            return True
        body = json.loads(raw or b"{}")
        if body.get("model") != self.model:
            message = f"The model `{body.get('model')}` does not exist."
            await self._plain(writer, 404, {"error": {"message": message, "type": "NotFoundError", "code": 404}})
            return True
        index = self.requests
        self.requests += 1
        self.bodies.append(body)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            plan = self.script(index, body, self.in_flight)
            if plan.status != 200:
                await self._plain(
                    writer, plan.status, {"error": {"message": f"scripted status {plan.status}", "code": plan.status}}
                )
                return True
            return await self._stream(writer, body, plan, chat)
        finally:
            self.in_flight -= 1

    async def _stream(self, writer: asyncio.StreamWriter, body: dict, plan: Plan, chat: bool) -> bool:
        headers_mark = self.clock.reads if self.clock is not None else None
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\n\r\n"
        )
        await writer.drain()
        if headers_mark is not None:
            # the client stamps every chunk's arrival, the headers' too: wait for that read, or it could
            # come after the first token's time is set and count as that token's stamp (a race under load)
            await self._read_after(headers_mark)
        start_s = time.monotonic()
        base_ns = self.clock.value if self.clock is not None else 0
        at_s = plan.ttft_s
        prompt_tokens = self._prompt_tokens(body, chat)
        for i in range(plan.tokens):
            if i:
                at_s += plan.gaps_s[i - 1]
            if plan.fault is not None and i == plan.fault_at:
                return await self._fault(writer, plan.fault)
            await self._token(writer, plan, chat, i, start_s + at_s, base_ns + round(at_s * 1e9))
        if plan.fault is not None and plan.fault_at >= plan.tokens:  # after the last token (its finish_reason sent)
            return await self._fault(writer, plan.fault)
        await self._finish(writer, plan, prompt_tokens)
        return True

    def _prompt_tokens(self, body: dict, chat: bool) -> int:
        """The prompt's words (the loopback's tokens), counted into the prefix cache and queue figures."""
        prompt = (
            body.get("prompt") if not chat else " ".join(str(m.get("content", "")) for m in body.get("messages") or [])
        )
        prompt_tokens = len(str(prompt or "").split())
        if self.metrics is not None:
            hits = round(self.metrics.prefix_hit_share * prompt_tokens)
            self._counters["prefix_queries"] += prompt_tokens
            self._counters["prefix_hits"] += hits
            self._queue.observe(self.metrics.queue_time_s)
        return prompt_tokens

    async def _token(
        self, writer: asyncio.StreamWriter, plan: Plan, chat: bool, i: int, due_s: float, due_ns: int
    ) -> None:
        """Token ``i``'s event at its scripted time: ``due_ns`` on the stepped clock, else ``due_s`` (monotonic)."""
        mark = None
        if self.clock is not None:
            mark = self.clock.set(due_ns)
        else:
            delay = due_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        text = f" {time.perf_counter_ns()}" if self.stamp else f" t{i}" if plan.text is None else plan.text
        last = i == plan.tokens - 1
        if i == 0 and self.metrics is not None:
            self._ttft.observe(plan.ttft_s)  # the scripted TTFT: what a server's own clock would record
        if chat:
            field_name = plan.reasoning_field if i < plan.reasoning_tokens else "content"
            choice = {"index": 0, "delta": {field_name: text}, "finish_reason": "length" if last else None}
            kind = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": text, "finish_reason": "length" if last else None}
            kind = "text_completion"
        self._event(writer, {"id": "cmpl-loopback", "object": kind, "model": self.model, "choices": [choice]})
        await writer.drain()
        if mark is not None:
            await self._read_after(mark)

    async def _finish(self, writer: asyncio.StreamWriter, plan: Plan, prompt_tokens: int) -> None:
        """The usage event, [DONE] (unless scripted away) and the chunked body's end."""
        usage: dict = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": plan.tokens,
            "total_tokens": prompt_tokens + plan.tokens,
        }
        if plan.usage_reasoning:
            usage["completion_tokens_details"] = {"reasoning_tokens": min(plan.reasoning_tokens, plan.tokens)}
        if self.metrics is not None:
            m, c = self.metrics, self._counters
            c["preemptions"] += m.preemptions_per_request
            c["drafts"] += m.spec_drafts_per_request
            c["draft"] += m.spec_draft_tokens_per_request
            c["accepted"] += m.spec_accepted_per_request
        self._event(
            writer,
            {"id": "cmpl-loopback", "object": "text_completion", "model": self.model, "choices": [], "usage": usage},
        )
        if plan.done_marker:
            self._chunk(writer, b"data: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def _read_after(self, mark: int, limit_s: float = 10.0) -> None:
        """Wait until the client has read the stepped clock since it was set (its arrival stamp)."""
        clock = self.clock
        assert clock is not None  # a mark is taken only from a stepped clock
        deadline = time.monotonic() + limit_s
        while clock.reads <= mark and time.monotonic() < deadline:
            await asyncio.sleep(0.0002)

    async def _fault(self, writer: asyncio.StreamWriter, fault: str) -> bool:
        if fault == "error":
            self._event(writer, {"error": {"message": "scripted error mid-stream", "code": 500}})
            self._chunk(writer, b"data: [DONE]\n\n")
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return True
        if fault == "unfinished":  # [DONE] where a finish_reason was due: the reply cut short
            self._chunk(writer, b"data: [DONE]\n\n")
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return True
        if fault == "malformed":
            self._chunk(writer, b"data: {not json\n\n")
            self._chunk(writer, b"data: [DONE]\n\n")
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return True
        if fault == "drop":
            writer.transport.abort()
            return False
        assert self._stopping is not None  # made by serve() before it accepts a connection
        await self._stopping.wait()  # stall: hold the connection, send nothing, until the server stops
        return False

    def _event(self, writer: asyncio.StreamWriter, payload: dict) -> None:
        self._chunk(writer, b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n")

    @staticmethod
    def _chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")


def main(argv: list[str] | None = None) -> int:
    import argparse
    import signal

    parser = argparse.ArgumentParser(
        description="A loopback OpenAI-compatible server streaming pre-made tokens at a scripted rate"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--model", default="loopback")
    parser.add_argument("--ttft-ms", type=float, default=0.0)
    parser.add_argument("--itl-ms", type=float, default=0.0)
    parser.add_argument("--slope-ms", type=float, default=0.0, help="TTFT added per other request in flight")
    parser.add_argument(
        "--stamp", action="store_true", help="each token's text is the server's perf_counter_ns when it was sent"
    )
    parser.add_argument("--metrics", action="store_true", help="serve GET /metrics in vLLM's names (VllmMetrics)")
    args = parser.parse_args(argv)
    server = LoopbackServer(
        steady(args.ttft_ms, args.itl_ms, args.slope_ms),
        args.model,
        args.host,
        args.port,
        stamp=args.stamp,
        metrics=VllmMetrics() if args.metrics else None,
    )

    async def run() -> None:
        loop = asyncio.get_running_loop()
        stopping = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping.set)
        serving = asyncio.ensure_future(server.serve(lambda port: print(f"PORT {port}", flush=True)))
        await stopping.wait()
        assert server._stopping is not None  # serve() made it before its first await
        server._stopping.set()
        await serving

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
