"""InferPerf's serving client against NVIDIA AIPerf on the same running server with the same load.

    python3 -m bench.serving_crosscheck --endpoint http://127.0.0.1:8000/v1 --served-model NAME \\
        --tokenizer DIR [--aiperf /work/venvs/aiperf/bin/aiperf] [--concurrency 1,4] [--requests 32] [--rounds 2]
    python3 -m bench.serving_crosscheck --make-model DIR       # the random-weight Llama to serve

For each concurrency the two clients run interleaved (ABBA over --rounds), each with a warm-up
the other does not see, the same number of requests, prompts of exactly --input-len tokens of
the tokenizer and exactly --output-len output tokens (``ignore_eos``, streaming completions).
It prints, per concurrency, InferPerf / AIPerf for TTFT p50, TPOT p50 (AIPerf's
``inter_token_latency``, per request (E2E - TTFT) / (output tokens - 1): the same definition)
and output tokens/s, each the median over the rounds, and each client's CPU seconds (AIPerf's
start-up included). Both count output tokens with the server's ``usage`` (AIPerf's
``--use-server-token-count``): re-tokenising a random model's text does not give back its ids.
Target: within 5 % on a quiet machine.

``--make-model DIR`` writes the llama case's random-weight shape (4 layers, hidden 256) with
the case's byte-level BPE tokenizer and the vocabulary the size of that tokenizer (a random
model's ids outside the tokenizer decode to nothing, and AIPerf counts tokens from the text).
Serve it with vLLM's CPU build (docs/serving.md):
``VLLM_CPU_KVCACHE_SPACE=1 python -m vllm.entrypoints.openai.api_server --model DIR
--served-model-name llama-random --dtype float32 --max-model-len 1024 --port 8000``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "inference"))

from tools.serving import workload  # noqa: E402
from tools.serving.figures import step_figures  # noqa: E402
from tools.serving.load import Endpoint, Load, run_load, sessions_of  # noqa: E402


def make_model(folder: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from benchmarks.llama.pytorch.weights import train_tokenizer

    tokenizer = train_tokenizer(1024)
    config = LlamaConfig(
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        intermediate_size=688,
        vocab_size=len(tokenizer),
        max_position_embeddings=2048,
        bos_token_id=0,
        eos_token_id=1,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).eval().save_pretrained(str(folder), safe_serialization=True)
    tokenizer.save_pretrained(str(folder))
    print(f"wrote {folder} (vocabulary {len(tokenizer)})")


def inferperf(args: argparse.Namespace, tokenizer, concurrency: int, seed: int) -> dict:
    text = workload.Text(tokenizer)
    length = workload.LengthSpec("fixed", args.input_len)
    out = workload.LengthSpec("fixed", args.output_len)
    endpoint = Endpoint(
        args.endpoint, args.served_model, extra={"ignore_eos": True}, tokenizer=tokenizer, prefer_usage=True
    )
    cpu = time.process_time()
    warm = workload.synthetic(args.warmup, length, out, seed + 1, text)
    asyncio.run(run_load(endpoint, sessions_of(warm), Load(concurrency=concurrency)))
    specs = workload.synthetic(args.requests, length, out, seed, text)
    result = asyncio.run(run_load(endpoint, sessions_of(specs), Load(concurrency=concurrency)))
    cpu = time.process_time() - cpu
    block = step_figures(result.records, None, None)
    return {
        "ttft_ms_p50": block["ttft_ms"]["p50"],
        "tpot_ms_p50": block["tpot_ms"]["p50"],
        "output_tokens_per_s": block["throughput"]["output_tokens_per_s"]["value"],
        "failed": block["failed"],
        "client_cpu_s": cpu,
    }


def _metric(data: dict, name: str, stat: str) -> float | None:
    """AIPerf's profile_export_aiperf.json: {"records": {...}} or the metrics at top level."""
    for holder in (data.get("records") or {}, data):
        block = holder.get(name)
        if isinstance(block, dict) and stat in block:
            return float(block[stat])
    return None


def aiperf(args: argparse.Namespace, concurrency: int, seed: int) -> dict:
    base = args.endpoint.rstrip("/")
    base = base[: -len("/v1")] if base.endswith("/v1") else base
    with tempfile.TemporaryDirectory(prefix="aiperf-") as out:
        command = [
            args.aiperf, "profile",
            "--model", args.served_model,
            "--url", base,
            "--endpoint-type", "completions",
            "--streaming",
            "--concurrency", str(concurrency),
            "--request-count", str(args.requests),
            "--warmup-request-count", str(args.warmup),
            "--synthetic-input-tokens-mean", str(args.input_len),
            "--synthetic-input-tokens-stddev", "0",
            "--output-tokens-mean", str(args.output_len),
            "--output-tokens-stddev", "0",
            "--extra-inputs", "ignore_eos:true",
            "--tokenizer", args.tokenizer,
            "--use-server-token-count",
            "--random-seed", str(seed),
            "--ui-type", "none",
            "--artifact-dir", out,
        ]  # fmt: skip
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(command, capture_output=True, text=True, timeout=900)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        if done.returncode != 0:
            raise SystemExit(
                f"aiperf failed ({done.returncode}): {(done.stderr or done.stdout).strip().splitlines()[-1:]}"
            )
        exports = sorted(Path(out).rglob("*aiperf.json"))
        if not exports:
            raise SystemExit(f"aiperf wrote no JSON export under {out}: {sorted(p.name for p in Path(out).rglob('*'))}")
        data = json.loads(exports[0].read_text())
    return {
        "ttft_ms_p50": _metric(data, "time_to_first_token", "p50"),
        "tpot_ms_p50": _metric(data, "inter_token_latency", "p50"),
        "output_tokens_per_s": _metric(data, "output_token_throughput", "avg"),
        "failed": None,
        "client_cpu_s": cpu,  # its start-up included
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--make-model", default=None, help="write the random-weight Llama to this folder, then exit")
    parser.add_argument("--endpoint")
    parser.add_argument("--served-model")
    parser.add_argument("--tokenizer", help="the served model's folder (its tokenizer)")
    parser.add_argument("--aiperf", default="/work/venvs/aiperf/bin/aiperf")
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--client-cpus", default=None, help="pin both clients to these CPUs (e.g. 1; vLLM's CPU build computes on 0)"
    )
    args = parser.parse_args(argv)
    if args.make_model:
        make_model(Path(args.make_model))
        return 0
    if not (args.endpoint and args.served_model and args.tokenizer):
        parser.error("--endpoint, --served-model and --tokenizer are needed")
    if args.client_cpus:
        import os

        os.sched_setaffinity(0, {int(c) for c in args.client_cpus.split(",")})  # aiperf, a child, inherits it
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer, local_files_only=True)
    table = []
    for concurrency in (int(c) for c in args.concurrency.split(",")):
        runs: dict[str, list[dict]] = {"inferperf": [], "aiperf": []}
        for round_ in range(args.rounds):
            order = ("inferperf", "aiperf") if round_ % 2 == 0 else ("aiperf", "inferperf")
            for name in order:
                got = (
                    inferperf(args, tokenizer, concurrency, round_)
                    if name == "inferperf"
                    else aiperf(args, concurrency, round_)
                )
                runs[name].append(got)
                print(f"concurrency {concurrency} round {round_} {name}: {got}", flush=True)
        row = {"concurrency": concurrency}
        for key in ("ttft_ms_p50", "tpot_ms_p50", "output_tokens_per_s", "client_cpu_s"):
            ours = statistics.median(r[key] for r in runs["inferperf"])
            theirs = statistics.median(r[key] for r in runs["aiperf"])
            row[key] = {"inferperf": ours, "aiperf": theirs, "ratio": ours / theirs if theirs else None}
        table.append(row)
    print("\n| concurrency | TTFT p50 ms (InferPerf / AIPerf, ratio) | TPOT p50 ms | output tokens/s | client CPU s |")
    print("|---|---|---|---|---|")
    for row in table:
        keys = ("ttft_ms_p50", "tpot_ms_p50", "output_tokens_per_s", "client_cpu_s")
        cells = [f"{row[k]['inferperf']:.2f} / {row[k]['aiperf']:.2f} ({row[k]['ratio']:.3f})" for k in keys]
        print(f"| {row['concurrency']} | " + " | ".join(cells) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps(table, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
