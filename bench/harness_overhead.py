"""How much does the harness cost? run_inference.py's engine core QPS against a bare
onnxruntime.InferenceSession.run loop on the same engine file, batches and threads; for llama,
its offline cells' output tokens/s against a bare ONNX Runtime GenAI generation loop.

    python3 -m bench.harness_overhead [--case resnet50|digits|bert|vit|llama|all] [--batch 8] [--rounds 5]
    python3 -m bench.harness_overhead --case llama --batch 1 --rounds 3 [--input-length 128]
    python3 -m bench.harness_overhead ... --set max_duration_s=5    (a case config key, for both runs)

Harness and bare loop alternate, round by round, because the machine is shared and wanders:
each round runs run_inference.py (the case's shipped measurement: settle, then until its
precision) and a bare loop in a fresh process for as long as the inference window measured (its
core time), cycling over the same batches; in the order ABBA: even rounds run the harness first,
odd rounds the bare loop first (for as long as the round before measured). Like the harness's core QPS, the bare
loop's rate is over its core time: each call is timed on its own (``perf_counter_ns`` before and
after), and what the loop does between calls is not counted. The ratio per round is harness core
QPS / bare QPS; the figure is their geometric mean with a 95 % interval over the rounds'
paired ratios (utils/results/decide.py, paired: each round's harness and bare loop
ran next to each other). Target: >= 0.99.

The ratio splits in two, printed beside it with their own intervals. The same child also runs
the **engine loop**, alternating with the bare loop in 0.1-s slices (llama: query by query),
each for as long as the harness measured, both on the engine's one session (one thread pool):
  engine / bare     the engine contract, as the inference pass calls the engine: its
                    ``call_numpy`` on numpy arrays where it declares one (the cpu ONNX Runtime
                    engine), else its ``__call__`` (torch tensors in and out, so ``Tensor.numpy``
                    per input and ``torch.from_numpy`` per output), back to back, against
                    ``session.run`` on numpy arrays. llama: the
                    engine's ``prefill``/``step``/``release`` through ``generate_timed``,
                    against the generator calls alone.
  harness / engine  the measured loop: everything run_inference.py does between and around
                    the calls (FlagPerf's inference pass reads each batch from the case's
                    data loader and evaluates its outputs between calls, then the timestamps,
                    records and stop rule), and the process it runs in.

Which comparison is fair: the bare loop is what a program calling ONNX Runtime itself gets,
so harness / bare is the figure against the target. What the bare loop does that the harness
cannot: it converts the batches to numpy once, before its clock starts, and keeps ONNX
Runtime's numpy outputs, where the engine contract (torch tensors in and out, for the case's
evaluator) pays both conversions in every timed call; and it runs nothing between calls,
where the inference pass's data loader and evaluator run between calls and leave the caches
colder for the next one. Neither is made cheaper here by making the bare loop do the same:
engine / bare shows the first, harness / engine the second.

llama (ONNX Runtime GenAI, inference_engine/cpu/onnxruntime_genai.py): the case builds its
random-weight checkpoint and GenAI folder itself (the first, untimed run). Its table is cut
to one cell, ``batch_sizes: [--batch]`` x ``input_lengths: [--input-length]`` at the case's
``output_length``, without server rows (the greedy check and FlagPerf's prefill pass still
run, outside the cell's window). The bare loop opens the same GenAI folder and, for as long
as the harness's cell window lasted, generates on the same seeded prompts
(``contract.llm_workload.PromptSource``, the same token-id range) with the same search
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

from bench._case_set import add_set_argument, overrides

REPO = Path(__file__).resolve().parents[1]
INFERENCE = REPO / "inference"
CASES = ("resnet50", "digits", "bert", "vit", "llama")
LLM_CASES = ("llama",)


def prepare_tree(
    tmp: Path,
    case: str,
    batch: int,
    repeat: int,
    num_workers: int | None,
    input_length: int = 128,
    changes: dict | None = None,
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
    config.update(changes or {})  # --set KEY=VALUE
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


def bare_loop(result: dict, perf: Path, data: Path, case: str) -> dict[str, float]:
    """The bare and the engine loop's rates ({"bare": ..., "engine": ...}), in a child whose import
    root is the copied inference/ tree, for as long as the harness's window measured."""
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
            str(perf),
            str(data),
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
    return {name: float(rate) for name, rate in json.loads(proc.stdout.strip().splitlines()[-1]).items()}


SLICE_S = 0.1  # the bare and the engine loop alternate in slices this long (a slow moment falls on both)


def _alternate(loops: dict, seconds: float, minimum: int) -> dict[str, float]:
    """Run each ``loop(first_call, end, at_least) -> (samples, calls, core_ns)`` in turn, in slices
    of ``SLICE_S``, until each has run ``seconds`` of core time and ``minimum`` calls; each one's
    rate is its samples over its core time: the sum of its calls' own durations, each read with
    ``perf_counter_ns`` around the call, as run_inference.py reads a query's core time. (Over the
    slice's wall time instead, a loop's own Python between calls would count against it and not
    against the harness: for digits' 10-us calls that was about a fifth.)"""
    core = dict.fromkeys(loops, 0)
    samples = dict.fromkeys(loops, 0)
    calls = dict.fromkeys(loops, 0)
    budget = int(seconds * 1e9)
    while any(core[k] < budget or calls[k] < minimum for k in loops):
        for name, loop in loops.items():
            end = time.perf_counter() + min(SLICE_S, max(seconds - core[name] / 1e9, 0.0))
            done, count, spent = loop(calls[name], end, minimum - calls[name])
            core[name] += spent
            samples[name] += done
            calls[name] += count
    return {name: samples[name] / (core[name] / 1e9) for name in loops}


def _bare_loop_child(engine_path: str, perf: str, data: str, case: str, seconds: float) -> dict[str, float]:
    """The bare loop (``session.run`` on numpy arrays, back to back) and the engine loop (the
    vendor engine as the inference pass calls it, back to back, on the same batches), alternating."""
    import importlib

    import onnxruntime as ort

    from contract.config import load_case_config
    from inference_engine.cpu.onnxruntime import InferModel
    from tools.measure.loop import as_input_list

    config = load_case_config(perf, case, "pytorch", "cpu", data, "-")
    config.cache_dir = str(Path(perf) / "onnxs")
    config.engine_path = engine_path
    case_module = importlib.import_module(f"benchmarks.{case}.pytorch")
    # Every engine input of every batch, as the engine gets them (bert has two).
    tensors = [as_input_list(x) for x, _ in case_module.build_dataloader(config)]
    batches = [[t.numpy() for t in inputs] for inputs in tensors]
    engine = InferModel(config, None, None)  # loads the same engine file, as run_inference.py does
    # The bare loop calls the engine's own session: one ONNX Runtime session, so one intra-op
    # thread pool, in this process, as in the harness's. With a second session of its own, the
    # two pools alternating on 2 cores made both loops 20-30 % slower than the harness (bert bs 2:
    # 33 against 40-43 samples/s for the same bare loop alone in its process; docs/measurement.md).
    session = engine.session
    assert isinstance(session, ort.InferenceSession)
    names = [i.name for i in session.get_inputs()]

    feeds = [dict(zip(names, batch)) for batch in batches]  # built once, before any clock
    clock = time.perf_counter_ns

    def bare(first: int, end: float, at_least: int) -> tuple[int, int, int]:
        samples, calls, core = 0, 0, 0
        while calls < at_least or time.perf_counter() < end:
            index = (first + calls) % len(batches)
            t0 = clock()
            session.run(None, feeds[index])
            core += clock() - t0
            samples += batches[index][0].shape[0]
            calls += 1
        return samples, calls, core

    # The engine as the inference pass calls it: ``call_numpy`` on numpy arrays where the engine
    # declares it (tools/measure/loop.py converts each chunk before the clock), else ``__call__``
    # on torch tensors.
    call, items = (engine.call_numpy, batches) if engine.implements("call_numpy") else (engine, tensors)

    def contract(first: int, end: float, at_least: int) -> tuple[int, int, int]:
        samples, calls, core = 0, 0, 0
        while calls < at_least or time.perf_counter() < end:
            inputs = items[(first + calls) % len(items)]
            t0 = clock()
            call(inputs)
            core += clock() - t0
            samples += inputs[0].shape[0]
            calls += 1
        return samples, calls, core

    for _ in range(2):
        session.run(None, dict(zip(names, batches[0])))
        call(items[0])
    # at least one pass each, then as long as the harness measured
    return _alternate({"bare": bare, "engine": contract}, seconds, len(batches))


def _bare_generation_child(folder: str, model_dir: str, seed: int, cells: list[list], perf: str, data: str) -> dict:
    """Output tokens/s per cell (their geometric mean) of a bare GenAI loop, the engine's generator
    calls on the harness's prompts, and of the engine loop (the case's engine through
    ``tools.measure.llm.generate_timed``, as the harness times a query), alternating query by
    query, each for as long as the harness measured the cell."""
    import numpy as np
    import onnxruntime_genai as og
    from transformers import AutoTokenizer

    from benchmarks.llama.pytorch.weights import prompt_id_range
    from contract.config import load_case_config
    from contract.llm_workload import PromptSource
    from inference_engine.cpu.onnxruntime_genai import InferModel
    from tools.measure.llm import generate_timed

    vocab = int(json.loads((Path(model_dir) / "config.json").read_text())["vocab_size"])
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    prompts = PromptSource(*prompt_id_range(tokenizer, vocab), int(seed))
    model = og.Model(folder)  # the case's GenAI folder, as the engine opens it
    config = load_case_config(perf, "llama", "pytorch", "cpu", data, "-")
    engine = InferModel(config, str(Path(folder) / InferModel.entry_file), None)

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

    logs: dict[str, list[float]] = {"bare": [], "engine": []}
    for batch, length, output_length, seconds in cells:
        loops = {
            "bare": lambda q: generate(prompts.batch(batch, length, q), output_length),
            "engine": lambda q: generate_timed(engine, prompts.batch(batch, length, q), output_length),
        }
        for loop in loops.values():
            loop(0)  # warm: the first query of a shape allocates
        spent = dict.fromkeys(loops, 0.0)
        queries = 0
        while queries < 1 or min(spent.values()) < seconds:  # query by query, as long as the harness measured
            for name, loop in loops.items():
                start = time.perf_counter()
                loop(queries)
                spent[name] += time.perf_counter() - start
            queries += 1
        for name in loops:
            logs[name].append(math.log(queries * batch * output_length / spent[name]))
    return {name: math.exp(sum(values) / len(values)) for name, values in logs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="resnet50", choices=[*CASES, "all"])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--images", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--num-workers", type=int, default=None, help="override the case's DataLoader workers")
    parser.add_argument("--input-length", type=int, default=128, help="llama: the prompt length of its one cell")
    add_set_argument(parser)
    parser.add_argument("--bare-loop", help=argparse.SUPPRESS)
    parser.add_argument("--bare-generation", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_loop:
        print(json.dumps(_bare_loop_child(*json.loads(args.bare_loop))))
        return
    if args.bare_generation:
        print(json.dumps(_bare_generation_child(*json.loads(args.bare_generation))))
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
        perf = prepare_tree(
            tmp, case, args.batch, args.repeat, args.num_workers, args.input_length, overrides(args.set)
        )
        data = prepare_data(tmp, perf, case, args.images)
        run_harness(perf, data, tmp / "log-warm", case)  # builds ONNX and engine caches (llama: its model too)
        rates: dict[str, list[Sample]] = {"harness": [], "bare": [], "engine": []}
        unit = "tokens/s" if case in LLM_CASES else "core qps"
        workers = args.num_workers if args.num_workers is not None else "case default"
        shape = f"input_length={args.input_length}" if case in LLM_CASES else f"num_workers={workers}"
        print(f"case={case} batch={args.batch} {shape}")
        print(
            f"{'round':>5} {'harness ' + unit:>17} {'window s':>9} {'bare ' + unit:>14} {'engine ' + unit:>16} "
            f"{'ratio':>7} {'engine/bare':>11} {'harness/engine':>14}"
        )
        previous: dict | None = None
        for round_index in range(args.rounds):
            # ABBA: odd rounds run the bare child first, for as long as the round before measured
            # (the same engine file and cells), so that neither comes always first after the other
            bare_first = previous is not None and round_index % 2 == 1
            loops = bare_loop(previous, perf, data, case) if bare_first and previous is not None else {}
            result = previous = run_harness(perf, data, tmp / f"log{round_index}", case)
            harness, window = harness_rate(result, case)
            loops = loops or bare_loop(result, perf, data, case)
            bare, engine = loops["bare"], loops["engine"]
            for name, rate in (("harness", harness), ("bare", bare), ("engine", engine)):
                rates[name].append(Sample(rate))
            print(
                f"{round_index:>5} {harness:>17.3f} {window:>9.2f} {bare:>14.3f} {engine:>16.3f} "
                f"{harness / bare:>7.3f} {engine / bare:>11.3f} {harness / engine:>14.3f}"
            )
        # decide(A, B) is the ratio B/A, paired: each round's three ran next to each other
        ratio = decide(rates["bare"], rates["harness"], True, 0.01, paired=True)
        print(
            f"ratio harness/bare: {ratio.ratio:.3f} [{ratio.low:.3f}, {ratio.high:.3f}] over {args.rounds} rounds "
            "(target >= 0.99)"
        )
        for a, b, what in (("bare", "engine", "the engine contract"), ("engine", "harness", "the measured loop")):
            part = decide(rates[a], rates[b], True, 0.01, paired=True)
            print(f"  {b}/{a}: {part.ratio:.3f} [{part.low:.3f}, {part.high:.3f}] ({what})")
        return ratio.ratio


if __name__ == "__main__":
    main()
