"""How much does the harness cost? run_inference.py's engine core QPS against a bare
onnxruntime.InferenceSession.run loop on the same engine file, batches and threads; for llama,
its offline cells' output tokens/s against a bare ONNX Runtime GenAI generation loop.

    python3 -m bench.harness_overhead [--case resnet50|digits|bert|vit|llama|all] [--batch 8] [--rounds 5]
    python3 -m bench.harness_overhead --case llama --batch 1 --rounds 3 [--input-length 128]

Harness and bare loop alternate, round by round, because the machine is shared and wanders:
each round runs run_inference.py (the case's shipped measurement: settle, then until its
precision), then a bare loop in a fresh process for as long as that round's inference window
measured (its core time), cycling over the same batches. The ratio per round is harness core
QPS / bare QPS; the figure is their geometric mean with a 95 % interval over the rounds'
paired ratios (utils/results/decide.py, paired: each round's harness and bare loop
ran next to each other). Target: >= 0.99.

llama (ONNX Runtime GenAI, inference_engine/cpu/onnxruntime_genai.py): the case builds its
random-weight checkpoint and GenAI folder itself (the first, untimed run). Its table is cut
to one cell, ``batch_sizes: [--batch]`` x ``input_lengths: [--input-length]`` at the case's
``output_length``, without server rows (the greedy check and FlagPerf's prefill pass still
run, outside the cell's window). The bare loop opens the same GenAI folder and, for as long
as the harness's cell window lasted, generates on the same seeded prompts
(``tools.measure.llm_stage.PromptSource``, the same token-id range) with the same search
options as the engine (greedy, ``min_length = max_length = prompt + output_length``), calling
``append_tokens``, then ``generate_next_token`` and ``get_next_tokens`` per token; the rate
compared is output tokens/s.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
INFERENCE = REPO / "inference"
CASES = ("resnet50", "digits", "bert", "vit", "llama")
LLM_CASES = ("llama",)


def prepare_tree(
    tmp: Path, case: str, batch: int, repeat: int, num_workers: int | None, input_length: int = 128
) -> Path:
    perf = tmp / "inference"
    shutil.copytree(INFERENCE, perf, ignore=shutil.ignore_patterns("result", "__pycache__"))
    path = perf / "configs" / case / "configurations.yaml"
    config = yaml.safe_load(path.read_text())
    if case in LLM_CASES:  # one generation cell, no server rows (module docstring)
        config.update(batch_sizes=[batch], input_lengths=[input_length], server_target_qps=[], log_freq=0)
    else:
        config.update(batch_size=batch, repeat=repeat, warmup=2, log_freq=0)
    if num_workers is not None:
        config["num_workers"] = num_workers
    path.write_text(yaml.safe_dump(config))
    return perf


def prepare_data(tmp: Path, perf: Path, case: str, images: int) -> Path:
    data = tmp / "data"
    if case in ("resnet50", "vit"):
        command = [
            "benchmarks.resnet50.pytorch.synthetic",
            str(data),
            "--classes",
            "4",
            "--per-class",
            str(max(1, images // 4)),
        ]
    else:  # digits, bert, llama: the case's own preparation
        command = [f"benchmarks.{case}.pytorch.prepare", str(data)]
    subprocess.run([sys.executable, "-m", *command], cwd=perf, check=True, capture_output=True)
    return data


def run_harness(perf: Path, data: Path, log: Path, case: str) -> dict:
    proc = subprocess.run(
        [
            sys.executable,
            "run_inference.py",
            "--perf_dir",
            str(perf),
            "--data_dir",
            str(data),
            "--log_dir",
            str(log),
            "--vendor",
            "cpu",
            "--case",
            case,
            "--framework",
            "pytorch",
            "--log_level",
            "WARNING",
        ],
        cwd=perf,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        sys.exit(f"run_inference.py failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return json.loads((log / "result.json").read_text())


def harness_rate(result: dict, case: str) -> tuple[float, float]:
    """The harness's figure and the seconds it measured: the inference pass's core QPS and core time;
    for an LLM case, its cells' output tokens/s (their geometric mean) and their windows."""
    if case in LLM_CASES:
        cells = result["llm"]["table"]
        rate = math.exp(sum(math.log(c["output_tokens_per_s"]) for c in cells) / len(cells))
        return rate, sum(c["duration_s"] for c in cells)
    return float(result["*p_inference_core(qps)"]), float(result["inference"]["core_time_s"])


def bare_loop(result: dict, perf: Path, data: Path, case: str) -> float:
    """Run in a child whose import root is the copied inference/ tree, for as long as the harness's window measured."""
    if case in LLM_CASES:
        cells = [
            [c["batch_size"], c["input_length"], c["output_length"], c["duration_s"]] for c in result["llm"]["table"]
        ]
        flag = "--bare-generation"
        args = [
            result["cache"]["onnx"]["path"],
            result["config"]["resolved_model_dir"],
            result["config"]["seed"],
            cells,
        ]
    else:
        flag = "--bare-loop"
        args = [result["cache"]["engine"]["path"], str(perf), str(data), case, harness_rate(result, case)[1]]
    proc = subprocess.run(
        [sys.executable, "-m", "bench.harness_overhead", flag, json.dumps(args)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(perf)},
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        sys.exit(f"the bare loop failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return float(proc.stdout.strip().splitlines()[-1])


def _bare_loop_child(engine_path: str, perf: str, data: str, case: str, seconds: float) -> float:
    import importlib

    import onnxruntime as ort

    from tools.config import load_case_config
    from tools.measure.loop import as_input_list

    config = load_case_config(perf, case, "pytorch", "cpu", data, "-")
    config.cache_dir = str(Path(perf) / "onnxs")
    case_module = importlib.import_module(f"benchmarks.{case}.pytorch")
    # Every engine input of every batch, as the engine gets them (bert has two).
    batches = [[t.numpy() for t in as_input_list(x)] for x, _ in case_module.build_dataloader(config)]
    options = ort.SessionOptions()
    options.intra_op_num_threads = int(config.get("intra_op_num_threads", 0))
    options.inter_op_num_threads = int(config.get("inter_op_num_threads", 0))
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the engine file is pre-optimised
    session = ort.InferenceSession(engine_path, options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    for _ in range(2):
        session.run(None, dict(zip(names, batches[0])))
    samples, calls = 0, 0
    start = time.perf_counter()
    end = start + seconds
    while calls < len(batches) or time.perf_counter() < end:  # at least one pass, then as long as the harness measured
        batch = batches[calls % len(batches)]
        session.run(None, dict(zip(names, batch)))
        samples += batch[0].shape[0]
        calls += 1
    return samples / (time.perf_counter() - start)


def _bare_generation_child(folder: str, model_dir: str, seed: int, cells: list[list]) -> float:
    """Output tokens/s of a bare GenAI loop per cell (their geometric mean): the engine's generator
    calls on the harness's prompts, for as long as the harness measured each cell."""
    import numpy as np
    import onnxruntime_genai as og
    from transformers import AutoTokenizer

    from benchmarks.llama.pytorch.weights import prompt_id_range
    from tools.measure.llm_stage import PromptSource

    vocab = int(json.loads((Path(model_dir) / "config.json").read_text())["vocab_size"])
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    prompts = PromptSource(*prompt_id_range(tokenizer, vocab), int(seed))
    model = og.Model(folder)  # the case's GenAI folder, as the engine opens it

    def generate(ids: np.ndarray, output_length: int) -> None:
        """One query as the engine runs it: prefill (append_tokens), then one step per token."""
        batch, total = ids.shape[0], ids.shape[1] + output_length
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=total, min_length=total, do_sample=False, batch_size=batch)
        generator = og.Generator(model, params)
        generator.append_tokens(np.ascontiguousarray(ids, dtype=np.int32))
        for _ in range(output_length):
            generator.generate_next_token()
            generator.get_next_tokens()

    logs = []
    for batch, length, output_length, seconds in cells:
        generate(prompts.batch(batch, length, 0, PromptSource.WARMUP), output_length)
        queries = 0
        start = time.perf_counter()
        end = start + seconds
        while queries < 1 or time.perf_counter() < end:  # at least one query, then as long as the harness measured
            generate(prompts.batch(batch, length, queries), output_length)
            queries += 1
        logs.append(math.log(queries * batch * output_length / (time.perf_counter() - start)))
    return math.exp(sum(logs) / len(logs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="resnet50", choices=[*CASES, "all"])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--images", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--num-workers", type=int, default=None, help="override the case's DataLoader workers")
    parser.add_argument("--input-length", type=int, default=128, help="llama: the prompt length of its one cell")
    parser.add_argument("--bare-loop", help=argparse.SUPPRESS)
    parser.add_argument("--bare-generation", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_loop:
        print(_bare_loop_child(*json.loads(args.bare_loop)))
        return
    if args.bare_generation:
        print(_bare_generation_child(*json.loads(args.bare_generation)))
        return
    medians = {case: measure(case, args) for case in (CASES if args.case == "all" else (args.case,))}
    if len(medians) > 1:
        print("\n".join(f"{case}: ratio {ratio:.3f}" for case, ratio in medians.items()))


def measure(case: str, args: argparse.Namespace) -> float:
    """Alternate harness and bare-loop rounds for one case; print them and return the ratio (geometric mean)."""
    sys.path.insert(0, str(INFERENCE))
    from utils.results.decide import Sample, decide

    with tempfile.TemporaryDirectory(prefix="inferperf-bench-") as tmp_name:
        tmp = Path(tmp_name)
        perf = prepare_tree(tmp, case, args.batch, args.repeat, args.num_workers, args.input_length)
        data = prepare_data(tmp, perf, case, args.images)
        run_harness(perf, data, tmp / "log-warm", case)  # builds ONNX and engine caches (llama: its model too)
        harness_qps, bare_qps = [], []
        unit = "tokens/s" if case in LLM_CASES else "core qps"
        workers = args.num_workers if args.num_workers is not None else "case default"
        shape = f"input_length={args.input_length}" if case in LLM_CASES else f"num_workers={workers}"
        print(f"case={case} batch={args.batch} {shape}")
        print(f"{'round':>5} {'harness ' + unit:>17} {'window s':>9} {'bare ' + unit:>14} {'ratio':>7}")
        for round_index in range(args.rounds):
            result = run_harness(perf, data, tmp / f"log{round_index}", case)
            harness, window = harness_rate(result, case)
            bare = bare_loop(result, perf, data, case)
            harness_qps.append(Sample(harness))
            bare_qps.append(Sample(bare))
            print(f"{round_index:>5} {harness:>17.3f} {window:>9.2f} {bare:>14.3f} {harness / bare:>7.3f}")
        ratio = decide(bare_qps, harness_qps, True, 0.01, paired=True)  # B = harness, A = bare: the ratio harness/bare
        print(
            f"ratio harness/bare: {ratio.ratio:.3f} [{ratio.low:.3f}, {ratio.high:.3f}] over {args.rounds} rounds "
            "(target >= 0.99)"
        )
        return ratio.ratio


if __name__ == "__main__":
    main()
