"""How often ``run.py compare`` cries wolf, how often it finds a real slowdown, and what a decision costs.

    python3 -m bench.compare_calibration [--case digits] [--pairs 10] [--repeat 3] [--data DIR]
                                         [--slowdown 0.15] [--threshold 5] [--set KEY=VALUE ...]

Each pair is one real ``run.py ab`` in a copy of inference/ (MODE local, the shipped settings of
the case, ``--set`` added), interleaved ABBA with ``--repeat`` repetitions per side:

  A/A   ``--set-a compiler=onnxruntime --set-b compiler=onnxruntime_copy``: the cpu vendor's engine
        and a byte-for-byte copy of it under another name, so both sides run the same code;
  A/B   ``--set-b compiler=busy_onnxruntime``: the same engine made ``--slowdown`` slower for real,
        by spinning on the CPU after each call for that fraction of the call's own time (a sleep
        would free the CPU, which a slower engine does not).

Then, per kind, over the pairs: the share of pairs whose inference-phase core qps was called
"worse" (false alarms for A/A, power for A/B), the share where ``run.py ab`` exited 1 (any figure
worse: the gate a CI job would use), the median ratio B/A and the median width of its interval,
and the median wall time of one decision (both sides, every repetition). docs/measurement.md
keeps the table; run it on a quiet machine (nothing else running), as a timing claim.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
INFERENCE = REPO / "inference"
DATA = {"resnet50": "imagenet_synthetic", "vit": "imagenet_synthetic", "digits": "digits", "bert": "bert"}
IGNORE = shutil.ignore_patterns("result", "onnxs", "__pycache__", "*.pyc")

BUSY_ENGINE = '''"""The cpu vendor's ONNX Runtime engine, made SLOWDOWN slower by spinning after each call \
(bench/compare_calibration.py)."""

import time

from inference_engine.cpu.onnxruntime import InferModel as OnnxRuntimeModel
from inference_engine.cpu.onnxruntime import preflight  # noqa: F401

SLOWDOWN = {slowdown!r}


class InferModel(OnnxRuntimeModel):
    def __call__(self, inputs):
        start = time.perf_counter()
        result = super().__call__(inputs)
        done = time.perf_counter()
        until = done + (done - start) * SLOWDOWN
        while time.perf_counter() < until:  # busy: the CPU stays taken, as a slower kernel's would
            pass
        return result
'''


def make_tree(root: Path, case: str, data: Path, slowdown: float) -> tuple[Path, Path]:
    """A copy of inference/ with the two extra engines, its onnxs/ cache shared with the real tree's, and a
    host.yaml."""
    perf = root / "inference"
    shutil.copytree(INFERENCE, perf, ignore=IGNORE)
    engines = perf / "inference_engine" / "cpu"
    shutil.copy(engines / "onnxruntime.py", engines / "onnxruntime_copy.py")
    (engines / "busy_onnxruntime.py").write_text(BUSY_ENGINE.format(slowdown=slowdown))
    (INFERENCE / "onnxs").mkdir(exist_ok=True)
    (perf / "onnxs").symlink_to(INFERENCE / "onnxs")  # the export cache: a decision need not re-export
    config = {
        "MODE": "local",
        "VENDOR": "cpu",
        "FLAGPERF_PATH": str(perf),
        "FLAGPERF_LOG_PATH": str(root / "result"),
        "HOSTS": ["127.0.0.1"],
        "CASES": {f"{case}:pytorch": str(data)},
    }
    host_yaml = root / "host.yaml"
    host_yaml.write_text(yaml.safe_dump(config))
    return perf, host_yaml


def one_pair(
    perf: Path,
    host_yaml: Path,
    root: Path,
    b_compiler: str,
    repeat: int,
    threshold: float,
    sets: list[str],
    keep: Path | None = None,
) -> dict:
    before = set((root / "result").glob("run*"))
    extra = [arg for item in sets for arg in ("--set", item)]
    argv = [sys.executable, "run.py", "ab", "--config", str(host_yaml), *extra, "--set-a", "compiler=onnxruntime"]
    argv += [
        "--set-b",
        f"compiler={b_compiler}",
        "--repeat",
        str(repeat),
        "--threshold",
        str(threshold),
        "--allow-invalid",
    ]
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=perf, capture_output=True, text=True, timeout=3600)
    seconds = time.monotonic() - started
    (run,) = set((root / "result").glob("run*")) - before
    decision_file = run / "B" / "compare_A.json"
    if not decision_file.is_file():
        raise SystemExit(f"run.py ab exited {proc.returncode} without a decision:\n{proc.stderr[-3000:]}")
    lines = {(line["row"], line["figure"]): line for line in json.loads(decision_file.read_text())["lines"]}
    core = lines[("inference", "core qps")]
    if keep is not None:  # each side's summary, with every repetition's figures, for later analysis
        for side in ("A", "B"):
            shutil.copy(run / side / "summary.json", keep / f"{run.name}_{side}.summary.json")
        shutil.copy(decision_file, keep / f"{run.name}_compare_A.json")
        shutil.copy(decision_file.with_suffix(".md"), keep / f"{run.name}_compare_A.md")
    shutil.rmtree(run, ignore_errors=True)  # the runs' files: only the decision is kept
    return {
        "exit": proc.returncode,
        "core": core["decided"],
        "ratio": core["ratio"],
        "width": core["high"] / core["low"],
        "seconds": seconds,
        "run": run.name,
    }


def summarise(kind: str, pairs: list[dict]) -> str:
    n = len(pairs)
    worse = sum(p["core"] == "worse" for p in pairs)
    gated = sum(p["exit"] == 1 for p in pairs)
    ratio = statistics.median(p["ratio"] for p in pairs)
    width = statistics.median((p["width"] - 1) / 2 for p in pairs)
    seconds = statistics.median(p["seconds"] for p in pairs)
    return f"| {kind} | {n} | {worse}/{n} | {gated}/{n} | {ratio:.3f} | ±{width:.1%} | {seconds:.0f} s |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", default="digits", choices=sorted(DATA))
    parser.add_argument(
        "--data", default=None, help="the case's data directory (default: data/<its folder> beside inference/)"
    )
    parser.add_argument("--pairs", type=int, default=10, help="A/A pairs and A/B pairs, each (default 10)")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions per side of each pair (default 3)")
    parser.add_argument(
        "--slowdown", type=float, default=0.15, help="the A/B engine's extra busy time per call (default 0.15)"
    )
    parser.add_argument("--threshold", type=float, default=5.0)
    parser.add_argument(
        "--set", action="append", default=[], dest="sets", metavar="KEY=VALUE", help="a case config key for both sides"
    )
    parser.add_argument(
        "--keep", type=Path, default=None, help="a folder to keep each pair's summaries and decision in (default: none)"
    )
    args = parser.parse_args()
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    data = Path(args.data or REPO / "data" / DATA[args.case]).resolve()
    with tempfile.TemporaryDirectory(prefix="calibration-") as tmp:
        root = Path(tmp)
        perf, host_yaml = make_tree(root, args.case, data, args.slowdown)
        found: dict[str, list[dict]] = {"A/A": [], f"A/B ({args.slowdown:.0%} slower)": []}
        for index in range(args.pairs):  # the kinds interleaved too: a slow hour falls on both
            for kind, engine in zip(found, ("onnxruntime_copy", "busy_onnxruntime")):
                pair = one_pair(perf, host_yaml, root, engine, args.repeat, args.threshold, args.sets, args.keep)
                found[kind].append(pair)
                print(
                    f"{kind} pair {index + 1}: exit {pair['exit']}, core qps {pair['core']}, B/A "
                    f"{pair['ratio']:.3f}, {pair['seconds']:.0f} s, {pair['run']}",
                    flush=True,
                )
    print(
        f"\n{args.case}, --repeat {args.repeat} per side, threshold {args.threshold:g} %, "
        f"{' '.join(args.sets) or 'shipped settings'}\n"
    )
    print(
        "| kind | pairs | core qps called worse | run.py ab exit 1 | median B/A | median ± of B/A | time per decision |"
    )
    print("|---|---|---|---|---|---|---|")
    for kind, pairs in found.items():
        print(summarise(kind, pairs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
