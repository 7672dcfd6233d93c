"""The server's own telemetry: its Prometheus ``/metrics``, scraped before and after each load step
and sampled during it, read with prometheus-client's parser (``text_string_to_metric_families``).

Each server names its figures its own way; ``SERVERS`` maps them (the first name a server exposes
wins, so an older name stands in for a renamed one). A server is recognised by its names' prefix
(``vllm:``, ``sglang:``, ``llamacpp:``, ``tgi_``). What a step reports (``step_report``):

  kv_cache_usage          the share of the KV cache in use (0..1): mean and peak over the samples;
  prefix_cache_hit_rate   hits / queries over the step (counters' differences; vLLM counts tokens),
                          or the mean of the server's own rate gauge (SGLang);
  running, waiting        requests running and waiting in the server: mean and peak over the samples;
  ttft_ms, queue_time_ms  the server's own histograms over the step (the buckets' difference between the
                          scrapes before and after): count, mean (exact, from the sums) and p50/p90/p99
                          interpolated within a bucket as Prometheus' ``histogram_quantile`` does (none
                          when every observation fell in one bucket: interpolation would give back only
                          the bucket's middle, e.g. 150 ms for vLLM's queue times of 0.01 ms in its first
                          bucket, 0-300 ms), with ``p50_bucket_ms``, the bucket the median lies in;
  preemptions             the counter's difference over the step;
  spec_decode             speculative decoding: accepted / draft tokens over the step (vLLM's counters)
                          and the mean accepted length per draft, or the server's gauges (SGLang).

A figure the server does not expose reads ``"not exposed"`` (``NOT_EXPOSED``), never 0. A server with no
``/metrics``, or one whose answer is not the Prometheus text format, is "not exposed" as a whole, with
one note saying why. Nothing here raises into the measurement: every failure of a scrape is a note.

The sampler (``Sampler``) runs beside the load in the client's event loop: one scrape at once, then one
every ``interval_s``; each scrape is bounded in time (``SCRAPE_TIMEOUT_S``) and size
(``MAX_METRICS_BYTES``), is parsed in a worker thread (a large exposition never holds up the loop that
stamps the tokens' arrivals), and the timeline it keeps is bounded (``MAX_SAMPLES``: past it, every other
sample is dropped and the interval doubles).
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import Any

from common.serving_record import NOT_EXPOSED

SCRAPE_TIMEOUT_S = 2.0
MAX_METRICS_BYTES = 8 << 20
MAX_SAMPLES = 600
DEFAULT_INTERVAL_S = 1.0


@dataclass(frozen=True)
class ServerNames:
    """One server's metric names (sample names, as the exposition writes them). A tuple: the first
    exposed wins."""

    prefix: str
    kv_cache_usage: tuple[str, ...] = ()  # gauge, 0..1
    running: tuple[str, ...] = ()  # gauge
    waiting: tuple[str, ...] = ()  # gauge
    prefix_hits: tuple[str, ...] = ()  # counter
    prefix_queries: tuple[str, ...] = ()  # counter
    prefix_hit_rate: tuple[str, ...] = ()  # gauge, 0..1 (where the server gives only the rate)
    preemptions: tuple[str, ...] = ()  # counter
    ttft: tuple[str, ...] = ()  # histogram (seconds), the base name
    queue_time: tuple[str, ...] = ()  # histogram (seconds), the base name
    spec_accepted: tuple[str, ...] = ()  # counter: accepted draft tokens
    spec_draft_tokens: tuple[str, ...] = ()  # counter: proposed draft tokens
    spec_drafts: tuple[str, ...] = ()  # counter: drafts (proposals)
    spec_accept_rate: tuple[str, ...] = ()  # gauge (where the server gives only the rate)
    spec_accept_length: tuple[str, ...] = ()  # gauge


# Looked up in each project's source: vLLM's v1 metrics (vllm/v1/metrics/loggers.py; gpu_* are the names
# before 0.10), SGLang's SchedulerMetricsCollector and TokenizerMetricsCollector
# (python/sglang/srt/metrics/collector.py), llama.cpp's server (tools/server/server.cpp, ``--metrics``;
# llama-cpp-python's server has no /metrics), TGI's router (docs/source/reference/metrics.md).
SERVERS: dict[str, ServerNames] = {
    "vllm": ServerNames(
        prefix="vllm:",
        kv_cache_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        running=("vllm:num_requests_running",),
        waiting=("vllm:num_requests_waiting",),
        prefix_hits=("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
        prefix_queries=("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
        prefix_hit_rate=("vllm:gpu_prefix_cache_hit_rate",),
        preemptions=("vllm:num_preemptions_total",),
        ttft=("vllm:time_to_first_token_seconds",),
        queue_time=("vllm:request_queue_time_seconds",),
        spec_accepted=("vllm:spec_decode_num_accepted_tokens_total",),
        spec_draft_tokens=("vllm:spec_decode_num_draft_tokens_total",),
        spec_drafts=("vllm:spec_decode_num_drafts_total",),
    ),
    "sglang": ServerNames(
        prefix="sglang:",
        kv_cache_usage=("sglang:token_usage",),
        running=("sglang:num_running_reqs",),
        waiting=("sglang:num_queue_reqs",),
        prefix_hit_rate=("sglang:cache_hit_rate",),
        preemptions=("sglang:num_retracted_requests_total",),
        ttft=("sglang:time_to_first_token_seconds",),
        queue_time=("sglang:queue_time_seconds",),
        spec_accept_rate=("sglang:spec_accept_rate",),
        spec_accept_length=("sglang:spec_accept_length",),
    ),
    "llamacpp": ServerNames(
        prefix="llamacpp:",
        kv_cache_usage=("llamacpp:kv_cache_usage_ratio",),
        running=("llamacpp:requests_processing",),
        waiting=("llamacpp:requests_deferred",),
    ),
    "tgi": ServerNames(
        prefix="tgi_",
        running=("tgi_batch_current_size",),
        waiting=("tgi_queue_size",),
        queue_time=("tgi_request_queue_duration",),
    ),
}
GAUGES = ("kv_cache_usage", "running", "waiting", "prefix_hit_rate", "spec_accept_rate", "spec_accept_length")
COUNTERS = ("prefix_hits", "prefix_queries", "preemptions", "spec_accepted", "spec_draft_tokens", "spec_drafts")
HISTOGRAMS = ("ttft", "queue_time")


class NotExposed(Exception):
    """The server's /metrics cannot be read (absent, refused, not Prometheus text, too large, too slow)."""


def metrics_url(endpoint: str) -> str:
    """The endpoint's origin + ``/metrics`` (vLLM, SGLang, llama.cpp and TGI serve it there, beside ``/v1``)."""
    from urllib.parse import urlsplit

    parts = urlsplit(endpoint)
    return f"{parts.scheme}://{parts.netloc}/metrics"


def identify(text: str) -> str | None:
    """Which known server wrote this exposition (by its names' prefix), or None."""
    for name, names in SERVERS.items():
        if any(line.startswith(names.prefix) for line in text.splitlines()):
            return name
    return None


def _relevant(text: str, names: ServerNames) -> str:
    """The lines of the names this map reads (and their # TYPE and # HELP lines): the parser reads only
    those (vLLM's exposition runs to hundreds of lines of which a dozen are used)."""
    wanted = {n for group in names.__dict__.values() if isinstance(group, tuple) for n in group}
    bases = {n[: -len("_total")] for n in wanted if n.endswith("_total")}  # a counter's family, as # TYPE may name it
    keep = []
    for line in text.splitlines():
        if line.startswith("#"):
            words = line.split(None, 3)
            if len(words) >= 3 and words[1] in ("TYPE", "HELP") and (words[2] in wanted or words[2] in bases):
                keep.append(line)
        elif any(line.startswith(n) and (len(line) == len(n) or line[len(n)] in " {_") for n in wanted):
            keep.append(line)
    return "\n".join(keep) + "\n"


@dataclass
class Snapshot:
    """One scrape: the mapped figures' values (summed over label sets; a ratio gauge averaged)."""

    t_s: float  # seconds from the step's start
    gauges: dict[str, float] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)
    histograms: dict[str, dict] = field(default_factory=dict)  # {"buckets": {le: count}, "sum": s, "count": c}


def parse(text: str, server: str, t_s: float = 0.0) -> Snapshot:
    """The exposition as a ``Snapshot`` of ``server``'s mapped figures (prometheus-client's parser);
    NotExposed when the text is not the Prometheus text format."""
    from prometheus_client.parser import text_string_to_metric_families

    names = SERVERS[server]
    samples: dict[str, list[tuple[dict, float]]] = {}
    try:
        for family in text_string_to_metric_families(_relevant(text, names)):
            for sample in family.samples:
                samples.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    except Exception as exc:  # noqa: BLE001 - the parser raises ValueError and others on garbage
        raise NotExposed(f"its answer is not the Prometheus text format ({_reason(exc)})") from None
    snap = Snapshot(t_s)
    for key in GAUGES:
        found = _first(samples, getattr(names, key))
        if found is not None:
            values = [v for _, v in found if math.isfinite(v)]
            if values:
                ratio = key in ("kv_cache_usage", "prefix_hit_rate", "spec_accept_rate", "spec_accept_length")
                snap.gauges[key] = sum(values) / len(values) if ratio else sum(values)
    for key in COUNTERS:
        found = _first(samples, getattr(names, key))
        if found is not None:
            snap.counters[key] = sum(v for _, v in found if math.isfinite(v))
    for key in HISTOGRAMS:
        for base in getattr(names, key):
            buckets = samples.get(base + "_bucket")
            if not buckets:
                continue
            by_le: dict[float, float] = {}
            for labels, value in buckets:
                le = _le(labels.get("le"))
                if le is not None and math.isfinite(value):
                    by_le[le] = by_le.get(le, 0.0) + value
            total = sum(v for _, v in samples.get(base + "_sum", []) if math.isfinite(v))
            count = sum(v for _, v in samples.get(base + "_count", []) if math.isfinite(v))
            snap.histograms[key] = {"buckets": by_le, "sum": total, "count": count}
            break
    return snap


def _first(samples: dict[str, list], candidates: tuple[str, ...]) -> list | None:
    for name in candidates:
        if name in samples:
            return samples[name]
    return None


def _le(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:120]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def fetch(session: Any, url: str) -> str:
    """GET ``url``'s text, bounded in time and size; NotExposed naming why not."""
    import aiohttp

    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_S)) as response:
            if response.status != 200:
                raise NotExposed(f"GET {url} answered HTTP {response.status}")
            raw = await response.content.read(MAX_METRICS_BYTES + 1)
            if len(raw) > MAX_METRICS_BYTES:
                raise NotExposed(f"GET {url} sent over {MAX_METRICS_BYTES >> 20} MiB")
    except NotExposed:
        raise
    except (asyncio.TimeoutError, TimeoutError):
        raise NotExposed(f"GET {url} took over {SCRAPE_TIMEOUT_S:g} s") from None
    except Exception as exc:  # noqa: BLE001 - no broken /metrics may end the run
        raise NotExposed(f"GET {url} failed ({_reason(exc)})") from None
    return raw.decode("utf-8", errors="replace")


class Sampler:
    """Scrapes ``url`` before a step (``start``), during it (a background task, every ``interval_s``)
    and after it (``stop``); never raises. ``interval_s`` 0: before and after only."""

    def __init__(self, url: str, interval_s: float = DEFAULT_INTERVAL_S, headers: dict | None = None) -> None:
        self.url, self.interval_s, self.headers = url, interval_s, headers or {}
        self.server: str | None = None
        self.failure: str | None = None  # why the scrape before or after failed (the step's figures are not exposed)
        self.sample_failures = 0
        self.first_sample_failure: str | None = None
        self.before: Snapshot | None = None
        self.after: Snapshot | None = None
        self.samples: list[Snapshot] = []
        self._session: Any = None
        self._task: asyncio.Task | None = None
        self._stopping: asyncio.Event | None = None
        self._t0 = 0.0

    async def _scrape(self) -> Snapshot:
        text = await fetch(self._session, self.url)
        if self.server is None:
            self.server = identify(text)
            if self.server is None:
                await asyncio.to_thread(_check_format, text)
                raise NotExposed(
                    f"GET {self.url} answered, with none of the names of {', '.join(SERVERS)} (their prefixes: "
                    + ", ".join(n.prefix for n in SERVERS.values())
                    + ")"
                )
        return await asyncio.to_thread(parse, text, self.server, time.monotonic() - self._t0)

    async def start(self) -> None:
        import aiohttp

        self._t0 = time.monotonic()
        try:
            import prometheus_client.parser  # noqa: F401 - a serving image may lack it: one note, not a failure
        except ImportError:
            self.failure = "prometheus-client is not installed in this Python (pip install prometheus-client)"
            return
        try:
            self._session = aiohttp.ClientSession(headers=self.headers, connector=aiohttp.TCPConnector(limit=1))
            self.before = await self._scrape()
        except NotExposed as exc:
            self.failure = str(exc)
            return
        except Exception as exc:  # noqa: BLE001
            self.failure = f"GET {self.url} failed ({_reason(exc)})"
            return
        if self.interval_s > 0:
            self._stopping = asyncio.Event()
            self._task = asyncio.ensure_future(self._sample())

    async def _sample(self) -> None:
        assert self._stopping is not None
        interval = self.interval_s
        while not self._stopping.is_set():
            try:
                self.samples.append(await self._scrape())
            except Exception as exc:  # noqa: BLE001 - a failed sample is counted, never raised
                self.sample_failures += 1
                self.first_sample_failure = self.first_sample_failure or str(exc)
            if len(self.samples) >= MAX_SAMPLES:
                self.samples = self.samples[::2]
                interval *= 2
            try:
                await asyncio.wait_for(self._stopping.wait(), interval)
            except (asyncio.TimeoutError, TimeoutError):
                pass

    async def stop(self) -> None:
        try:
            if self._task is not None:
                assert self._stopping is not None
                self._stopping.set()
                try:
                    await asyncio.wait_for(asyncio.shield(self._task), SCRAPE_TIMEOUT_S + 1.0)
                except (asyncio.TimeoutError, TimeoutError):
                    self._task.cancel()
                except Exception:  # noqa: BLE001
                    pass
            if self.failure is None and self._session is not None:
                try:
                    self.after = await self._scrape()
                except NotExposed as exc:
                    self.failure = str(exc)
                except Exception as exc:  # noqa: BLE001
                    self.failure = f"GET {self.url} failed ({_reason(exc)})"
        finally:
            if self._session is not None:
                await self._session.close()
                self._session = None

    def cancel(self) -> None:
        """The load was interrupted: stop sampling at once (no scrape after), its connections closed."""
        if self._task is not None:
            self._task.cancel()
        if self._session is not None:
            session, self._session = self._session, None
            connector = session.connector
            session.detach()
            closing = getattr(connector, "_close", None)  # the synchronous part of aiohttp's close: no loop needed
            if callable(closing):
                try:
                    closing()
                except Exception:  # noqa: BLE001 - the run is unwinding already
                    pass

    def report(self, client_ttft_ms: list[float] | None = None) -> dict:
        return step_report(self, client_ttft_ms or [])


def _check_format(text: str) -> None:
    """NotExposed when ``text`` is not the Prometheus text format at all (an HTML page, garbage)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        for _ in text_string_to_metric_families(text[: 1 << 20]):
            pass
    except Exception as exc:  # noqa: BLE001
        raise NotExposed(f"its answer is not the Prometheus text format ({_reason(exc)})") from None


def histogram_quantile(q: float, buckets: dict[float, float]) -> float | None:
    """The ``q`` quantile (0..1) of a cumulative histogram ({upper bound: count}), interpolated within
    its bucket as Prometheus' ``histogram_quantile`` does (from 0 in the first bucket); in the +Inf
    bucket, the highest finite bound. None for an empty histogram."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    total = buckets[bounds[-1]]
    rank = q * total
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


def histogram_figures(before: dict | None, after: dict | None) -> dict | str:
    """A histogram over the step: its buckets' difference, as count, mean, p50/p90/p99 (ms)."""
    if after is None:
        return NOT_EXPOSED
    base = before or {"buckets": {}, "sum": 0.0, "count": 0.0}
    buckets = {le: max(0.0, n - base["buckets"].get(le, 0.0)) for le, n in after["buckets"].items()}
    count = max(0.0, after["count"] - base["count"])
    total = after["sum"] - base["sum"]
    out: dict[str, Any] = {"count": int(round(count))}
    if count <= 0:
        out.update(mean=None, p50=None, p90=None, p99=None)
        return out
    out["mean"] = total / count * 1e3
    out["p50_bucket_ms"] = _bucket_of(0.5, buckets)
    bounds = sorted(buckets)
    filled = sum(1 for i, b in enumerate(bounds) if buckets[b] > (buckets[bounds[i - 1]] if i else 0.0))
    if filled <= 1:  # interpolating within the one bucket would only give back its middle; the mean is exact
        out.update(p50=None, p90=None, p99=None, percentiles="every observation in one bucket (p50_bucket_ms)")
        return out
    for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        value = histogram_quantile(q, buckets)
        out[name] = None if value is None else value * 1e3
    return out


def _bucket_of(q: float, buckets: dict[float, float]) -> list[float | None] | None:
    """The bounds (ms) of the bucket the ``q`` quantile falls in: the resolution of the interpolated figure."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank, lower = q * buckets[bounds[-1]], 0.0
    for bound in bounds:
        if buckets[bound] >= rank:
            return [lower * 1e3, None if math.isinf(bound) else bound * 1e3]
        lower = bound
    return None


def _gauge(samples: list[Snapshot], key: str) -> dict | str:
    values = [s.gauges[key] for s in samples if key in s.gauges]
    if not values:
        return NOT_EXPOSED
    return {"mean": sum(values) / len(values), "peak": max(values), "samples": len(values)}


def _delta(before: Snapshot, after: Snapshot, key: str) -> float | None:
    if key not in after.counters:
        return None
    return max(0.0, after.counters[key] - before.counters.get(key, 0.0))


CROSSCHECK_WHY = (
    "client minus server: the client's TTFT runs on its own monotonic clock from sending the request to the "
    "first SSE event's arrival; the server's from when it received the request to when it emitted the first "
    "token. The difference is the request's HTTP transit and parsing before the server's clock starts, the "
    "SSE event's framing and transit after it stops, and the client's own event-loop delay; the server's "
    "percentiles are interpolated within a histogram bucket (p50_bucket_ms), so they are only as fine as its "
    "buckets, while the means are exact"
)


def crosscheck(server_ttft: dict | str, client_ttft_ms: list[float]) -> dict | str:
    """The server's TTFT histogram against the client's TTFT of the same step."""
    if not isinstance(server_ttft, dict) or not server_ttft.get("count"):
        return NOT_EXPOSED if not isinstance(server_ttft, dict) else {"judged": False, "why": "no request in it"}
    if not client_ttft_ms:
        return {"judged": False, "why": "no client TTFT (no request completed)"}
    from common.stats import percentile

    ordered = sorted(client_ttft_ms)
    client_mean = sum(ordered) / len(ordered)
    client_p50 = percentile(ordered, 50.0)
    out: dict[str, Any] = {
        "judged": True,
        "server_requests": server_ttft["count"],
        "client_requests": len(ordered),
        "server_mean_ms": server_ttft["mean"],
        "client_mean_ms": client_mean,
        "difference_mean_ms": client_mean - server_ttft["mean"],
        "server_p50_ms": server_ttft["p50"],
        "server_p50_bucket_ms": server_ttft.get("p50_bucket_ms"),
        "client_p50_ms": client_p50,
        "difference_p50_ms": None if server_ttft["p50"] is None else client_p50 - server_ttft["p50"],
        "why": CROSSCHECK_WHY,
    }
    if server_ttft["count"] != len(ordered):
        out["note"] = (
            f"the server counted {server_ttft['count']} first tokens over the step where the client timed "
            f"{len(ordered)} (failed requests, or other clients of the server)"
        )
    return out


def step_report(sampler: Sampler, client_ttft_ms: list[float]) -> dict:
    """The step's ``server_metrics`` block of result.json (module docstring)."""
    out: dict[str, Any] = {"url": sampler.url, "server": sampler.server, "interval_s": sampler.interval_s}
    if sampler.failure is not None or sampler.before is None or sampler.after is None:
        out.update(exposed=False, note=f"not exposed: {sampler.failure or 'no scrape'}")
        return out
    before, after = sampler.before, sampler.after
    during = sampler.samples or [after]
    out.update(exposed=True, samples=len(sampler.samples), failed_samples=sampler.sample_failures)
    if sampler.first_sample_failure:
        out["first_failed_sample"] = sampler.first_sample_failure
    if not sampler.samples:
        out["note"] = "no sample during the step (shorter than the interval): gauges read after it"
    out["kv_cache_usage"] = _gauge(during, "kv_cache_usage")
    out["running"] = _gauge(during, "running")
    out["waiting"] = _gauge(during, "waiting")
    hits, queries = _delta(before, after, "prefix_hits"), _delta(before, after, "prefix_queries")
    if hits is not None and queries is not None:
        out["prefix_cache_hit_rate"] = hits / queries if queries > 0 else None
        out["prefix_cache"] = {"hits": hits, "queries": queries}
    else:
        rate = _gauge(during, "prefix_hit_rate")
        out["prefix_cache_hit_rate"] = rate["mean"] if isinstance(rate, dict) else NOT_EXPOSED
    preempted = _delta(before, after, "preemptions")
    out["preemptions"] = NOT_EXPOSED if preempted is None else int(round(preempted))
    accepted, drafted = _delta(before, after, "spec_accepted"), _delta(before, after, "spec_draft_tokens")
    if accepted is not None and drafted is not None:
        drafts = _delta(before, after, "spec_drafts")
        out["spec_decode"] = {
            "acceptance_rate": accepted / drafted if drafted > 0 else None,
            "mean_accepted_length": 1 + accepted / drafts if drafts else None,
            "accepted_tokens": accepted,
            "draft_tokens": drafted,
        }
    else:
        rate, length = _gauge(during, "spec_accept_rate"), _gauge(during, "spec_accept_length")
        if isinstance(rate, dict) or isinstance(length, dict):
            out["spec_decode"] = {
                "acceptance_rate": rate["mean"] if isinstance(rate, dict) else NOT_EXPOSED,
                "mean_accepted_length": length["mean"] if isinstance(length, dict) else NOT_EXPOSED,
            }
        else:
            out["spec_decode"] = NOT_EXPOSED
    out["ttft_ms"] = histogram_figures(before.histograms.get("ttft"), after.histograms.get("ttft"))
    out["queue_time_ms"] = histogram_figures(before.histograms.get("queue_time"), after.histograms.get("queue_time"))
    out["ttft_crosscheck"] = crosscheck(out["ttft_ms"], client_ttft_ms)
    out["timeline"] = [
        {"t_s": round(s.t_s, 3), **{k: s.gauges[k] for k in ("kv_cache_usage", "running", "waiting") if k in s.gauges}}
        for s in sampler.samples
    ]
    return out
