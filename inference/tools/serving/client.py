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
  malformed   an SSE event that is not JSON (nested past Python's recursion limit included), not a
              completion chunk, or an event or line over ``MAX_EVENT_BYTES``; or HTTP framing the
              client cannot parse (broken chunked encoding), ended at once, not at a timeout;
  stream_error the server put an error object in the stream;
  not_sse     a 200 answer that is not ``text/event-stream``;
  authentication  the server answered 401 or 403 (``--api-key`` / ``OPENAI_API_KEY`` missing or refused);
  cut_short   the reply finished with ``finish_reason: "length"`` while the server's usage says it
              generated fewer tokens than ``max_tokens`` asked (``audit_record``);
  unexpected  anything else the client raised while reading a reply (named, never a traceback).

Reasoning models stream their reasoning in a chat delta's ``reasoning_content`` (vLLM, SGLang; newer
vLLM also ``reasoning``) before the answer's ``content``. Both are generated tokens (TTFT is the first
of either, as vLLM's own client counts it); the record keeps the reasoning's events and text apart,
``ttfa`` is the time to the first answer token, and ``reasoning_tokens`` / ``answer_tokens`` split the
output (the server's ``usage.completion_tokens_details.reasoning_tokens`` where it gives one, else the
tokenizer on the reasoning text, else its events).

A request that fails before any byte of an answer because the server closed a kept-alive
connection (``ServerDisconnectedError``, a reset) is sent again once on a fresh connection
(``fresh``); the record counts it in ``retries``, and its times run from the second sending.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from common.errors import shown

Clock = Callable[[], int]
TOKEN_SOURCES = ("tokenizer", "usage", "events")
MAX_EVENT_BYTES = 16 << 20  # an SSE line or event longer than this is malformed (else it grows without end)
MAX_ERROR_BODY = 64 << 10  # how much of an error answer is read (its first 200 characters are kept)


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
    text: str = ""  # everything generated, reasoning included (what the tokenizer counts)
    reasoning_text: str = ""
    answer_text: str = ""  # the answer alone (a multi-turn conversation carries this)
    reasoning_events: int = 0
    answer_ns: int | None = None  # the first answer token event's arrival
    reasoning_tokens: int | None = None  # of output_tokens, the reasoning's (0 without reasoning)
    reasoning_source: str | None = None  # "usage", "tokenizer" or "events"
    input_tokens: int | None = None
    output_tokens: int | None = None
    token_source: str | None = None
    usage: dict | None = None
    usage_output_tokens: int | None = None  # what the server's usage said, whichever counted
    tokenizer_output_tokens: int | None = None  # what the tokenizer counts in the text, whichever counted
    finish_reason: str | None = None  # the choice's, as the server sent it ("length", "stop", ...)
    error: dict | None = None  # {"kind": ..., "detail": ...}
    status: int | None = None
    conversation: int | None = None
    turn: int = 0
    max_tokens: int | None = None  # what the request asked for (its body's max_tokens)
    slot_ns: int | None = None  # rate modes with a cap: when the request got its slot
    bytes_received: int = 0  # the answer's body bytes (the bound on a believable usage)
    retries: int = 0  # sent again on a fresh connection after a kept-alive one was closed
    notes: list[str] = field(default_factory=list)  # e.g. a usage figure refused

    @property
    def ok(self) -> bool:
        return self.error is None and self.end_ns is not None and bool(self.token_ns)

    @property
    def ttft_ns(self) -> int | None:
        return self.token_ns[0] - self.sent_ns if self.token_ns else None

    @property
    def ttfa_ns(self) -> int | None:
        """Time to the first answer token (TTFT when the reply has no reasoning); None without an answer."""
        return self.answer_ns - self.sent_ns if self.answer_ns is not None else None

    @property
    def answer_tokens(self) -> int | None:
        if self.output_tokens is None:
            return None
        return max(0, self.output_tokens - (self.reasoning_tokens or 0))

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
            "ttfa_ms": _ms(self.ttfa_ns),
            "tpot_ms": _ms(self.tpot_ns),
            "e2e_ms": _ms(self.e2e_ns),
            "itl_ms": [g / 1e6 for g in self.itl_ns()],
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "answer_tokens": self.answer_tokens,
            "reasoning_source": self.reasoning_source,
            "token_source": self.token_source,
            "finish_reason": self.finish_reason,
            "max_tokens": self.max_tokens,
            "usage_output_tokens": self.usage_output_tokens,
            "error": self.error,
            "retries": self.retries,
            "notes": self.notes,
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
        self._buffer = bytearray()
        self._scanned = 0  # the buffer's first bytes, known to hold no line end
        self._data: list[bytes] = []

    @property
    def pending(self) -> bool:
        """Bytes of an event not yet completed."""
        return bool(self._buffer.strip() or self._data)

    def feed(self, chunk: bytes) -> list[bytes]:
        # Each byte is searched for a line end once, and the buffer is cut once a call: a line that
        # comes in many chunks costs its length, not its length times its chunks.
        buffer = self._buffer
        buffer += chunk
        events: list[bytes] = []
        start = 0
        while True:
            cut = buffer.find(b"\n", max(start, self._scanned))
            if cut < 0:
                del buffer[:start]
                self._scanned = len(buffer)
                if len(buffer) > MAX_EVENT_BYTES:
                    raise MalformedSSE(f"an SSE line longer than {MAX_EVENT_BYTES >> 20} MiB")
                return events
            line, start = bytes(buffer[start:cut]), cut + 1
            self._scanned = 0
            self._line(line, events)

    def _line(self, line: bytes, events: list[bytes]) -> None:
        """One line of the stream: an event's end (an empty line), a comment, or a field."""
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line:
            if self._data:
                events.append(b"\n".join(self._data))
                self._data = []
        elif line.startswith(b":"):
            return  # a comment (keep-alive)
        else:
            name, _, value = line.partition(b":")
            if value.startswith(b" "):
                value = value[1:]
            if name == b"data":
                self._data.append(value)
                if sum(map(len, self._data)) > MAX_EVENT_BYTES:
                    raise MalformedSSE(f"an SSE event longer than {MAX_EVENT_BYTES >> 20} MiB")
            elif name not in (b"event", b"id", b"retry"):
                raise MalformedSSE(f"not an SSE line: {line[:60]!r}")


REASONING_FIELDS = ("reasoning_content", "reasoning")


def chunk_text(payload: dict, chat: bool) -> str | None:
    """The generated text an SSE chunk carries, or None when it carries no token (the chat
    role preamble, a finish-only event, the usage event)."""
    answer, reasoning = chunk_parts(payload, chat)
    if answer is None and reasoning is None:
        return None
    return (reasoning or "") + (answer or "")


def chunk_parts(payload: dict, chat: bool) -> tuple[str | None, str | None]:
    """The answer's and the reasoning's text an SSE chunk carries (each None when it carries none)."""
    choices = payload.get("choices")
    if not isinstance(choices, list):
        raise MalformedSSE("an SSE event without 'choices'")
    if not choices:
        return None, None
    choice = choices[0]
    if not isinstance(choice, dict):
        raise MalformedSSE("an SSE event whose choice is not an object")
    if chat:
        delta = choice.get("delta")
        if delta is None:
            delta = {}
        if not isinstance(delta, dict):
            raise MalformedSSE(f"an SSE event whose delta is a {type(delta).__name__}, not an object")
        text = delta.get("content")
        reasoning = next((delta[f] for f in REASONING_FIELDS if delta.get(f) is not None), None)
        if reasoning is not None and not isinstance(reasoning, str):
            raise MalformedSSE("an SSE event whose reasoning is not a string")
        if reasoning == "":
            reasoning = None
    else:
        text, reasoning = choice.get("text"), None
    if text is None or (text == "" and (chat or choice.get("finish_reason") is not None)):
        return None, reasoning
    if not isinstance(text, str):
        raise MalformedSSE("an SSE event whose text is not a string")
    return text, reasoning


class StampingProtocol:
    """Sits between the socket transport and aiohttp's protocol and reads the clock the moment
    bytes arrive (``data_received``, run as soon as the event loop sees the socket ready), so a
    token's arrival is not delayed by whatever the loop runs before the reading coroutine resumes
    (other streams' chunks, new requests being built)."""

    def __init__(self, inner: Any, clock: Clock) -> None:
        self.inner, self.clock = inner, clock
        self.last_ns: int | None = None
        self.on_failure: Callable[[BaseException], None] | None = None  # set while a reply is being read

    def connection_made(self, transport: Any) -> None:
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.last_ns = self.clock()
        self.inner.data_received(data)
        # aiohttp keeps an HTTP parse error mid-body (broken chunked encoding) on its protocol, not on
        # the body's reader, and drops its read timeout: the reader would wait for the total timeout.
        failure = getattr(self.inner, "exception", None)
        if self.on_failure is not None and callable(failure) and failure() is not None:
            self.on_failure(failure())

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


@dataclass(frozen=True)
class Channel:
    """Where and how a request is sent: the aiohttp ``session`` and ``url``, the chat API or not, the
    clock and timeout; ``fresh``: a session whose every connection is new, for the one retry after a
    kept-alive connection was found closed; ``secret``: the API key, blanked out of every error detail."""

    session: Any
    url: str
    chat: bool
    clock: Clock = time.perf_counter_ns
    timeout: Any = None
    fresh: Any = None
    secret: str | None = field(default=None, repr=False)


async def stream_request(channel: Channel, body: dict, record: RequestRecord) -> RequestRecord:
    """POST ``body`` on ``channel`` and read its stream into ``record`` (errors included, never raised)."""
    if isinstance(body.get("max_tokens"), int) and not isinstance(body.get("max_tokens"), bool):
        record.max_tokens = body["max_tokens"]
    try:
        texts = await _send(channel, body, record)
    except Exception as exc:  # noqa: BLE001 - no reply, however broken, may end the run
        record.error, texts = _error_of(exc, record, channel.timeout), []
    if not record.text:
        record.text = "".join(texts)
    if record.end_ns is None:
        record.end_ns = channel.clock()
    if record.error is not None:
        record.error["detail"] = scrub(record.error["detail"], channel.secret)
    return record


async def _send(channel: Channel, body: dict, record: RequestRecord) -> list[str]:
    """The reply's texts; once more on a fresh connection when the first closed before any answer."""
    texts = await _attempt(channel.session, body, record, channel)
    if texts is None and channel.fresh is not None:  # closed before any answer: once more, on a new connection
        record.retries += 1
        record.error, record.end_ns = None, None
        texts = await _attempt(channel.fresh, body, record, channel)
    if texts is None:
        record.error = {
            "kind": "dropped",
            "detail": "the server closed the connection before answering"
            + (" (again on a fresh connection)" if record.retries else ""),
        }
        texts = []
    return texts


def _error_of(exc: Exception, record: RequestRecord, timeout: Any) -> dict:
    """A failed request's error (kind and detail) for the exception its reading raised."""
    import aiohttp

    if isinstance(exc, MalformedSSE):
        return {"kind": "malformed", "detail": str(exc)}
    if isinstance(exc, StreamError):
        return {"kind": "stream_error", "detail": str(exc)}
    if isinstance(exc, aiohttp.SocketTimeoutError):
        return {"kind": "stall", "detail": f"no data for {_stall_s(timeout)} s{_after(record)}"}
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return {"kind": "timeout", "detail": f"over {getattr(timeout, 'total', None)} s{_after(record)}"}
    if isinstance(exc, aiohttp.ClientPayloadError):
        return {"kind": "dropped", "detail": f"{_reason(exc)}{_after(record)}"}
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return {"kind": "dropped", "detail": f"the server closed the connection{_after(record)}"}
    if isinstance(exc, aiohttp.ClientConnectorError):
        return {"kind": "connect", "detail": _reason(exc)}
    if isinstance(exc, aiohttp.ClientResponseError):  # HTTP the client cannot parse (a bad status line, header, chunk)
        return {"kind": "malformed", "detail": f"HTTP the client cannot parse: {_reason(exc)}"}
    if isinstance(exc, (aiohttp.ClientError, OSError)):
        return {"kind": "dropped" if record.status is not None else "connect", "detail": _reason(exc)}
    return {"kind": "unexpected", "detail": _reason(exc)}


def scrub(text: str, secret: str | None) -> str:
    """``text`` without ``secret`` (an API key a server echoed back is never written anywhere)."""
    return text.replace(secret, "***") if secret else text


def _stall_s(timeout: Any) -> Any:
    return getattr(timeout, "sock_read", None)


def _after(record: RequestRecord) -> str:
    return f" after {len(record.token_ns)} token events"


async def _attempt(session: Any, body: dict, record: RequestRecord, channel: Channel) -> list[str] | None:
    """One sending on ``session``: the reply's texts, or None when the connection closed before any
    byte of an answer (a kept-alive connection the server had closed). Errors of the reply are in ``record``."""
    import aiohttp

    record.sent_ns = channel.clock()
    record.status = None
    try:
        async with session.post(channel.url, json=body, timeout=channel.timeout) as response:
            return await _read_reply(response, record, channel.chat, channel.clock, channel.timeout)
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, ConnectionResetError) as exc:
        if record.status is None and not isinstance(exc, aiohttp.ClientConnectorError):
            return None
        raise


async def _read_reply(response: Any, record: RequestRecord, chat: bool, clock: Clock, timeout: Any) -> list[str]:
    import aiohttp

    record.status = response.status
    if response.status != 200:
        raw = await response.content.read(MAX_ERROR_BODY)  # any bytes: an error body need not be UTF-8
        detail = " ".join(raw.decode("utf-8", errors="replace").split())[:200]
        kind = "authentication" if response.status in (401, 403) else f"http_{response.status}"
        prefix = f"HTTP {response.status}: " if kind == "authentication" else ""
        record.error = {"kind": kind, "detail": prefix + detail}
        record.end_ns = clock()
        return []
    kind = response.headers.get("Content-Type", "")
    if not kind.startswith("text/event-stream"):
        record.error = {"kind": "not_sse", "detail": f"Content-Type {kind!r}"}
        record.end_ns = clock()
        return []
    stream = response.content
    transport = getattr(response.connection, "transport", None)
    stamper = transport.get_protocol() if transport is not None else None
    if not isinstance(stamper, StampingProtocol):
        stamper = None
    else:
        stamper.on_failure = lambda exc: stream.set_exception(
            aiohttp.ClientResponseError(response.request_info, (), status=400, message=str(exc))
        )
    try:
        return await _read_events(stream, stamper, record, chat, clock, _stall_s(timeout))
    finally:
        if stamper is not None:
            stamper.on_failure = None


@dataclass
class _Events:
    """A 200 stream's SSE events as they are read into ``record``: the texts of its token events, its
    answer and reasoning parts, and whether it finished and ended with [DONE]."""

    record: RequestRecord
    chat: bool
    texts: list[str] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    reasonings: list[str] = field(default_factory=list)
    done: bool = False
    finished: bool = False

    def take(self, data: bytes, now: int) -> None:
        """One event's data, arrived at ``now``."""
        record = self.record
        if data == b"[DONE]":
            self.done = True
            record.end_ns = now
            return
        payload = _event_payload(data)
        if isinstance(payload.get("usage"), dict):
            record.usage = payload["usage"]
        choices = payload.get("choices")
        first = choices[0] if isinstance(choices, list) and choices else None
        if isinstance(first, dict) and first.get("finish_reason") is not None:
            self.finished = True
            record.finish_reason = finish_reason_name(first["finish_reason"])
        answer, reasoning = chunk_parts(payload, self.chat)
        if answer is not None or reasoning is not None:
            record.token_ns.append(now)
            self.texts.append((reasoning or "") + (answer or ""))
            if reasoning is not None:
                record.reasoning_events += 1
                self.reasonings.append(reasoning)
            if answer is not None:
                self.answers.append(answer)
                if record.answer_ns is None:
                    record.answer_ns = now
        elif self.finished and not record.token_ns:
            # The finish event is the first to carry the reply: its tokens' text was empty, or
            # the server merged every token into it (vLLM under load; not counted, such a request
            # reads as failed with no error). Its arrival is the first output's.
            record.token_ns.append(now)
            record.answer_ns = now

    def close(self, ended_cleanly: bool, clock: Clock) -> list[str]:
        """The stream is over (``ended_cleanly``: at its end, nothing half-read): how it ended, in ``record``."""
        record = self.record
        if not self.done and self.finished and ended_cleanly:
            record.end_ns = clock()  # a server that ends a finished stream without [DONE] (TGI does)
        elif self.done and not self.finished:
            record.error = {
                "kind": "unfinished",
                "detail": f"[DONE] came with no finish_reason after {len(record.token_ns)} token events",
            }
        elif not self.done:
            record.error = {
                "kind": "dropped",
                "detail": f"the stream ended before [DONE] after {len(record.token_ns)} token events",
            }
        record.text = "".join(self.texts)
        record.answer_text, record.reasoning_text = "".join(self.answers), "".join(self.reasonings)
        return self.texts


async def _next_chunk(stream: Any, stamper: StampingProtocol | None, stall_s: Any) -> bytes:
    if stamper is None and stall_s:  # no protocol to see a broken body: bound every read by the stall
        try:
            return await asyncio.wait_for(stream.readany(), stall_s)
        except asyncio.TimeoutError:
            import aiohttp

            raise aiohttp.SocketTimeoutError() from None
    return await stream.readany()


async def _read_events(
    stream: Any, stamper: StampingProtocol | None, record: RequestRecord, chat: bool, clock: Clock, stall_s: Any
) -> list[str]:
    """The SSE events of a 200 stream into ``record``; the texts of its token events."""
    parser = SSEParser()
    events = _Events(record, chat)
    while not events.done:
        chunk = await _next_chunk(stream, stamper, stall_s)
        now = stamper.last_ns if stamper is not None and stamper.last_ns is not None else clock()
        if not chunk:
            break
        record.bytes_received += len(chunk)
        for data in parser.feed(chunk):
            events.take(data, now)
            if events.done:
                break
    return events.close(stream.at_eof() and not parser.pending, clock)


def _event_payload(data: bytes) -> dict:
    """An SSE event's JSON object; MalformedSSE for anything else (recursion past Python's limit included)."""
    try:
        payload = json.loads(data)
    except (ValueError, RecursionError):
        raise MalformedSSE(f"an SSE event that is not JSON (or nested too deeply): {data[:60]!r}") from None
    if not isinstance(payload, dict):
        raise MalformedSSE(f"an SSE event that is not a JSON object: {data[:60]!r}")
    if "error" in payload and "choices" not in payload:
        try:
            said = json.dumps(payload["error"])[:120]
        except (ValueError, RecursionError):
            said = "(an error object)"
        raise StreamError(f"the server sent an error in the stream: {said}")
    return payload


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def usage_count(record: RequestRecord, name: str, bound: int | None) -> int | None:
    """``usage[name]`` when it can be true: an integer (not a boolean), not negative, and not over
    ``bound`` (the bytes the answer took: no token arrives in less than a byte). Else None, with
    a note on the record saying why it was refused."""
    value = (record.usage or {}).get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        why = f"is {shown(value, 40)}, not an integer"
    elif value < 0:
        why = f"is negative ({value})"
    elif bound is not None and value > bound:
        why = f"is {value}, more tokens than the {bound} bytes received"
    else:
        return value
    record.notes.append(f"usage refused: {name} {why}")
    return None


def count_tokens(record: RequestRecord, prompt: Any, tokenizer: Any = None, prefer_usage: bool = False) -> None:
    """Fill ``input_tokens`` and ``output_tokens``: the tokenizer when given, else the server's
    ``usage``, else the token events (output) and nothing (input). ``prefer_usage``: the server's
    ``usage`` first (re-tokenising generated text need not give back the generated ids: a random
    model's 64 ids re-encode to about 85 tokens of its own tokenizer, and AIPerf warns the same).
    A usage figure that cannot be true (``usage_count``) is refused, with a note on the record."""
    completion = usage_count(record, "completion_tokens", record.bytes_received or None)  # 0: not read here
    prompt_tokens = usage_count(record, "prompt_tokens", None)
    record.usage_output_tokens = completion
    if tokenizer is not None:  # counted either way: the audit of the server's usage (figures.py)
        record.tokenizer_output_tokens = (
            len(tokenizer.encode(record.text, add_special_tokens=False)) if record.text else 0
        )
    if tokenizer is not None and not (prefer_usage and completion is not None):
        record.token_source = "tokenizer"
        record.output_tokens = record.tokenizer_output_tokens
        text = prompt if isinstance(prompt, str) else "\n".join(str(m.get("content", "")) for m in prompt)
        record.input_tokens = len(tokenizer.encode(text))
    elif completion is not None:
        record.token_source = "usage"
        record.output_tokens = completion
        record.input_tokens = prompt_tokens
    else:
        record.token_source = "events"
        record.output_tokens = len(record.token_ns)
        record.input_tokens = None
    count_reasoning(record, tokenizer)


def count_reasoning(record: RequestRecord, tokenizer: Any = None) -> None:
    """Of the output tokens, the reasoning's: the server's ``usage.completion_tokens_details.reasoning_tokens``
    when it is a believable integer (0..output), else the tokenizer on the reasoning text, else its events."""
    details = (record.usage or {}).get("completion_tokens_details")
    said = details.get("reasoning_tokens") if isinstance(details, dict) else None
    if (
        isinstance(said, int)
        and not isinstance(said, bool)
        and 0 <= said <= (record.usage_output_tokens if record.usage_output_tokens is not None else -1)
    ):
        record.reasoning_tokens, record.reasoning_source = said, "usage"
    elif not record.reasoning_events:
        record.reasoning_tokens, record.reasoning_source = 0, None
    elif tokenizer is not None:
        record.reasoning_tokens = len(tokenizer.encode(record.reasoning_text, add_special_tokens=False))
        record.reasoning_source = "tokenizer"
    else:
        record.reasoning_tokens, record.reasoning_source = record.reasoning_events, "events"
    if record.output_tokens is not None and record.reasoning_tokens is not None:
        record.reasoning_tokens = min(record.reasoning_tokens, record.output_tokens)


def audit_record(record: RequestRecord) -> None:
    """A completed reply cut short is an error of its own kind (``cut_short``): it finished for
    ``length`` while the server's usage says it generated fewer tokens than ``max_tokens`` asked.
    Only the server's usage can say this: a stream's events may each carry several tokens, and
    re-tokenised text need not give back the generated ids."""
    if (
        record.ok
        and record.finish_reason == "length"
        and record.max_tokens is not None
        and record.usage_output_tokens is not None
        and record.usage_output_tokens < record.max_tokens
    ):
        record.error = {
            "kind": "cut_short",
            "detail": f"finish_reason 'length' after {record.usage_output_tokens} of {record.max_tokens} tokens asked",
        }
