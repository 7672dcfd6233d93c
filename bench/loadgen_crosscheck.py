"""Do InferPerf's own load generator and MLPerf LoadGen agree? The same engine and the same
pool of batches, each performance row run under both, interleaved A/B/A/B.

    python3 -m bench.loadgen_crosscheck [--case digits|resnet50] [--batch N] [--rounds 2]
                                        [--min-duration 5] [--server-load 0.5]
                                        [--scenarios offline,single_stream,server]
                                        [--samples-per-query 8] [--max-duration 60]

A = ``load_generator: inferperf`` (tools/measure/scenarios.py), B = ``load_generator:
mlperf`` (tools/measure/loadgen.py): both through ``PerformanceStage.rows_for``, the
production path, on one compiled engine (the case's cpu/onnxruntime engine, built or
taken from the cache by the pipeline's own steps) and one pool. For each round and
scenario, A then B:

  offline        ratio = B's samples/s / A's samples/s
  single_stream  ratio = B's p90 / A's p90 (per query, ms)
  multi_stream   ratio = B's p99 / A's p99 (per query of ``--samples-per-query`` samples, ms)
  server         ratio = B's p99 / A's p99, both at the same target_qps: ``--server-load``
                 x A's offline samples/s of the first round (latency_bound_ms is set
                 high, ``--latency-bound-ms``, so that the bound never cuts a run short)

(The figure of a scenario is its record's result, ``common/scenario.py``: its headline
percentile, or samples/s where it has none.) B's figures are LoadGen's own (its detail
log), A's are InferPerf's. The median ratio over the rounds is printed per figure with the
target, within 3 % on a quiet machine;
exit status 1 when a median misses it. Each row's verdict is shown (a contention
reason means the machine was busy: re-measure when it is quiet).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
INFERENCE = REPO / "inference"
CASES = {"digits": 16, "resnet50": 1}  # case -> default batch size (resnet50 bs 1: its server p99 needs 662 queries)
TARGET = 0.03


def _records() -> dict:
    """common.scenario's records (the parent runs from the repository root: inference/ is its import root too)."""
    if str(INFERENCE) not in sys.path:
        sys.path.append(str(INFERENCE))
    from common.scenario import SCENARIOS

    return SCENARIOS


def figure_name(name: str) -> str:
    record = _records()[name]
    return "samples/s" if record.result_is_throughput else f"{record.headline} ms"


def prepare(tmp: Path, case: str) -> tuple[Path, Path]:
    """A copy of inference/ (its engine cache kept, so a warm cache is reused) and the case's data."""
    perf = tmp / "inference"
    shutil.copytree(INFERENCE, perf, ignore=shutil.ignore_patterns("result", "__pycache__"), symlinks=True)
    data = tmp / "data"
    if case == "resnet50":
        command = ["benchmarks.resnet50.pytorch.synthetic", str(data), "--classes", "4", "--per-class", "4"]
    else:
        command = [f"benchmarks.{case}.pytorch.prepare", str(data)]
    subprocess.run([sys.executable, "-m", *command], cwd=perf, check=True, capture_output=True)
    return perf, data


def figure(row: dict) -> float | None:
    """The row's figure of its scenario: LoadGen's own for B, InferPerf's for A."""
    record = _records()[row["scenario"]]
    own = row["loadgen"]["latency_ms"] if row.get("load_generator") == "mlperf" else row["latency_ms"]
    return row["qps"] if record.result_is_throughput else own.get(record.headline)


def _child(spec: dict) -> None:
    """Runs with the copied inference/ as its import root: compile once, then the A/B rounds."""
    from loguru import logger

    from tools.measure.stage import PerformanceStage
    from tools.pipeline import Pipeline, PipelineArgs
    from tools.torch_sync import sync_for_config

    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    overrides = [
        f"batch_size={spec['batch']}",
        f"min_duration_s={spec['min_duration']}",
        "audits=false",
        "numeric_check=false",
        "warmup=5",
    ]
    overrides += [
        f"multi_stream_samples_per_query={spec['samples_per_query']}",
        f"max_duration_s={spec['max_duration']}",
    ]
    pipeline = Pipeline(
        PipelineArgs(spec["perf"], spec["data"], spec["log"], "cpu", spec["case"], "pytorch", overrides)
    )
    pipeline.init()
    pipeline.dataset_and_model()
    pipeline.onnx_export()
    pipeline.vendor_compile()
    state, config = pipeline.state, pipeline.state.config
    config.latency_bound_ms = spec["latency_bound_ms"]
    stage = PerformanceStage(config, state.dataloader, sync_for_config(config), "fp32")
    pool = stage.pool(config.batch_size)
    rows = []
    for round_index in range(spec["rounds"]):
        for scenario in spec["scenarios"]:
            for generator in ("inferperf", "mlperf"):
                config.scenario, config.load_generator = [scenario], generator
                if _records()[scenario].scheduled:
                    offline = [
                        r
                        for r in rows
                        if _records()[r["scenario"]].result_is_throughput and r["load_generator"] == "inferperf"
                    ]
                    config.target_qps = spec["server_load"] * (
                        offline[0]["qps"] if offline else _offline_qps(stage, state.engine, pool)
                    )
                stage.rows_for(state.engine, config.batch_size, pool)
                row = stage.report.rows[-1].to_json()  # the row as result.json has it
                rows.append({**row, "round": round_index})
                print(
                    f"  round {round_index} {scenario:<13} {generator:<9} "
                    f"{figure_name(scenario)} {figure(row):.6g}  {_verdict(row)}",
                    flush=True,
                )
    Path(spec["out"]).write_text(json.dumps(rows, default=str))


def _offline_qps(stage, engine, pool) -> float:
    """A's offline samples/s when offline is not among the scenarios: one short InferPerf offline row."""
    from common.scenario import OFFLINE

    config = stage.config
    scenario, generator = config.scenario, config.load_generator
    config.scenario, config.load_generator = [OFFLINE.name], "inferperf"
    stage.rows_for(engine, config.batch_size, pool)
    config.scenario, config.load_generator = scenario, generator
    return stage.report.rows[-1].qps


def _verdict(row: dict) -> str:
    return "valid" if row["verdict"]["valid"] else "INVALID: " + "; ".join(row["verdict"]["reasons"])


def report(rows: list[dict], scenarios: list[str]) -> bool:
    """Print the ratios per round and their medians; True when every median is within TARGET."""
    ok = True
    print(f"\n{'scenario':<14} {'figure':<10} {'ratios B/A per round':<32} {'median':>7}  target +-{TARGET:.0%}")
    for scenario in scenarios:
        ratios = []
        for round_index in sorted({r["round"] for r in rows}):
            pair = {
                r["load_generator"]: figure(r) for r in rows if r["scenario"] == scenario and r["round"] == round_index
            }
            if pair.get("inferperf") and pair.get("mlperf") is not None:
                ratios.append(pair["mlperf"] / pair["inferperf"])
        median = statistics.median(ratios) if ratios else float("nan")
        met = abs(median - 1.0) <= TARGET
        ok &= met
        shown = " ".join(f"{r:.3f}" for r in ratios)
        print(f"{scenario:<14} {figure_name(scenario):<10} {shown:<32} {median:>7.3f}  {'met' if met else 'NOT met'}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="digits", choices=sorted(CASES))
    parser.add_argument("--batch", type=int, default=None, help="batch size (default: digits 16, resnet50 1)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--min-duration", type=float, default=5.0, help="min_duration_s of every row (seconds)")
    parser.add_argument(
        "--server-load", type=float, default=0.5, help="server target_qps as a fraction of A's offline samples/s"
    )
    parser.add_argument(
        "--latency-bound-ms",
        type=float,
        default=60000.0,
        help="server latency_bound_ms (high: the bound is not what is compared)",
    )
    parser.add_argument(
        "--scenarios", default="offline,single_stream,server", help="comma-separated subset of " + ",".join(_records())
    )
    parser.add_argument("--max-duration", type=float, default=60.0, help="max_duration_s of every row (seconds)")
    parser.add_argument(
        "--samples-per-query", type=int, default=8, help="multi_stream_samples_per_query (a multiple of the batch size)"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(json.loads(args.child))
        return 0
    scenarios = [s for s in args.scenarios.split(",") if s]
    if not scenarios or any(s not in _records() for s in scenarios):
        parser.error(f"--scenarios: a comma-separated subset of {','.join(_records())}, got {args.scenarios!r}")
    batch = args.batch or CASES[args.case]
    with tempfile.TemporaryDirectory(prefix="inferperf-crosscheck-") as name:
        tmp = Path(name)
        perf, data = prepare(tmp, args.case)
        spec = {
            "perf": str(perf),
            "data": str(data),
            "log": str(tmp / "log"),
            "out": str(tmp / "rows.json"),
            "case": args.case,
            "batch": batch,
            "rounds": args.rounds,
            "min_duration": args.min_duration,
            "server_load": args.server_load,
            "latency_bound_ms": args.latency_bound_ms,
            "scenarios": scenarios,
            "samples_per_query": args.samples_per_query,
            "max_duration": args.max_duration,
        }
        print(
            f"case={args.case} batch={batch} rounds={args.rounds} min_duration_s={args.min_duration:g} "
            "A=inferperf B=mlperf (LoadGen)"
        )
        env = {**os.environ, "PYTHONPATH": str(perf)}
        command = [sys.executable, "-m", "bench.loadgen_crosscheck", "--child", json.dumps(spec)]
        with subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True) as proc:
            for line in proc.stdout:  # the measured loops' PROGRESS lines are for run.py's display, not here
                if not line.startswith("PROGRESS "):
                    print(line, end="", flush=True)
        if proc.returncode != 0:
            print(f"the measuring child failed (exit {proc.returncode})", file=sys.stderr)
            return 2
        rows = json.loads(Path(spec["out"]).read_text())
    if any(_records()[r["scenario"]].scheduled for r in rows):
        print(
            f"server target_qps {rows[-1]['target_qps']:.4g} samples/s ({args.server_load:g} x A's offline samples/s)"
        )
    return 0 if report(rows, scenarios) else 1


if __name__ == "__main__":
    sys.exit(main())
