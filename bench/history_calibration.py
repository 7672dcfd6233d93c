"""The error rates of decisions across time: compare with the noise learned from the history, and the change points.

    python3 -m bench.history_calibration --history URL [--learn 0.5] [--include-invalid]
                                         [--trials 2000] [--seed 1] [--json FILE]

Four tables, each rate as k/n with its exact 95 % interval (bench/rates.py) and the number of
independent decisions behind it:

1. **compare between runs made at different times, on this machine** (the history at ``--history``:
   real runs of one unchanged config, e.g. ``run.py calibrate``'s). Out of sample: each series' first
   ``--learn`` share of points (or those before ``--split-at``) is the sitting the noise is learned
   from (``utils/history/noise.py``, exactly as compare learns it); the rest, in the order they
   ran, is cut into disjoint consecutive pairs of runs, and each pair is decided as ``run.py compare`` decides it
   (``decide.decide_between``, threshold 5 %). False alarms: pairs called "worse". Power: the same
   pairs with B made 10 % worse (throughput x 0.9, latency / 0.9). Per figure, and per pair of runs
   ("any figure worse": the exit status a CI job reads; one decision per pair of runs).
2. **The same on a simulated steady host**: each run's figure is ``100 · exp(N(0, 0.02))``, independent
   between runs (a between-run spread of 2 %, the figure's own window noise included in it). The noise
   is learned from 8, 10, 12 (``MIN_POINTS``), 15 or 20 earlier runs, each row as if ``MIN_POINTS``
   were that count (the shipped value's reason); then one A and one B run are decided, A/A and with B
   10 % slower. ``--trials`` simulated hosts each.
3. **Change points, false ones** per 100 points: on every series of the history (its valid points,
   or all with ``--include-invalid``), and on simulated steady series (2 %, 100 points each).
4. **Change points, found**: a 10 % step on the simulated steady host, 30 points before it and 5
   after, found within 5 points of it; and on this machine's own series, the smallest step that is
   found within 5 points in 90 % of windows (each window: up to 20 real points, the last 5 of them
   made worse by the step).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "inference"))
sys.path.insert(0, str(REPO))

from bench.rates import poisson_per, rate  # noqa: E402
from utils.history.changes import changes  # noqa: E402
from utils.history.noise import MIN_POINTS, NoiseModel, kind_of  # noqa: E402
from utils.history.store import Point, Series, SeriesKey, Store  # noqa: E402
from utils.results.decide import WORSE, Sample, decide_between  # noqa: E402

THRESHOLD = 0.05
STEP = 0.10
SIM_CV = 0.02


def load(url: str, include_invalid: bool) -> dict[Series, list[Point]]:
    store = Store.open(url, create=False)
    try:
        every = store.all_series()
        points = store.points(every)
    finally:
        store.close()
    out = {}
    for s in every:
        pts = points[s.id]
        if include_invalid:
            pts = [replace(p, valid=True) for p in pts]
        out[s] = [p for p in pts if p.valid and p.value > 0]
    return out


def worse_by(value: float, higher_is_better: bool, step: float) -> float:
    return value * (1 - step) if higher_is_better else value / (1 - step)


def decided_worse(a: float, b: float, higher_is_better: bool, noise) -> bool:
    d = decide_between([Sample(a)], [Sample(b)], higher_is_better, THRESHOLD, (noise.cv, noise.df),
                       (noise.cv, noise.df), shared=True)  # fmt: skip
    return d.verdict == WORSE


def real_compare(history: dict[Series, list[Point]], learn: float, split_at: str | None = None) -> dict:
    """Table 1 (module docstring); ``split_at`` (ISO time): the runs before it are the learning sitting."""
    if split_at is not None:
        learned = {s: [p for p in pts if p.at < split_at] for s, pts in history.items()}
    else:
        learned = {s: pts[: max(2, int(len(pts) * learn))] for s, pts in history.items()}
    model = NoiseModel(learned)
    per_kind: dict[str, dict[str, int]] = {}
    by_pair: dict[tuple[str, str], dict[str, bool]] = {}
    noise_of = {}
    for s, pts in history.items():
        noise = model.of(s)
        if noise is None:
            continue
        noise_of[s.key.label] = (noise.cv, noise.df, noise.source)
        later = pts[len(learned[s]) :]
        kind = per_kind.setdefault(kind_of(s.key.figure), {"aa": 0, "ab": 0, "n": 0})
        for a, b in zip(later[0::2], later[1::2]):
            aa = decided_worse(a.value, b.value, s.higher_is_better, noise)
            ab = decided_worse(a.value, worse_by(b.value, s.higher_is_better, STEP), s.higher_is_better, noise)
            kind["aa"] += aa
            kind["ab"] += ab
            kind["n"] += 1
            pair = by_pair.setdefault((a.run_key, b.run_key), {"aa": False, "ab": False})
            pair["aa"] |= aa
            pair["ab"] |= ab
    runs = len(by_pair)
    per_kind["every figure"] = {key: sum(v[key] for v in per_kind.values()) for key in ("aa", "ab", "n")}
    return {
        "per_kind": {
            k: {"false alarms": rate(v["aa"], v["n"]), "power at -10 %": rate(v["ab"], v["n"])}
            for k, v in per_kind.items()
        },
        "any figure, per pair of runs": {
            "false alarms": rate(sum(p["aa"] for p in by_pair.values()), runs),
            "power at -10 %": rate(sum(p["ab"] for p in by_pair.values()), runs),
        },
        "noise learned": {label: f"{cv:.1%} ({df} df, {source})" for label, (cv, df, source) in noise_of.items()},
        "points": {s.key.label: len(p) for s, p in history.items()},
    }


def _series(figure: str = "core qps") -> Series:
    return Series(SeriesKey("sim", "sim", "inference", figure, "c", "cpu", "sim"), "sim", "samples/s", True)


def _points(values, s: Series) -> list[Point]:
    return [Point(s, f"{k:06d}", float(v), run_key=f"r{k}") for k, v in enumerate(values)]


def simulated_compare(trials: int, learn_points: int, rng: np.random.Generator) -> dict:
    """Table 2 (module docstring)."""
    from utils.history import noise as noise_module

    s = _series()
    aa = ab = undecided = 0
    shipped = noise_module.MIN_POINTS
    noise_module.MIN_POINTS = learn_points  # what MIN_POINTS = learn_points would give (the shipped value's why)
    try:
        decided = [_simulated_pair(s, learn_points, rng) for _ in range(trials)]
    finally:
        noise_module.MIN_POINTS = shipped
    for pair in decided:
        if pair is None:  # a change point cut the learned runs below MIN_POINTS - 1 degrees of freedom
            undecided += 1
        else:
            aa += pair[0]
            ab += pair[1]
    return {
        "learned from": learn_points,
        "false alarms": rate(aa, trials),
        "power at -10 %": rate(ab, trials),
        "not decided (a false change point in the learned runs)": rate(undecided, trials),
    }


def _simulated_pair(s: Series, learn_points: int, rng: np.random.Generator) -> tuple[bool, bool] | None:
    """One simulated host: its noise learned from ``learn_points`` runs, then an A/A and an A/B pair."""
    history = 100 * np.exp(rng.normal(0, SIM_CV, learn_points))
    noise = NoiseModel({s: _points(history, s)}).of(s)
    a, b = 100 * np.exp(rng.normal(0, SIM_CV, 2))
    if noise is None:
        return None
    return decided_worse(a, b, True, noise), decided_worse(a, b * (1 - STEP), True, noise)


def real_false_changes(history: dict[Series, list[Point]]) -> str:
    count = points = 0
    for s, pts in history.items():
        count += len(changes(pts, s.higher_is_better))
        points += len(pts)
    return poisson_per(count, points)


def simulated_false_changes(series: int, length: int, rng: np.random.Generator) -> str:
    s = _series()
    count = sum(len(changes(_points(100 * np.exp(rng.normal(0, SIM_CV, length)), s), True)) for _ in range(series))
    return poisson_per(count, series * length)


def found_within(values: list[float], step_at: int, higher_is_better: bool, s: Series) -> bool:
    return any(abs(c.index - step_at) <= 5 for c in changes(_points(values, s), higher_is_better))


def simulated_step(trials: int, rng: np.random.Generator) -> str:
    s = _series()
    hits = 0
    for _ in range(trials):
        values = list(100 * np.exp(rng.normal(0, SIM_CV, 35)))
        values[30:] = [v * (1 - STEP) for v in values[30:]]
        hits += found_within(values, 30, True, s)
    return rate(hits, trials)


def real_smallest_step(history: dict[Series, list[Point]]) -> dict:
    """Table 4's second half: windows of up to 20 real points, the last 5 made worse by the step."""
    windows = []
    for s, pts in history.items():
        values = [p.value for p in pts]
        for end in range(15, len(values) + 1, 5):  # disjoint tails of 5, at least 10 points before
            windows.append((s, values[max(0, end - 20) : end]))
    out = {}
    smallest = None
    for step in (0.05, 0.10, 0.15, 0.20, 0.25, 0.30, 0.40, 0.50, 0.60):
        hits = 0
        for s, window in windows:
            changed = window[:-5] + [worse_by(v, s.higher_is_better, step) for v in window[-5:]]
            hits += found_within(changed, len(window) - 5, s.higher_is_better, s)
        out[f"{step:.0%}"] = rate(hits, len(windows))
        if smallest is None and windows and hits / len(windows) >= 0.9:
            smallest = f"{step:.0%}"
    return {"found within 5 points": out, "smallest step found in >= 90 % of windows": smallest,
            "windows": len(windows)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--history", help="a history of real runs of one unchanged config (a URL or SQLite file)")
    parser.add_argument("--learn", type=float, default=0.5, help="the share of each series the noise is learned from")
    parser.add_argument("--include-invalid", action="store_true", help="count INVALID runs' figures too")
    parser.add_argument("--split-at", help="ISO time: the runs before it are the sitting the noise is learned from")
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    out: dict = {}
    if args.history:
        from utils.history.store import resolve_url

        url = resolve_url(args.history, Path.cwd())
        assert url is not None
        history = load(url, args.include_invalid)
        out["this machine: compare at different times"] = real_compare(history, args.learn, args.split_at)
        out["this machine: false change points"] = real_false_changes(history)
        out["this machine: steps found"] = real_smallest_step(history)
    out["steady host (2 %): compare at different times"] = [
        simulated_compare(args.trials, n, rng) for n in (8, 10, MIN_POINTS, 15, 20)
    ]
    out["steady host (2 %): false change points"] = simulated_false_changes(200, 100, rng)
    out["steady host (2 %): a 10 % step found within 5 points (5 points after it)"] = simulated_step(args.trials, rng)
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
