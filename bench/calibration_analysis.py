"""What the calibration pairs say: the error rates of compare's decision against N, and the coverage of a headline ±.

    python3 -m bench.calibration_analysis DIR [--figure "inference:core qps"] [--threshold 5]

DIR is the folder that ``python3 -m bench.compare_calibration --keep DIR`` filled: every ``run.py ab``
pair's two summaries (each side ``--repeat`` repetitions, run ABBA) and its decision. Two tables:

**Error rates against N.** Every pair of repetitions that ran back to back (A then B, or B then A)
is one matched pair; an ``ab`` call with ``--repeat 3`` gives three. Per kind (A/A: both sides the
same engine; A/B: B made slower), the matched pairs are taken in the order they ran and cut into
disjoint groups of N consecutive pairs, and each group is decided by ``utils.results.decide.decide``
exactly as ``run.py ab --repeat N`` decides (paired for N >= 2; for N = 1 the unpaired rule with its
between-run term). This lets one session answer for several N at once; each group is a decision
that could have been made, on the same machine, with those runs. Shown per N: the share called
"worse" on the figure (false alarms for A/A, power for A/B), the share where any figure of the
repetitions block was "worse" (the gate a CI job reads from the exit code), the median half-width of
B/A, and the engine time per decision (both sides' repetitions' wall time, summed).

**Coverage of a headline ±.** Only the A/A pairs (both sides the same engine), in the order they ran:
a few dozen runs of one engine over the session, the spread a user meets between a run today and a
run next time. For each N, each side's first N repetitions give the interval the summary would show:

- N = 1, "window ±": the one window's own 95 % interval, which summary.json shows for one repetition;
- N = 1, "+ between-run": that interval widened by ``decide.BETWEEN_RUN_CV`` the way ``compare``
  widens one repetition (``decide.side``);
- N >= 2: the t-interval over the repetitions' logs (``decide.across``), the summary's headline ±.

"covers the session" is the share whose interval holds the geometric mean of every A/A run of the
session (the best estimate of the engine's figure on this machine); "covers the next run" the share
holding the next side's headline. An honest 95 % interval of a mean covers a later mean of the same
size less often than 95 % (about 83 % for normal noise at equal N), so that rate is shown for the
reader who asks "will my next run land inside this ±", not held to 95 %.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "inference"))

from utils.results.decide import Z975, Sample, across, decide, side, t_quantile  # noqa: E402


@dataclass(frozen=True)
class Figure:
    row: str
    figure: str
    higher_is_better: bool
    samples: tuple[Sample, ...]


@dataclass(frozen=True)
class Side:
    figures: dict[tuple[str, str], Figure]
    walls: tuple[float, ...]

    def samples(self, key: tuple[str, str]) -> list[Sample]:
        return list(self.figures[key].samples)


@dataclass(frozen=True)
class Pair:
    kind: str  # "A/A" or "A/B"
    a: Side
    b: Side


def _side(summary: dict) -> Side:
    (result,) = summary["results"]
    block = result["repetitions"]
    figures = {}
    for entry in block["figures"]:
        samples = tuple(
            Sample(value, tuple(interval) if interval else None, valid)
            for value, interval, valid in zip(entry["values"], entry["intervals"], entry["valid"])
        )
        figures[(entry["row"], entry["figure"])] = Figure(
            entry["row"], entry["figure"], entry["higher_is_better"], samples
        )
    return Side(figures, tuple(block["wall_time_s"]))


def load(folder: Path) -> list[Pair]:
    """Every kept pair, in the order they ran."""
    pairs = []
    for compare in sorted(folder.glob("*_compare_A.json")):
        run = compare.name.removesuffix("_compare_A.json")
        a = json.loads((folder / f"{run}_A.summary.json").read_text())
        b = json.loads((folder / f"{run}_B.summary.json").read_text())
        kind = "A/A" if b["results"][0]["compiler"] == "onnxruntime_copy" else "A/B"
        pairs.append(Pair(kind, _side(a), _side(b)))
    return pairs


Matched = tuple[dict, dict, float]  # one matched pair: (A's figures, B's figures, both walls)


def matched(pairs: list[Pair], kind: str) -> list[Matched]:
    """The kind's matched pairs of repetitions in run order: (A's figures, B's figures, both walls)."""
    out = []
    for pair in pairs:
        if pair.kind != kind:
            continue
        for k in range(min(len(pair.a.walls), len(pair.b.walls))):
            a = {key: (fig.higher_is_better, fig.samples[k]) for key, fig in pair.a.figures.items()}
            b = {key: (fig.higher_is_better, fig.samples[k]) for key, fig in pair.b.figures.items()}
            out.append((a, b, pair.a.walls[k] + pair.b.walls[k]))
    return out


def decide_group(group: list[Matched], key: tuple[str, str], threshold: float) -> tuple[bool, float | None, bool]:
    """One ``run.py ab --repeat N`` decision on N matched pairs, paired as ``ab`` decides: whether the figure
    ``key`` was called worse, the half-width of its log B/A interval (None when the pairs lack it), and
    whether any figure was called worse (the gate a CI job reads from the exit code)."""
    called, width, any_worse = False, None, False
    for figure, (higher, _) in group[0][0].items():
        if figure not in group[0][1]:
            continue
        d = decide([m[0][figure][1] for m in group], [m[1][figure][1] for m in group], higher, threshold, paired=True)
        any_worse |= d.regression
        if figure == key:
            called = d.regression
            width = (math.log(d.high) - math.log(d.low)) / 2
    return called, width, any_worse


@dataclass(frozen=True)
class Tally:
    worse: int  # decisions that called the figure worse
    gate: int  # decisions that called any figure worse
    median_width: float  # of the figure's B/A interval, in log units
    median_time: float  # engine seconds per decision


def tally(groups: list[list[Matched]], key: tuple[str, str], threshold: float) -> Tally:
    """``decide_group`` on every group, counted."""
    worse = gate = 0
    widths, times = [], []
    for group in groups:
        called, width, any_worse = decide_group(group, key, threshold)
        worse += called
        widths += [] if width is None else [width]
        gate += any_worse
        times.append(sum(m[2] for m in group))
    widths.sort()
    times.sort()
    return Tally(worse, gate, widths[len(groups) // 2], times[len(groups) // 2])


def tradeoff(pairs: list[Pair], key: tuple[str, str], threshold: float) -> list[str]:
    lines = [
        "| kind | N | decisions | figure called worse | any figure worse (exit 1) | median ± of B/A "
        "| engine time per decision |"
    ]
    lines.append("|---|---|---|---|---|---|---|")
    for kind in ("A/A", "A/B"):
        seq = matched(pairs, kind)
        for n in (1, 2, 3, 4, 6, 9, 12):
            groups = [seq[i : i + n] for i in range(0, len(seq) - n + 1, n)]
            if len(groups) < 3:
                continue
            t = tally(groups, key, threshold)
            k = len(groups)
            lines.append(
                f"| {kind} | {n} | {k} | {t.worse}/{k} = {t.worse / k:.0%} | {t.gate}/{k} = {t.gate / k:.0%} "
                f"| ±{t.median_width:.1%} | {t.median_time:.0f} s |"
            )
    return lines


def resampled(pairs: list[Pair], key: tuple[str, str], threshold: float, draws: int = 2000) -> list[str]:
    """The same decision on N matched pairs drawn at random (with replacement, seeded) from the kind's
    measured pairs: the error rates for any N from one session, as if each decision's pairs were
    independent draws of this machine's pair-to-pair noise."""
    import random

    rng = random.Random(20261127)
    lines = [
        "| kind | N | figure called worse | any figure worse (exit 1) | median ± of B/A | engine time per decision |",
        "|---|---|---|---|---|---|",
    ]
    for kind in ("A/A", "A/B"):
        seq = matched(pairs, kind)
        if len(seq) < 6:
            continue
        for n in (2, 3, 4, 5, 6, 8, 10, 12):
            t = tally([[rng.choice(seq) for _ in range(n)] for _ in range(draws)], key, threshold)
            lines.append(
                f"| {kind} | {n} | {t.worse / draws:.1%} | {t.gate / draws:.1%} | ±{t.median_width:.1%} "
                f"| {t.median_time:.0f} s |"
            )
    return lines


def separate_runs(pairs: list[Pair], key: tuple[str, str], threshold: float) -> list[str]:
    """``run.py compare`` on two runs made at different times (not ``ab``): the A side of each pair (the
    plain engine every time) against the next pair's A side (same engine: false alarms) and against the next
    A/B pair's B side (the slower engine: power), unpaired as compare decides them."""
    lines = [
        "| kind | N | decisions | figure called worse | any figure worse (exit 1) | median ± of B/A |",
        "|---|---|---|---|---|---|",
    ]
    for kind in ("A/A", "A/B"):
        for n in range(1, 1 + min(len(p.a.walls) for p in pairs)):
            worse = gate = 0
            widths = []
            for first, later in zip(pairs, pairs[1:]):
                other = later.a if kind == "A/A" else later.b
                if kind == "A/B" and later.kind != "A/B":
                    continue
                any_worse = False
                for figure, fig in first.a.figures.items():
                    if figure not in other.figures:
                        continue
                    d = decide(list(fig.samples[:n]), other.samples(figure)[:n], fig.higher_is_better, threshold)
                    any_worse |= d.regression
                    if figure == key:
                        worse += d.regression
                        widths.append((math.log(d.high) - math.log(d.low)) / 2)
                gate += any_worse
            k = len(widths)
            if k < 3:
                continue
            widths.sort()
            lines.append(
                f"| {kind} | {n} | {k} | {worse}/{k} = {worse / k:.0%} | {gate}/{k} = {gate / k:.0%} "
                f"| ±{widths[k // 2]:.1%} |"
            )
    return lines


def coverage(pairs: list[Pair], key: tuple[str, str]) -> list[str]:
    sides = [s.samples(key) for p in pairs if p.kind == "A/A" for s in (p.a, p.b)]
    if len(sides) < 4:
        return [f"{len(sides)} A/A sides: at least 2 A/A pairs are needed for the coverage"]
    repeat = min(len(s) for s in sides)
    values = [x.value for s in sides for x in s]
    logs = [math.log(v) for v in values]
    mean = sum(logs) / len(logs)
    truth = math.exp(mean)
    spread = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
    lines = [
        f"{len(sides)} A/A sides of {repeat} repetitions; session geomean {truth:.6g}, "
        f"spread of single runs {spread:.1%}",
        "",
        "| repetitions | headline ± | median ± | covers the session | covers the next run |",
        "|---|---|---|---|---|",
    ]
    between = f"window ± + between-run {math.sqrt(side([Sample(1.0)]).variance):.1%}"
    plans = [(1, "window", "window ±"), (1, "between", between)]
    plans += [(n, "t", "t over repetitions") for n in range(2, repeat + 1)]
    plans += [(n, "t+between", "t ⊕ between-run") for n in range(2, repeat + 1)]
    for n, how, label in plans:
        intervals = [interval_of(s[:n], how) for s in sides]
        usable = [(k, iv) for k, iv in enumerate(intervals) if iv is not None]
        session = sum(iv[0] <= truth <= iv[1] for _, iv in usable)
        nexts = [(k, iv) for k, iv in usable if k + 1 < len(sides)]
        later = sum(iv[0] <= across(sides[k + 1][:n])[0] <= iv[1] for k, iv in nexts)
        widths = sorted((math.log(iv[1]) - math.log(iv[0])) / 2 for _, iv in usable)
        median = widths[len(widths) // 2] if widths else float("nan")
        lines.append(
            f"| {n} | {label} | ±{median:.1%} | {session}/{len(usable)} = {session / max(len(usable), 1):.0%} "
            f"| {later}/{len(nexts)} = {later / max(len(nexts), 1):.0%} |"
        )
    return lines


def interval_of(samples: list[Sample], how: str) -> tuple[float, float] | None:
    if how == "window":
        return samples[0].interval
    if how == "between":
        s = side(samples[:1])
        half = Z975 * math.sqrt(s.variance)
        return math.exp(s.log_mean - half), math.exp(s.log_mean + half)
    if how == "t+between":
        s = side(samples)
        half = t_quantile(s.df) * math.sqrt(s.variance)
        return math.exp(s.log_mean - half), math.exp(s.log_mean + half)
    return across(samples)[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--figure", default="inference:core qps", help="ROW:FIGURE (default inference:core qps)")
    parser.add_argument("--threshold", type=float, default=5.0, help="compare's --threshold, in percent (default 5)")
    args = parser.parse_args()
    row, _, figure = args.figure.partition(":")
    pairs = load(args.folder)
    if not pairs:
        raise SystemExit(f"{args.folder}: no pair kept there (bench.compare_calibration --keep)")
    print(f"{args.folder}: {len(pairs)} pairs; {row} {figure}; threshold {args.threshold:g} %\n")
    print("\n".join(tradeoff(pairs, (row, figure), args.threshold / 100)))
    print(f"\nrun.py ab's decision on N pairs resampled from the {len(pairs)} calls' pairs:\n")
    print("\n".join(resampled(pairs, (row, figure), args.threshold / 100)))
    print("\ncompare of two separate runs (the A side of a pair against the next pair's side):\n")
    print("\n".join(separate_runs(pairs, (row, figure), args.threshold / 100)))
    print()
    print("\n".join(coverage(pairs, (row, figure))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
