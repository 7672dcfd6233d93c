"""The machine's noise floor: a bare ONNX Runtime loop cut into fixed windows, and the
precision the batch-means interval (tools/measure/precision.py) reaches after T seconds.

    python3 -m bench.noise_floor [--case resnet50] [--batch 8] [--seconds 60] [--data DIR]

The engine is the project's own: the case's ONNX export compiled by the cpu vendor's
ONNX Runtime engine (reused from inference/onnxs/ when cached). The loop then calls
``onnxruntime.InferenceSession.run`` directly, back to back on one batch, for
``--seconds`` after 5 warm-up calls, and prints:

  queries      per-query latency: mean, CV, lag-1 autocorrelation;
  windows      fixed windows of 1, 2, 5 s: the CV of the windows' throughput and the
               largest deviation of a window from the median window, counting the
               samples of the queries that complete in each window (as perf_analyzer's
               windows do), and again with each query's samples spread over the time
               it ran (the block rates the interval uses: no counting quantisation);
  precision    the 95 % batch-means half-width of the throughput over the first T
               seconds, for T = 5, 10, 20, 30 and 60 s (what ``precision`` can reach);
  trade-off    with ``--tradeoff``: the stop rule replayed on the loop's timeline from
               start points every 10 s (each a window of up to ``--max-duration`` s after
               ``--min-duration`` s and ``--min-queries`` queries, checked every 0.5 s):
               per precision, how often it was reached, the median and slowest time it
               took, and how often the window's drift test fired at that point. Run the
               loop for 3 minutes or more (``--seconds 180``) to have a dozen windows.

docs/measurement.md keeps the table; run it on a quiet machine to reproduce it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
INFERENCE = REPO / "inference"
WINDOWS_S = (1.0, 2.0, 5.0)
HORIZONS_S = (5.0, 10.0, 20.0, 30.0, 60.0)
DATA = {"resnet50": "imagenet_synthetic", "vit": "imagenet_synthetic", "digits": "digits", "bert": "bert"}


def _engine(case: str, batch: int, data: str, log: str) -> tuple[str, list, dict]:
    """The case's compiled engine file (built or reused), one batch of its inputs, and the config's thread keys."""
    from loguru import logger

    from tools.measure.loop import as_input_list
    from tools.pipeline import Pipeline, PipelineArgs

    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    overrides = [f"batch_size={batch}", "numeric_check=false", "audits=false"]
    pipeline = Pipeline(PipelineArgs(str(INFERENCE), data, log, "cpu", case, "pytorch", overrides))
    pipeline.init()
    pipeline.dataset_and_model()
    pipeline.onnx_export()
    pipeline.vendor_compile()
    config = pipeline.state.config
    x, _ = next(iter(pipeline.state.dataloader))
    threads = {k: int(config.get(k, 0)) for k in ("intra_op_num_threads", "inter_op_num_threads")}
    return str(config.engine_path), [t.numpy() for t in as_input_list(x)], threads


def bare_loop(engine_path: str, inputs: list, threads: dict, seconds: float) -> tuple[list[int], list[int]]:
    """(completion ns from the start, latency ns) of each call, back to back for ``seconds``."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads["intra_op_num_threads"]
    options.inter_op_num_threads = threads["inter_op_num_threads"]
    options.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )  # the engine file is already optimised
    session = ort.InferenceSession(engine_path, options, providers=["CPUExecutionProvider"])
    feed = dict(zip([i.name for i in session.get_inputs()], inputs))
    for _ in range(5):
        session.run(None, feed)
    ends, latencies = [], []
    start = now = time.perf_counter_ns()
    limit = start + int(seconds * 1e9)
    while now < limit:
        t0 = now
        session.run(None, feed)
        now = time.perf_counter_ns()
        ends.append(now - start)
        latencies.append(now - t0)
    return ends, latencies


def window_table(ends: list[int], batch: int) -> list[tuple[float, float, float, float, float]]:
    """Per window length: (seconds, CV and worst deviation counting completions, the same with spread samples)."""
    import numpy as np

    from tools.measure.precision import Timeline

    timeline = Timeline.tiled(ends, batch)
    rows = []
    for window in WINDOWS_S:
        count = int(timeline.span_ns // (window * 1e9))
        if count < 3:
            continue
        edges = np.arange(count + 1) * window * 1e9
        counted = np.histogram(np.asarray(ends, dtype=float), bins=edges)[0] * batch / window
        spread = np.diff([timeline.work_at(t) for t in edges]) / window
        rows.append((window, *_spread_figures(counted), *_spread_figures(spread)))
    return rows


def _spread_figures(rates) -> tuple[float, float]:
    import numpy as np

    median, mean = float(np.median(rates)), float(np.mean(rates))
    cv = float(np.std(rates) / mean) if mean > 0 else float("nan")
    # A median window with nothing in it (queries longer than a window): no deviation can be stated.
    return cv, float(np.max(np.abs(rates - median)) / median) if median > 0 else float("nan")


def precision_table(ends: list[int], batch: int) -> list[tuple[float, int, float | None, int | None]]:
    """(T seconds, queries, relative half-width, batches) of the interval over the first T seconds."""
    from tools.measure.precision import Timeline, throughput_interval

    rows = []
    for horizon in HORIZONS_S:
        upto = [e for e in ends if e <= horizon * 1e9]
        if not upto or ends[-1] < horizon * 1e9 * 0.99:
            continue
        interval = throughput_interval(Timeline.tiled(upto, batch))
        rows.append(
            (horizon, len(upto), interval.relative if interval else None, interval.batches if interval else None)
        )
    return rows


TRADEOFF_PRECISIONS = (0.02, 0.05, 0.08, 0.10, 0.15)
TRADEOFF_STEP_S = 10.0


TradeoffRow = tuple[float, int, int, float | None, float | None, int, int]


def tradeoff_table(ends: list[int], batch: int, max_s: float, min_s: float, min_queries: int) -> list[TradeoffRow]:
    """(precision, windows, reached, median s to reach, slowest s to reach, drifting at the stop, intervals
    covering the whole loop's rate) per precision: the stop rule (tools/measure/precision.py) replayed on
    windows starting every ``TRADEOFF_STEP_S``. The whole loop's rate stands for the machine's long-run
    rate: an interval that misses it says less than it claims (the machine wanders on a longer scale)."""
    import numpy as np

    from tools.measure.precision import CHECK_EVERY_S, Timeline, drift, throughput_interval

    whole = Timeline.tiled(ends, batch)
    starts = np.arange(0.0, whole.span_ns - max_s * 1e9 + 1, TRADEOFF_STEP_S * 1e9)
    reach: dict[float, list[float | None]] = {p: [] for p in TRADEOFF_PRECISIONS}
    drifting: dict[float, int] = {p: 0 for p in TRADEOFF_PRECISIONS}
    covering: dict[float, int] = {p: 0 for p in TRADEOFF_PRECISIONS}
    long_run = whole.work_at(whole.span_ns) / whole.span_ns * 1e9
    end_ns = np.asarray(ends, dtype=np.float64)
    for start in starts:
        pending = set(TRADEOFF_PRECISIONS)
        first = int(np.searchsorted(end_ns, start, side="right"))
        enough = end_ns[min(first + min_queries, len(end_ns) - 1)] - start
        t = max(min_s * 1e9, enough)
        while pending and t <= max_s * 1e9:
            last = int(np.searchsorted(end_ns, start + t, side="right")) + 1
            near = Timeline(
                whole.begin_ns[first:last], whole.end_ns[first:last], whole.samples[first:last], whole.span_ns
            )
            window = near.part(start, start + t)
            interval = throughput_interval(window)
            for p in sorted(pending):
                if interval is not None and interval.relative <= p:
                    reach[p].append(t / 1e9)
                    found = drift(window, p)
                    drifting[p] += bool(found and found.drifting)
                    covering[p] += interval.lo <= long_run <= interval.hi
                    pending.discard(p)
            t += CHECK_EVERY_S * 1e9
        for p in pending:
            reach[p].append(None)
    rows = []
    for p in TRADEOFF_PRECISIONS:
        times = [x for x in reach[p] if x is not None]
        rows.append(
            (
                p,
                len(reach[p]),
                len(times),
                float(np.median(times)) if times else None,
                max(times) if times else None,
                drifting[p],
                covering[p],
            )
        )
    return rows


def _child(spec: dict) -> None:
    import numpy as np

    engine_path, inputs, threads = _engine(spec["case"], spec["batch"], spec["data"], spec["log"])
    ends, latencies = bare_loop(engine_path, inputs, threads, spec["seconds"])
    lat = np.asarray(latencies, dtype=float)
    centred = lat - lat.mean()
    lag1 = float(np.dot(centred[:-1], centred[1:]) / np.dot(centred, centred)) if len(lat) > 2 else float("nan")
    print(f"case={spec['case']} batch={spec['batch']} seconds={spec['seconds']:g} engine={Path(engine_path).name}")
    print(
        f"queries: {len(lat)}, {len(lat) * spec['batch'] * 1e9 / ends[-1]:.2f} samples/s, latency mean "
        f"{lat.mean() / 1e6:.1f} ms, ",
        end="",
    )
    print(f"CV {lat.std() / lat.mean():.1%}, lag-1 autocorrelation {lag1:.2f}")
    print(
        "\n| window | CV of window throughput | worst window from the median | CV, samples spread | worst, samples "
        "spread |"
    )
    print("|---|---|---|---|---|")
    for window, cv, worst, cv_spread, worst_spread in window_table(ends, spec["batch"]):
        print(f"| {window:g} s | {cv:.1%} | {worst:.1%} | {cv_spread:.1%} | {worst_spread:.1%} |")
    print("\n| after T | queries | 95% half-width (batch means) | batches |")
    print("|---|---|---|---|")
    for horizon, count, relative, batches in precision_table(ends, spec["batch"]):
        shown = f"±{relative:.2%}" if relative is not None else "n/a"
        print(f"| {horizon:g} s | {count} | {shown} | {batches or '-'} |")
    if spec.get("tradeoff"):
        max_s, min_s, min_queries = spec["max_duration"], spec["min_duration"], spec["min_queries"]
        head = (
            f"reached within {max_s:g} s | median s to reach | slowest s | drifting at the stop | interval covers "
            "the loop's rate"
        )
        print(f"\n| precision | windows | {head} |")
        print("|---|---|---|---|---|---|---|")
        for p, windows, reached, median, slowest, drifted, covered in tradeoff_table(
            ends, spec["batch"], max_s, min_s, min_queries
        ):
            shown = (f"{median:.1f}", f"{slowest:.1f}") if median is not None else ("-", "-")
            print(f"| {p:.0%} | {windows} | {reached} | {shown[0]} | {shown[1]} | {drifted} | {covered} of {reached} |")
    if spec.get("save"):
        np.savez(spec["save"], ends=np.asarray(ends), batch=spec["batch"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="resnet50", choices=sorted(DATA))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument(
        "--data", help="the case's data directory (default: data/<its set>, from scripts/prepare_data.sh)"
    )
    parser.add_argument(
        "--tradeoff",
        action="store_true",
        help="replay the stop rule from start points every 10 s (needs --seconds >= 2 x --max-duration)",
    )
    parser.add_argument(
        "--max-duration", type=float, default=60.0, help="the replayed windows' cap, s (max_duration_s)"
    )
    parser.add_argument("--min-duration", type=float, default=2.0, help="the replayed windows' min_duration_s")
    parser.add_argument("--min-queries", type=int, default=24, help="the replayed windows' min_query_count")
    parser.add_argument("--save", help="write the loop's completion times to this .npz (ends, batch)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(json.loads(args.child))
        return 0
    data = Path(args.data) if args.data else REPO / "data" / DATA[args.case]
    if not data.is_dir():
        sys.exit(f"noise_floor: no data directory {data} (run scripts/prepare_data.sh, or pass --data)")
    with tempfile.TemporaryDirectory(prefix="inferperf-noise-") as log:
        spec = {
            "case": args.case,
            "batch": args.batch,
            "seconds": args.seconds,
            "data": str(data),
            "log": log,
            "tradeoff": args.tradeoff,
        }
        spec.update(
            max_duration=args.max_duration, min_duration=args.min_duration, min_queries=args.min_queries, save=args.save
        )
        # The child's import root is inference/, as run_inference.py's is.
        env = {**os.environ, "PYTHONPATH": str(INFERENCE)}
        return subprocess.run(
            [sys.executable, "-m", "bench.noise_floor", "--child", json.dumps(spec)], cwd=REPO, env=env
        ).returncode


if __name__ == "__main__":
    sys.exit(main())
