"""The streaming OpenAI-compatible client: one request, its SSE stream, and what it measured.

Definitions of the figures are in ``tools/serving/__init__.py``. Each request is timed on
one clock (injectable: the tests drive a fake one from the server side). A chunk's arrival
is read once, when its bytes reach the connection (``StampingProtocol``, on connections made by
``stamping_connector``; else when the reading coroutine gets them); every event completed by
the bytes read so far carries the latest arrival.

Errors are kept with the request, never raised: ``kind`` is one of
  connect     the connection failed or was refused;
  http_<N>    the server answered status N (429 and 500 included) instead of a stream;
  stall       no byte for ``stall_timeout_s`` in the middle of a request;
  timeout     the request took longer than ``request_timeout_s``;
  dropped     the connection closed before the stream's ``data: [DONE]`` (a stream that ends
              cleanly after a choice with a ``finish_reason`` is complete without it);
  unfinished  the stream ended with ``data: [DONE]`` but no choice said why it finished (no
              ``finish_reason``): an OpenAI-compatible server always says, so the reply may be cut;
  malformed   an SSE event that is not JSON, or not a completion chunk;
  stream_error the server put an error object in the stream;
  not_sse     a 200 answer that is not ``text/event-stream``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

Clock = Callable[[], int]
TOKEN_SOURCES = ("tokenizer", "usage", "events")


@dataclass
class RequestSpec:
    """One request to issue. ``prompt`` is a string (completions) or a list of chat messages
    (chat); ``history`` marks a multi-turn request whose messages grow with the replies."""

    index: int
    prompt: Any
    max_tokens: int
    input_tokens: int | None = None  # known by construction (synthetic with a tokenizer)
    arrival_s: float | None = None  # a trace's timestamp, from the trace's start
    group: int | None = None  # shared-prefix group
    conversation: int | None = None  # multi-turn: which conversation, and which turn
    turn: int = 0


@dataclass
class RequestRecord:
    index: int
    scheduled_ns: int | None = None  # when the load said it should start (rate modes)
    sent_ns: int = 0
    token_ns: list[int] = field(default_factory=list)  # each token event's arrival
    end_ns: int | None = None
    text: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None
    token_source: str | None = None
    usage: dict | None = None
    usage_output_tokens: int | None = None  # what the server's usage said, whichever counted
    finish_reason: str | None = None  # the choice's, as the server sent it ("length", "stop", ...)
    error: dict | None = None  # {"kind": ..., "detail": ...}
    status: int | None = None
    conversation: int | None = None
    turn: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None and self.end_ns is not None and bool(self.token_ns)

    @property
    def ttft_ns(self) -> int | None:
        return self.token_ns[0] - self.sent_ns if self.token_ns else None

    @property
    def e2e_ns(self) -> int | None:
        return self.end_ns - self.sent_ns if self.end_ns is not None else None

    def itl_ns(self) -> list[int]:
        return [b - a for a, b in zip(self.token_ns, self.token_ns[1:])]

    @property
    def tpot_ns(self) -> float | None:
        n = self.output_tokens or 0
        if n < 2 or len(self.token_ns) < 2:  # one event holds no time between tokens
            return None
        return (self.token_ns[-1] - self.token_ns[0]) / (n - 1)

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "ok": self.ok,
            "ttft_ms": _ms(self.ttft_ns),
            "tpot_ms": _ms(self.tpot_ns),
            "e2e_ms": _ms(self.e2e_ns),
            "itl_ms": [g / 1e6 for g in self.itl_ns()],
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "token_source": self.token_source,
            "finish_reason": self.finish_reason,
            "error": self.error,
            "conversation": self.conversation,
            "turn": self.turn,
        }


def finish_reason_name(value: Any) -> str:
    """A choice's ``finish_reason`` as a name: OpenAI's and vLLM's are strings; SGLang's an object
    with a ``type`` ({"type": "length", "length": 64})."""
    if isinstance(value, dict) and isinstance(value.get("type"), str):
        return value["type"]
    return str(value)


def _ms(ns: float | None) -> float | None:
    return None if ns is None else ns / 1e6


class MalformedSSE(Exception):
    pass


class StreamError(Exception):
    """The server reported an error inside a 200 stream (vLLM sends ``data: {"error": …}``)."""


class SSEParser:
    """Server-sent events from bytes as they arrive: ``feed`` returns the ``data`` payloads of
    the events its bytes completed (a payload may span chunks; CRLF and LF line ends both)."""

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[bytes] = []

    @property
    def pending(self) -> bool:
        """Bytes of an event not yet completed."""
        return bool(self._buffer.strip() or self._data)

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buffer += chunk
        events: list[bytes] = []
        while True:
            cut = self._buffer.find(b"\n")
            if cut < 0:
                return events
            line, self._buffer = self._buffer[:cut], self._buffer[cut + 1 :]
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if self._data:
                    events.append(b"\n".join(self._data))
                    self._data = []
            elif line.startswith(b":"):
                continue  # a comment (keep-alive)
            else:
                name, _, value = line.partition(b":")
                if value.startswith(b" "):
                    value = value[1:]
                if name == b"data":
                    self._data.append(value)
                elif name not in (b"event", b"id", b"retry"):
                    raise MalformedSSE(f"not an SSE line: {line[:60]!r}")


def chunk_text(payload: dict, chat: bool) -> str | None:
    """The generated text an SSE chunk carries, or None when it carries no token (the chat
    role preamble, a finish-only event, the usage event)."""
    choices = payload.get("choices")
    if not isinstance(choices, list):
        raise MalformedSSE("an SSE event without 'choices'")
    if not choices:
        return None
    choice = choices[0]
    if not isinstance(choice, dict):
        raise MalformedSSE("an SSE event whose choice is not an object")
    if chat:
        delta = choice.get("delta") or {}
        text = delta.get("content") or delta.get("reasoning_content")
    else:
        text = choice.get("text")
    if text is None or (text == "" and (chat or choice.get("finish_reason") is not None)):
        return None
    if not isinstance(text, str):
        raise MalformedSSE("an SSE event whose text is not a string")
    return text


class StampingProtocol:
    """Sits between the socket transport and aiohttp's protocol and reads the clock the moment
    bytes arrive (``data_received``, run as soon as the event loop sees the socket ready), so a
    token's arrival is not delayed by whatever the loop runs before the reading coroutine resumes
    (other streams' chunks, new requests being built)."""

    def __init__(self, inner: Any, clock: Clock) -> None:
        self.inner, self.clock = inner, clock
        self.last_ns: int | None = None

    def connection_made(self, transport: Any) -> None:
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.last_ns = self.clock()
        self.inner.data_received(data)

    def eof_received(self) -> Any:
        return self.inner.eof_received()

    def connection_lost(self, exc: BaseException | None) -> None:
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


def stamping_connector(clock: Clock = time.perf_counter_ns, **options: Any) -> Any:
    """An aiohttp TCP connector whose connections stamp arrivals (``StampingProtocol``). It hooks
    ``TCPConnector._wrap_create_connection``; where an aiohttp lacks it, the connector is plain and
    the client stamps when its coroutine resumes instead."""
    import aiohttp

    class Connector(aiohttp.TCPConnector):
        # aiohttp's private hook, whose keyword-only signature changes between releases: taken as *args, **kwargs
        async def _wrap_create_connection(self, factory: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            transport, protocol = await super()._wrap_create_connection(
                lambda: StampingProtocol(factory(), clock), *args, **kwargs
            )
            return transport, protocol.inner if isinstance(protocol, StampingProtocol) else protocol

    if not hasattr(aiohttp.TCPConnector, "_wrap_create_connection"):
        return aiohttp.TCPConnector(**options)
    return Connector(**options)


def request_body(spec: RequestSpec, model: str, chat: bool, extra: dict | None = None) -> dict:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": spec.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if chat:
        body["messages"] = spec.prompt if isinstance(spec.prompt, list) else [{"role": "user", "content": spec.prompt}]
    else:
        body["prompt"] = spec.prompt
    body.update(extra or {})
    return body


async def stream_request(
    session: Any,
    url: str,
    body: dict,
    record: RequestRecord,
    chat: bool,
    clock: Clock = time.perf_counter_ns,
    timeout: Any = None,
) -> RequestRecord:
    """POST ``body`` to ``url`` and read its stream into ``record`` (errors included, never raised)."""
    import asyncio

    import aiohttp

    parser = SSEParser()
    texts: list[str] = []
    done = finished = False
    record.sent_ns = clock()
    try:
        async with session.post(url, json=body, timeout=timeout) as response:
            record.status = response.status
            if response.status != 200:
                detail = (await response.text())[:200]
                record.error = {"kind": f"http_{response.status}", "detail": " ".join(detail.split())}
                record.end_ns = clock()
                return record
            kind = response.headers.get("Content-Type", "")
            if not kind.startswith("text/event-stream"):
                record.error = {"kind": "not_sse", "detail": f"Content-Type {kind!r}"}
                record.end_ns = clock()
                return record
            stream = response.content
            transport = getattr(response.connection, "transport", None)
            stamper = transport.get_protocol() if transport is not None else None
            if not isinstance(stamper, StampingProtocol):
                stamper = None
            while not done:
                chunk = await stream.readany()
                now = stamper.last_ns if stamper is not None and stamper.last_ns is not None else clock()
                if not chunk:
                    break
                for data in parser.feed(chunk):
                    if data == b"[DONE]":
                        done = True
                        record.end_ns = now
                        break
                    try:
                        payload = json.loads(data)
                    except ValueError:
                        raise MalformedSSE(f"an SSE event that is not JSON: {data[:60]!r}") from None
                    if not isinstance(payload, dict):
                        raise MalformedSSE(f"an SSE event that is not a JSON object: {data[:60]!r}")
                    if "error" in payload and "choices" not in payload:
                        raise StreamError(
                            f"the server sent an error in the stream: {json.dumps(payload['error'])[:120]}"
                        )
                    if isinstance(payload.get("usage"), dict):
                        record.usage = payload["usage"]
                    choices = payload.get("choices")
                    if choices and isinstance(choices[0], dict) and choices[0].get("finish_reason") is not None:
                        finished = True
                        record.finish_reason = finish_reason_name(choices[0]["finish_reason"])
                    text = chunk_text(payload, chat)
                    if text is not None:
                        record.token_ns.append(now)
                        texts.append(text)
                    elif finished and not record.token_ns:
                        # The finish event is the first to carry the reply: its tokens' text was empty, or
                        # the server merged every token into it (vLLM under load; a CI run saw one request
                        # of 400 counted failed with no error). Its arrival is the first output's.
                        record.token_ns.append(now)
            if not done and finished and stream.at_eof() and not parser.pending:
                record.end_ns = clock()  # a server that ends a finished stream without [DONE] (TGI does)
            elif done and not finished:
                record.error = {
                    "kind": "unfinished",
                    "detail": f"[DONE] came with no finish_reason after {len(record.token_ns)} token events",
                }
            elif not done:
                record.error = {
                    "kind": "dropped",
                    "detail": f"the stream ended before [DONE] after {len(record.token_ns)} token events",
                }
    except MalformedSSE as exc:
        record.error = {"kind": "malformed", "detail": str(exc)}
    except StreamError as exc:
        record.error = {"kind": "stream_error", "detail": str(exc)}
    except aiohttp.SocketTimeoutError:
        record.error = {
            "kind": "stall",
            "detail": f"no data for {getattr(timeout, 'sock_read', None)} s after {len(record.token_ns)} token events",
        }
    except (asyncio.TimeoutError, TimeoutError):
        record.error = {
            "kind": "timeout",
            "detail": f"over {getattr(timeout, 'total', None)} s after {len(record.token_ns)} token events",
        }
    except aiohttp.ClientPayloadError as exc:
        record.error = {"kind": "dropped", "detail": f"{_reason(exc)} after {len(record.token_ns)} token events"}
    except aiohttp.ServerDisconnectedError:
        record.error = {
            "kind": "dropped",
            "detail": f"the server closed the connection after {len(record.token_ns)} token events",
        }
    except aiohttp.ClientConnectorError as exc:
        record.error = {"kind": "connect", "detail": _reason(exc)}
    except (aiohttp.ClientError, OSError) as exc:
        record.error = {"kind": "dropped" if record.token_ns else "connect", "detail": _reason(exc)}
    record.text = "".join(texts)
    if record.end_ns is None:
        record.end_ns = clock()
    return record


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def count_tokens(record: RequestRecord, prompt: Any, tokenizer: Any = None, prefer_usage: bool = False) -> None:
    """Fill ``input_tokens`` and ``output_tokens``: the tokenizer when given, else the server's
    ``usage``, else the token events (output) and nothing (input). ``prefer_usage``: the server's
    ``usage`` first (re-tokenising generated text need not give back the generated ids: a random
    model's 64 ids re-encode to about 85 tokens of its own tokenizer, and AIPerf warns the same)."""
    usage = record.usage or {}
    if isinstance(usage.get("completion_tokens"), int):
        record.usage_output_tokens = usage["completion_tokens"]
    if tokenizer is not None and not (prefer_usage and record.usage_output_tokens is not None):
        record.token_source = "tokenizer"
        record.output_tokens = len(tokenizer.encode(record.text, add_special_tokens=False)) if record.text else 0
        text = prompt if isinstance(prompt, str) else "\n".join(str(m.get("content", "")) for m in prompt)
        record.input_tokens = len(tokenizer.encode(text))
    elif isinstance(usage.get("completion_tokens"), int):
        record.token_source = "usage"
        record.output_tokens = usage["completion_tokens"]
        record.input_tokens = usage.get("prompt_tokens") if isinstance(usage.get("prompt_tokens"), int) else None
    else:
        record.token_source = "events"
        record.output_tokens = len(record.token_ns)
        record.input_tokens = None
