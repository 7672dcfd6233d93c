"""Load modes: N closed-loop streams, or requests arriving at a rate (Poisson, constant, or gamma
with a burstiness knob), optionally capped by a maximum concurrency, or a trace's own timestamps.

  concurrency N   N streams; each sends its next request (or conversation) when the last ended.
  rate R          request i arrives at the sum of i inter-arrival gaps drawn with the seed:
                  poisson = exponential gaps of mean 1/R; constant = 1/R each; gamma = shape
                  ``burstiness``, scale 1/(R x burstiness) (mean 1/R; below 1 burstier than
                  Poisson, above 1 more regular); R = inf sends them all at once.
  max_concurrency with a rate: an arrival waits for a free slot (its TTFT still counts from
                  when it was sent; the wait is reported as ``schedule_lag_ms``).
  trace           each request at its own timestamp.

A multi-turn conversation is one unit of load: its turns go one after the other on one slot,
each carrying the conversation so far (the server's own replies included).
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterable, Iterator

from common.errors import ConfigError, shown
from tools.serving.client import (
    Channel,
    Clock,
    RequestRecord,
    RequestSpec,
    audit_record,
    count_tokens,
    request_body,
    stamping_connector,
    stream_request,
)

ARRIVALS = ("poisson", "constant", "gamma")


@dataclass(frozen=True)
class Load:
    concurrency: int | None = None
    rate: float | None = None  # requests/s; math.inf: all at once
    arrival: str = "poisson"
    burstiness: float = 1.0
    max_concurrency: int | None = None

    def __post_init__(self) -> None:
        if self.concurrency is not None and (not isinstance(self.concurrency, int) or self.concurrency < 1):
            raise ConfigError(f"concurrency: {shown(self.concurrency)} must be a positive integer")
        if self.rate is not None and not self.rate > 0:
            raise ConfigError(f"request_rate: {shown(self.rate)} must be positive (or inf)")
        if self.max_concurrency is not None and (not isinstance(self.max_concurrency, int) or self.max_concurrency < 1):
            raise ConfigError(f"max_concurrency: {shown(self.max_concurrency)} must be a positive integer")
        if self.arrival not in ARRIVALS:
            raise ConfigError(f"arrival: {shown(self.arrival)} is not one of {', '.join(ARRIVALS)}")
        if not self.burstiness > 0:
            raise ConfigError(f"burstiness: {shown(self.burstiness)} must be positive")
        if self.concurrency is not None and self.rate is not None:
            raise ConfigError("concurrency and request_rate: give one (cap a rate with max_concurrency)")

    @property
    def label(self) -> str:
        if self.concurrency is not None:
            return f"concurrency {self.concurrency}"
        if self.rate is None:
            return "trace" + (f", max concurrency {self.max_concurrency}" if self.max_concurrency else "")
        shape = self.arrival if self.arrival != "gamma" else f"gamma burstiness {self.burstiness:g}"
        cap = f", max concurrency {self.max_concurrency}" if self.max_concurrency else ""
        return f"rate {self.rate:g}/s {shape}{cap}"

    def to_dict(self) -> dict:
        return {
            "concurrency": self.concurrency,
            "request_rate": None if self.rate is None else (self.rate if math.isfinite(self.rate) else "inf"),
            "arrival": self.arrival if self.rate is not None else None,
            "burstiness": self.burstiness if self.arrival == "gamma" and self.rate is not None else None,
            "max_concurrency": self.max_concurrency,
        }


def arrivals(rate: float, arrival: str, burstiness: float, seed: int) -> Iterator[float]:
    """Arrival offsets in seconds from the start (the first at 0), reproducible from ``seed``."""
    rng = random.Random(seed)
    at = 0.0
    while True:
        yield at
        if math.isinf(rate):
            continue
        if arrival == "constant":
            at += 1.0 / rate
        elif arrival == "poisson":
            at += rng.expovariate(rate)
        else:
            at += rng.gammavariate(burstiness, 1.0 / (rate * burstiness))


@dataclass
class Endpoint:
    url: str  # …/v1
    model: str
    chat: bool = False
    extra: dict = field(default_factory=dict)  # added to every request body (ignore_eos, temperature, …)
    stall_timeout_s: float = 30.0
    request_timeout_s: float = 600.0
    tokenizer: Any = None
    prefer_usage: bool = False  # count with the server's usage even when a tokenizer is given
    api_key: str | None = field(default=None, repr=False)  # sent as a bearer token, never written

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    @property
    def route(self) -> str:
        return self.url.rstrip("/") + ("/chat/completions" if self.chat else "/completions")


@dataclass
class LoadResult:
    records: list[RequestRecord]
    start_ns: int
    end_ns: int
    stopped_by: str | None = None


Stop = Callable[[list[RequestRecord], int], bool]  # (finished records, now_ns) -> stop issuing


async def run_load(
    endpoint: Endpoint,
    sessions: Iterable[list[RequestSpec]],
    load: Load,
    seed: int = 0,
    clock: Clock = time.perf_counter_ns,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    stop: Stop | None = None,
    stamp_arrivals: bool = True,
) -> LoadResult:
    """Issue ``sessions`` (each a chain of one or more requests) under ``load``; every request's
    record, in completion order. ``stop`` is asked after each request: once True nothing new starts."""
    import aiohttp

    timeout = aiohttp.ClientTimeout(
        total=endpoint.request_timeout_s,
        sock_read=endpoint.stall_timeout_s,
        sock_connect=min(10.0, endpoint.request_timeout_s),
    )

    def connector(**fresh: Any) -> Any:
        if stamp_arrivals:
            return stamping_connector(clock, limit=0, ttl_dns_cache=None, **fresh)
        return aiohttp.TCPConnector(limit=0, ttl_dns_cache=None, **fresh)

    headers = endpoint.headers
    async with (
        aiohttp.ClientSession(connector=connector(), timeout=timeout, headers=headers) as http,
        aiohttp.ClientSession(connector=connector(force_close=True), timeout=timeout, headers=headers) as fresh,
    ):
        channel = Channel(http, endpoint.route, endpoint.chat, clock, timeout, fresh, endpoint.api_key)
        issuer = _Issuer(endpoint, channel, stop)
        start = clock()
        chains = iter(sessions)
        if load.concurrency is not None:
            await asyncio.gather(*(issuer.stream(chains) for _ in range(load.concurrency)))
        else:
            await issuer.arrive(chains, load, _Schedule(start, seed, sleep))
        end = clock()
    return LoadResult(issuer.records, start, end, "stop rule" if issuer.halted else None)


def _raise_if_cancelled() -> None:
    """A cancelled task sends no further request. A request's reading may end in a library's own error
    instead of the CancelledError (aiohttp closing the connection under it), and ``stream_request``
    records that as the request's error: its task's cancel request is what still says so."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError()


@dataclass(frozen=True)
class _Schedule:
    """When arrivals are due: ``start`` (the clock's ns), the gaps' seed, and how the client waits."""

    start: int
    seed: int
    sleep: Callable[[float], Awaitable[Any]]


@dataclass
class _Issuer:
    """Sends chains of requests on ``channel`` and keeps their records; ``halted`` once ``stop`` says so."""

    endpoint: Endpoint
    channel: Channel
    stop: Stop | None
    records: list[RequestRecord] = field(default_factory=list)
    halted: bool = False

    async def one(self, chain: list[RequestSpec], scheduled_ns: int | None, slot_ns: int | None = None) -> None:
        """A chain's requests one after the other (a conversation's turns carry the replies so far)."""
        endpoint, clock = self.endpoint, self.channel.clock
        history: list[dict] = []
        for spec in chain:
            prompt = history + spec.prompt if spec.conversation is not None else spec.prompt
            record = RequestRecord(
                spec.index, scheduled_ns=scheduled_ns, conversation=spec.conversation, turn=spec.turn
            )
            body = request_body(
                RequestSpec(spec.index, prompt, spec.max_tokens), endpoint.model, endpoint.chat, endpoint.extra
            )
            record.slot_ns = slot_ns
            await stream_request(self.channel, body, record)
            _raise_if_cancelled()
            count_tokens(record, prompt, endpoint.tokenizer, endpoint.prefer_usage)
            audit_record(record)
            self.records.append(record)
            scheduled_ns = slot_ns = None
            if self.stop is not None and not self.halted and self.stop(self.records, clock()):
                self.halted = True
            if not record.ok:
                break  # a failed turn ends its conversation
            if spec.conversation is not None:
                history = prompt + [{"role": "assistant", "content": record.answer_text}]

    async def stream(self, chains: Iterator[list[RequestSpec]]) -> None:
        """One closed-loop stream: the next chain when the last ended."""
        while not self.halted:
            chain = next(chains, None)
            if chain is None:
                return
            await self.one(chain, None)

    async def arrive(self, chains: Iterator[list[RequestSpec]], load: Load, schedule: _Schedule) -> None:
        """Each chain at its arrival (the load's rate, or the trace's own time), capped by max_concurrency."""
        clock = self.channel.clock
        slots = asyncio.Semaphore(load.max_concurrency) if load.max_concurrency else None
        offsets = arrivals(load.rate, load.arrival, load.burstiness, schedule.seed) if load.rate is not None else None
        tasks = []

        async def capped(chain: list[RequestSpec], scheduled_ns: int) -> None:
            if slots is None:
                return await self.one(chain, scheduled_ns)
            waits = slots.locked()  # a slot free at once: any lateness is the client's own
            async with slots:
                if not self.halted:
                    await self.one(chain, scheduled_ns, clock() if waits else None)

        for chain in chains:
            at = next(offsets) if offsets is not None else (chain[0].arrival_s or 0.0)
            due = schedule.start + round(at * 1e9)
            delay = (due - clock()) / 1e9
            if delay > 0:
                await schedule.sleep(delay)
            if self.halted:
                break
            tasks.append(asyncio.ensure_future(capped(chain, due)))
        await asyncio.gather(*tasks)


def sessions_of(specs: list[RequestSpec] | list[list[RequestSpec]]) -> list[list[RequestSpec]]:
    return [s if isinstance(s, list) else [s] for s in specs]
