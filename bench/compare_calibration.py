"""How often ``run.py compare`` cries wolf, how often it finds a real slowdown, and what a decision costs.

    python3 -m bench.compare_calibration [--case digits] [--pairs 10] [--repeat 3] [--data DIR]
                                         [--slowdown 0.15] [--threshold 5] [--set KEY=VALUE ...]
                                         [--keep DIR] [--minutes M]
    python3 -m bench.compare_calibration --analyse DIR [DIR ...] [--threshold 5] [--sizes 4 8]
                                         [--chance N]

Each pair is one real ``run.py ab`` in a copy of inference/ (MODE local, the shipped settings of
the case, ``--set`` added), interleaved ABBA with ``--repeat`` repetitions per side:

  A/A   ``--set-a compiler=onnxruntime --set-b compiler=onnxruntime_copy``: the cpu vendor's engine
        and a byte-for-byte copy of it under another name, so both sides run the same code;
  A/B   ``--set-b compiler=busy_onnxruntime``: the same engine at ``1 - --slowdown`` of its throughput
        for real (``--slowdown 0.15``: 15 % fewer samples per second, 1 / 0.85 = 1.18x the time per
        call), on every entry point the engine has (``__call__`` and ``call_numpy``: the inference
        pass calls the latter), by spinning on the CPU after each call
        (tests/fixtures/engines/slow_onnxruntime.py; a sleep would free the CPU, which a slower
        engine does not).

Then, per kind, over the pairs: the share of pairs whose inference-phase core qps was called
"worse" (false alarms for A/A, power for A/B), the share where ``run.py ab`` exited 1 (any figure
worse: the gate a CI job would use), the median ratio B/A and the median width of its interval,
and the median wall time of one decision (both sides, every repetition). docs/measurement.md
keeps the table; run it on a quiet machine (nothing else running), as a timing claim.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
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
sys.path.insert(0, str(INFERENCE))  # utils.results.decide, for --analyse
DATA = {"resnet50": "imagenet_synthetic", "vit": "imagenet_synthetic", "digits": "digits", "bert": "bert"}
IGNORE = shutil.ignore_patterns("result", "onnxs", "__pycache__", "*.pyc")

# The A/B engine: tests/fixtures/engines/slow_onnxruntime.py, which slows every entry point of the engine
# (__call__ and call_numpy: the inference pass calls the latter), with its SPEED set from --slowdown.
SLOW_ENGINE = REPO / "tests" / "fixtures" / "engines" / "slow_onnxruntime.py"
SPEED_LINE = re.compile(r"^SPEED = [0-9.]+  #.*$", re.MULTILINE)


def busy_engine(slowdown: float) -> str:
    """The slowed engine's source at a throughput of ``1 - slowdown`` of the plain engine's."""
    text = SLOW_ENGINE.read_text()
    found = SPEED_LINE.findall(text)
    if len(found) != 1:
        raise SystemExit(f"{SLOW_ENGINE}: expected one line 'SPEED = <number>  # ...', found {len(found)}")
    line = f"SPEED = {1 - slowdown!r}  # --slowdown {slowdown:g} (bench/compare_calibration.py)"
    return SPEED_LINE.sub(line, text)


def make_tree(root: Path, case: str, data: Path, slowdown: float) -> tuple[Path, Path]:
    """A copy of inference/ with the two extra engines, its onnxs/ cache shared with the real tree's, and a
    host.yaml."""
    perf = root / "inference"
    shutil.copytree(INFERENCE, perf, ignore=IGNORE)
    engines = perf / "inference_engine" / "cpu"
    shutil.copy(engines / "onnxruntime.py", engines / "onnxruntime_copy.py")
    (engines / "busy_onnxruntime.py").write_text(busy_engine(slowdown))
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


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) two-sided interval of a binomial rate k/n."""
    from scipy.stats import beta

    tail = (1 - confidence) / 2
    low = 0.0 if k == 0 else float(beta.ppf(tail, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1 - tail, k + 1, n - k))
    return low, high


def rate(k: int, n: int) -> str:
    """``k/n [low, high]``, the exact 95 % interval in percent."""
    low, high = clopper_pearson(k, n)
    return f"{k}/{n} [{low:.1%}, {high:.1%}]"


def decisions(folders: list[Path], threshold: float, sizes: list[int]) -> list[str]:
    """Independent decisions: each ``run.py ab`` call as it exited, then disjoint groups of N matched pairs in
    run order (bench/calibration_analysis.py's matching), each decided as ``run.py ab --repeat N`` decides."""
    from bench.calibration_analysis import decide_group, load, matched

    pairs = [pair for folder in folders for pair in load(folder)]
    calls = {"A/A": [0, 0], "A/B": [0, 0]}
    for folder in folders:
        for compare in sorted(folder.glob("*_compare_A.json")):
            run = compare.name.removesuffix("_compare_A.json")
            b = json.loads((folder / f"{run}_B.summary.json").read_text())
            kind = "A/A" if b["results"][0]["compiler"] == "onnxruntime_copy" else "A/B"
            calls[kind][0] += json.loads(compare.read_text())["exit_code"] == 1
            calls[kind][1] += 1
    lines = [
        f"threshold {threshold:.0%}; exact (Clopper-Pearson) 95 % intervals",
        "",
        "| kind | N | independent decisions | core qps called worse | any figure worse (exit 1) |",
        "|---|---|---|---|---|",
    ]
    for kind in ("A/A", "A/B"):
        k, n = calls[kind]
        if n:
            lines.append(f"| {kind} | each call as it ran | {n} | | {rate(k, n)} |")
        seq = matched(pairs, kind)
        for size in sizes:
            groups = [seq[i : i + size] for i in range(0, len(seq) - size + 1, size)]
            if not groups:
                continue
            called = [decide_group(group, ("inference", "core qps"), threshold) for group in groups]
            core, gate = sum(c[0] for c in called), sum(c[2] for c in called)
            lines.append(f"| {kind} | {size} | {len(groups)} | {rate(core, len(groups))} | {rate(gate, len(groups))} |")
    return lines


def pair_logs(folders: list[Path], kind: str) -> tuple[list[tuple[str, str]], list[bool], list[list[float]]]:
    """The kind's matched pairs as log ratios B/A, one row a pair, one column a figure (every figure both
    sides have)."""
    from bench.calibration_analysis import load, matched

    seq = matched([pair for folder in folders for pair in load(folder)], kind)
    if not seq:
        return [], [], []
    keys = sorted(key for key in seq[0][0] if all(key in m[0] and key in m[1] for m in seq))
    higher = [seq[0][0][key][0] for key in keys]
    rows = [[math.log(m[1][key][1].value / m[0][key][1].value) for key in keys] for m in seq]
    return keys, higher, rows


def worse_any(oriented, bound, n: int, crit: float):  # numpy arrays: (draws, n, figures) -> (draws,)
    """``run.py ab``'s exit 1 on each draw of n pairs: some figure's paired t-interval lies wholly on the worse
    side and its mean change is beyond the threshold (``bound``, in log, the worse direction positive)."""
    import numpy as np

    mean = oriented.mean(axis=1)
    low = mean - crit * oriented.std(axis=1, ddof=1) / math.sqrt(n)
    return np.asarray(((low > 0) & (mean > bound + 1e-12)).any(axis=1))


def chance(folders: list[Path], n: int, threshold: float, draws: int = 400_000, boots: int = 200) -> list[str]:
    """How often ``run.py ab --repeat n --threshold T`` fails a test by chance, its n pairs drawn at random
    (seeded) from the measured ones, each an independent draw of this machine's pair-to-pair noise: the
    identical engines called worse on some figure (exit 1), the slowed engine on none. An A/A pair is drawn
    as measured or mirrored (B/A or A/B, equally likely): the two engines are the same code, so a pair's two
    orders are equally likely and the null's mean is exactly no change. Beside the estimate, its 95 %
    upper bound over the measured set itself (the pairs bootstrapped ``boots`` times): the margin for having
    measured few pairs. The vectorised rule is checked against ``utils.results.decide`` on 200 draws."""
    import numpy as np
    from scipy.stats import t as student

    from utils.results.decide import Sample, decide

    rng = np.random.default_rng(20261206)
    crit = float(student.ppf(0.975, n - 1))
    lines = [
        f"N = {n} pairs, threshold {threshold:.0%}, {draws} draws of N pairs (t({n - 1}) = {crit:.3f})",
        "",
        "| kind | pairs measured | figure: sd of the pairs' log B/A (median B/A) | chance of failing "
        "| its 95 % upper bound (bootstrap of the pairs) |",
        "|---|---|---|---|---|",
    ]
    for kind in ("A/A", "A/B"):
        keys, higher, rows = pair_logs(folders, kind)
        if len(rows) < 2:
            continue
        logs = np.array(rows)
        if kind == "A/A":
            logs = np.vstack([logs, -logs])
        # the worse direction positive: a throughput below 1 - T, a latency above 1 + T
        oriented = np.where(np.array(higher), -logs, logs)
        bound = np.where(np.array(higher), -math.log(1 - threshold), math.log(1 + threshold))
        idx = rng.integers(0, len(logs), size=(200, n))
        check = worse_any(oriented[idx], bound, n, crit)
        for draw in range(200):
            called = any(
                decide(
                    [Sample(1.0)] * n,
                    [Sample(math.exp(v)) for v in logs[idx[draw], j]],
                    higher[j],
                    threshold,
                    paired=True,
                ).regression
                for j in range(len(keys))
            )
            assert called == bool(check[draw]), (draw, called, check[draw])

        def failing(source: np.ndarray, count: int) -> int:
            failed = 0
            for start in range(0, count, 50_000):
                worse = worse_any(
                    source[rng.integers(0, len(source), size=(min(50_000, count - start), n))], bound, n, crit
                )
                failed += int(worse.sum()) if kind == "A/A" else int((~worse).sum())
            return failed

        failed = failing(oriented, draws)
        rates = []
        for _ in range(boots):
            sample = rng.integers(0, len(rows), size=len(rows))
            source = oriented[np.concatenate([sample, sample + len(rows)])] if kind == "A/A" else oriented[sample]
            rates.append(failing(source, draws // 10) / (draws // 10))
        upper = float(np.quantile(rates, 0.95))
        spread = ", ".join(
            f"{key[0].split()[0]} {key[1]}: {np.std(logs[:, j], ddof=1):.3f} ({np.exp(np.median(logs[:, j])):.3f})"
            for j, key in enumerate(keys)
        )
        estimate = f"{failed}/{draws} = {failed / draws:.1e}" if failed else f"0/{draws} (< {3 / draws:.0e})"
        lines.append(f"| {kind} | {len(rows)} | {spread} | {estimate} | {upper:.1e} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", default="digits", choices=sorted(DATA))
    parser.add_argument(
        "--data", default=None, help="the case's data directory (default: data/<its folder> beside inference/)"
    )
    parser.add_argument("--pairs", type=int, default=10, help="A/A pairs and A/B pairs, each (default 10)")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions per side of each pair (default 3)")
    parser.add_argument(
        "--slowdown",
        type=float,
        default=0.15,
        help="the A/B engine's throughput loss, a fraction (default 0.15: 85 %% of the plain engine's samples/s)",
    )
    parser.add_argument("--threshold", type=float, default=5.0)
    parser.add_argument(
        "--set", action="append", default=[], dest="sets", metavar="KEY=VALUE", help="a case config key for both sides"
    )
    parser.add_argument(
        "--keep", type=Path, default=None, help="a folder to keep each pair's summaries and decision in (default: none)"
    )
    parser.add_argument("--minutes", type=float, default=None, help="start no pair after this many minutes")
    parser.add_argument(
        "--analyse", type=Path, nargs="+", default=None, metavar="DIR", help="read kept folders instead of running"
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 8], help="N of the disjoint decisions (--analyse)")
    parser.add_argument(
        "--chance", type=int, default=None, metavar="N", help="the chance a decided test fails (--analyse)"
    )
    args = parser.parse_args()
    if args.analyse is not None:
        print("\n".join(decisions(args.analyse, args.threshold / 100, args.sizes)))
        if args.chance is not None:
            print()
            print("\n".join(chance(args.analyse, args.chance, args.threshold / 100)))
        return 0
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    data = Path(args.data or REPO / "data" / DATA[args.case]).resolve()
    print(
        f"started {time.strftime('%Y-%m-%d %H:%M:%S')} on {os.cpu_count()} CPUs, load average "
        + " ".join(f"{x:.2f}" for x in os.getloadavg()),
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="calibration-") as tmp:
        root = Path(tmp)
        perf, host_yaml = make_tree(root, args.case, data, args.slowdown)
        found: dict[str, list[dict]] = {"A/A": [], f"A/B ({args.slowdown:.0%} slower)": []}
        deadline = None if args.minutes is None else time.monotonic() + 60 * args.minutes
        for index in range(args.pairs):  # the kinds interleaved too: a slow hour falls on both
            if deadline is not None and time.monotonic() > deadline:
                break
            for kind, engine in zip(found, ("onnxruntime_copy", "busy_onnxruntime")):
                pair = one_pair(perf, host_yaml, root, engine, args.repeat, args.threshold, args.sets, args.keep)
                found[kind].append(pair)
                load = " ".join(f"{x:.2f}" for x in os.getloadavg())
                print(
                    f"{kind} pair {index + 1}: exit {pair['exit']}, core qps {pair['core']}, B/A "
                    f"{pair['ratio']:.3f}, {pair['seconds']:.0f} s, {pair['run']}, "
                    f"ended {time.strftime('%H:%M:%S')}, load average {load}",
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
