"""How much load can the serving client (tools/serving) time before its own timing error shows?

    python3 -m bench.serving_client_capacity [--itl-ms 5] [--output-len 64] [--streams 1,2,4,...] [--limit-ms 1]

A loopback server (``python -m tools.serving.loopback --stamp``, its own process, so on the other
core of a 2-core machine) streams pre-made tokens at a known rate: each stream one token every
--itl-ms after a TTFT of --ttft-ms, and each token's text is the server's ``perf_counter_ns``
taken just before the token was written to the socket. The client runs N closed-loop streams
(``tools.serving.load.run_load``) in this process; for every token

  timing error = the client's arrival stamp - the server's sending stamp

(both CLOCK_MONOTONIC, one machine): the kernel's loopback plus everything the client does before
it reads its clock. The client reads it where the bytes arrive (``StampingProtocol``); each level
also runs it reading the clock when its coroutine resumes instead (the usual aiohttp client, as
vLLM's and AIPerf's), side by side, to show what that placement is worth.
Per level it prints the tokens/s and requests/s sustained, the error's p50/p99/max, and the client's
CPU (process time / wall, and per token). A shared 2-core machine delays a token by milliseconds
now and then whoever reads it (the server may be descheduled between its stamp and its write), so
each level also runs a bare reader (a plain asyncio protocol stamping in ``data_received``: the
floor any Python client on this machine sees), before and after the client, and the client's own
error is its p99 less the larger of the bare reader's two. The client's capacity is the highest
level whose own p99 error stays within --limit-ms. The server's CPU is measured alongside,
because on loopback it shares the machine. Where the client ran: the same host as the server,
over loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

INFERENCE = Path(__file__).resolve().parents[1] / "inference"
sys.path.insert(0, str(INFERENCE))

from common.stats import percentile  # noqa: E402
from tools.serving.client import RequestSpec  # noqa: E402
from tools.serving.load import Endpoint, Load, run_load, sessions_of  # noqa: E402


def start_server(ttft_ms: float, itl_ms: float) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tools.serving.loopback",
            "--stamp",
            "--ttft-ms",
            str(ttft_ms),
            "--itl-ms",
            str(itl_ms),
            "--model",
            "bench",
        ],
        cwd=INFERENCE,
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline().split()
    if line[:1] != ["PORT"]:
        proc.kill()
        raise SystemExit("the loopback server did not start")
    return proc, f"http://127.0.0.1:{line[1]}/v1"


def cpu_of(pid: int) -> float:
    """A process's user + system CPU seconds (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def level(url: str, streams: int, requests: int, output_len: int, server_pid: int, stamp_arrivals: bool = True) -> dict:
    specs = [RequestSpec(i, "w " * 16, output_len) for i in range(requests)]
    endpoint = Endpoint(url, "bench", extra={"ignore_eos": True})
    cpu0, server0, wall0 = time.process_time(), cpu_of(server_pid), time.perf_counter()
    result = asyncio.run(
        run_load(endpoint, sessions_of(specs), Load(concurrency=streams), stamp_arrivals=stamp_arrivals)
    )
    cpu, server_cpu, wall = time.process_time() - cpu0, cpu_of(server_pid) - server0, time.perf_counter() - wall0
    errors, tokens = [], 0
    for record in result.records:
        stamps = [int(t) for t in record.text.split()]
        if not record.ok or len(stamps) != len(record.token_ns):
            continue
        errors += [(got - sent) / 1e6 for got, sent in zip(record.token_ns, stamps)]
        tokens += len(stamps)
    errors.sort()
    window = (result.end_ns - result.start_ns) / 1e9
    failed = sum(1 for r in result.records if not r.ok)
    return {
        "streams": streams,
        "requests": len(result.records),
        "failed": failed,
        "tokens_per_s": tokens / window,
        "requests_per_s": (len(result.records) - failed) / window,
        "error_ms_p50": percentile(errors, 50.0) if errors else None,
        "error_ms_p99": percentile(errors, 99.0) if errors else None,
        "error_ms_max": errors[-1] if errors else None,
        "client_cpu_share": cpu / wall,
        "client_cpu_us_per_token": cpu / tokens * 1e6 if tokens else None,
        "client_cpu_us_per_request": cpu / len(result.records) * 1e6 if result.records else None,
        "server_cpu_share": server_cpu / wall,
    }


class _BareStream(asyncio.Protocol):
    """The reference reader: a plain asyncio protocol that stamps each chunk in ``data_received``
    (no HTTP library, no SSE parser, no coroutine wake-up) and sends its next request at once."""

    STAMP = re.compile(rb'"text":" (\d+)"')

    def __init__(self, request: bytes, count: int, done: asyncio.Future, errors: list[float]) -> None:
        self.request, self.left, self.done, self.errors = request, count, done, errors
        self.buffer = b""
        self.tokens = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter_ns()
        self.buffer += data
        last = 0
        for match in self.STAMP.finditer(self.buffer):
            self.errors.append((now - int(match.group(1))) / 1e6)
            last = match.end()
            self.tokens += 1
        self.buffer = self.buffer[last:]
        if self.buffer.endswith(b"0\r\n\r\n"):
            self.buffer = b""
            self.left -= 1
            if self.left:
                self.transport.write(self.request)
            else:
                self.transport.close()
                self.done.set_result(self.tokens)


def bare_level(url: str, streams: int, requests: int, output_len: int) -> dict:
    host, port = url.split("//")[1].split("/")[0].split(":")
    body = json.dumps({"model": "bench", "prompt": "w " * 16, "max_tokens": output_len, "stream": True}).encode()
    request = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: "
        f"{len(body)}\r\n\r\n"
    ).encode() + body
    errors: list[float] = []

    async def run() -> tuple[int, float]:
        loop = asyncio.get_running_loop()
        start = time.perf_counter()
        futures = []
        for i in range(streams):
            done = loop.create_future()
            futures.append(done)
            await loop.create_connection(
                lambda d=done, n=requests // streams + (i < requests % streams): _BareStream(request, n, d, errors),
                host,
                int(port),
            )
        tokens = sum(await asyncio.gather(*futures))
        return tokens, time.perf_counter() - start

    tokens, wall = asyncio.run(run())
    errors.sort()
    return {
        "tokens_per_s": tokens / wall,
        "error_ms_p50": percentile(errors, 50.0),
        "error_ms_p99": percentile(errors, 99.0),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ttft-ms", type=float, default=5.0)
    parser.add_argument("--itl-ms", type=float, default=5.0)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--streams", default="1,2,4,8,16,32,64,128")
    parser.add_argument("--rounds", type=int, default=4, help="requests per stream at each level")
    parser.add_argument("--limit-ms", type=float, default=1.0)
    parser.add_argument("--json", default=None, help="also write the levels here")
    args = parser.parse_args(argv)
    proc, url = start_server(args.ttft_ms, args.itl_ms)
    rows = []
    try:
        level(url, 1, 2, 4, proc.pid)  # connections, imports and the server's first request out of the way
        for streams in (int(s) for s in args.streams.split(",")):
            requests = max(streams * args.rounds, 8)
            bare = bare_level(url, streams, requests, args.output_len)
            row = level(url, streams, requests, args.output_len, proc.pid)
            resumed = level(url, streams, requests, args.output_len, proc.pid, stamp_arrivals=False)
            row["resume_stamp_error_ms_p99"] = resumed["error_ms_p99"]
            again = bare_level(url, streams, requests, args.output_len)
            row["bare_error_ms_p99"] = max(bare["error_ms_p99"], again["error_ms_p99"])
            row["bare_error_ms_p50"] = max(bare["error_ms_p50"], again["error_ms_p50"])
            rows.append(row)
            print(
                f"{streams:4d} streams  {row['tokens_per_s']:8.0f} tok/s  {row['requests_per_s']:7.1f} req/s  "
                f"error p50 {row['error_ms_p50']:.3f} p99 {row['error_ms_p99']:.3f} max {row['error_ms_max']:.3f} ms  "
                f"(bare reader before/after: p99 {row['bare_error_ms_p99']:.3f} ms; stamped on resuming: p99 "
                f"{row['resume_stamp_error_ms_p99']:.3f} ms)  "
                f"client CPU {row['client_cpu_share']:.0%} ({row['client_cpu_us_per_token']:.0f} us/token)  server "
                f"CPU {row['server_cpu_share']:.0%}" + (f"  {row['failed']} failed" if row["failed"] else ""),
                flush=True,
            )
    finally:
        proc.terminate()
        proc.wait(10)
    for r in rows:
        r["own_error_ms_p99"] = r["error_ms_p99"] - r["bare_error_ms_p99"] if r["error_ms_p99"] is not None else None
    within = [
        r
        for r in rows
        if r["own_error_ms_p99"] is not None and r["own_error_ms_p99"] <= args.limit_ms and not r["failed"]
    ]
    best = max(within, key=lambda r: r["tokens_per_s"]) if within else None
    if best is None:
        print(f"no level kept the client's own p99 timing error within {args.limit_ms} ms of the bare reader's")
    else:
        print(
            f"client capacity (own p99 timing error, client - bare reader, <= {args.limit_ms} ms; same host over "
            "loopback): "
            f"{best['tokens_per_s']:.0f} tokens/s, {best['requests_per_s']:.1f} requests/s at {best['streams']} streams"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"levels": rows, "best": best, "args": vars(args)}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
