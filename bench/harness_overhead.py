"""How much does the harness cost? run_inference.py's engine core QPS against a bare
onnxruntime.InferenceSession.run loop on the same engine file, batches and threads.

    python3 -m bench.harness_overhead [--case resnet50|digits|bert|vit|all] [--batch 8] [--rounds 5]

Harness and bare loop alternate, round by round, because the machine is shared and wanders:
each round runs run_inference.py (the case's shipped measurement: settle, then until its
precision), then a bare loop in a fresh process for as long as that round's inference window
measured (its core time), cycling over the same batches. The ratio per round is harness core
QPS / bare QPS; the figure is their geometric mean with a 95 % interval over the rounds'
paired ratios (utils/results/decide.py, paired: each round's harness and bare loop
ran next to each other). Target: >= 0.99.
"""

from __future__ import annotations

import argparse
import json
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
CASES = ("resnet50", "digits", "bert", "vit")


def prepare_tree(tmp: Path, case: str, batch: int, repeat: int, num_workers: int | None) -> Path:
    perf = tmp / "inference"
    shutil.copytree(INFERENCE, perf, ignore=shutil.ignore_patterns("result", "__pycache__"))
    path = perf / "configs" / case / "configurations.yaml"
    config = yaml.safe_load(path.read_text())
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
    else:  # digits, bert: the case's own preparation
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


def bare_loop(result: dict, perf: Path, data: Path, case: str) -> float:
    """Run in a child whose import root is the copied inference/ tree, for as long as the harness's window measured."""
    seconds = float(result["inference"]["core_time_s"])
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.harness_overhead",
            "--bare-loop",
            json.dumps([result["cache"]["engine"]["path"], str(perf), str(data), case, seconds]),
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(perf)},
        capture_output=True,
        text=True,
        check=True,
    )
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="resnet50", choices=[*CASES, "all"])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--images", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--num-workers", type=int, default=None, help="override the case's DataLoader workers")
    parser.add_argument("--bare-loop", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_loop:
        print(_bare_loop_child(*json.loads(args.bare_loop)))
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
        perf = prepare_tree(tmp, case, args.batch, args.repeat, args.num_workers)
        data = prepare_data(tmp, perf, case, args.images)
        run_harness(perf, data, tmp / "log-warm", case)  # builds ONNX and engine caches
        harness_qps, bare_qps = [], []
        print(
            f"case={case} batch={args.batch} "
            f"num_workers={args.num_workers if args.num_workers is not None else 'case default'}"
        )
        print(f"{'round':>5} {'harness core qps':>17} {'window s':>9} {'bare loop qps':>14} {'ratio':>7}")
        for round_index in range(args.rounds):
            result = run_harness(perf, data, tmp / f"log{round_index}", case)
            harness = result["*p_inference_core(qps)"]
            bare = bare_loop(result, perf, data, case)
            harness_qps.append(Sample(harness))
            bare_qps.append(Sample(bare))
            print(
                f"{round_index:>5} {harness:>17.3f} {result['inference']['core_time_s']:>9.2f} {bare:>14.3f} "
                f"{harness / bare:>7.3f}"
            )
        ratio = decide(bare_qps, harness_qps, True, 0.01, paired=True)  # B = harness, A = bare: the ratio harness/bare
        print(
            f"ratio harness/bare: {ratio.ratio:.3f} [{ratio.low:.3f}, {ratio.high:.3f}] over {args.rounds} rounds "
            "(target >= 0.99)"
        )
        return ratio.ratio


if __name__ == "__main__":
    main()
