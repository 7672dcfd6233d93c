"""How often InferPerf's nominal 95 % intervals cover the true value, in the shipped regime.

    .venv/bin/python -m bench.interval_coverage [--windows 400] [--seed 31]

Simulated windows of AR(1) latencies (lag-1 ``phi`` 0.7, 0.8, 0.9: what docs/measurement.md
measured for consecutive queries on the 2-core machine), with lognormal or gamma marginals
(coefficient of variation 15 %), are fed to the project's own functions, so the figures are
those of the code as it stands:

  throughput   ``tools.measure.precision.throughput_interval`` on windows of 24, 48 and 88
               queries (the quick start's windows: resnet50, bert and vit run 24 to 88), against
               the generating process's long-run rate (batch / E[latency]);
  stopped      the stop rule (``StopRule`` over ``measure_figures``, looking every 0.5 s of the
               window's time as shipped (every second query of 0.25 s) from 24 queries on, ±10 %
               as the shipped cases ask, capped at 2000 queries): the
               interval of the window where it first stopped, and how many queries that took;
  percentile   ``common.stats.percentile_ci`` (the interval every reported percentile gets) for
               p50 and p90 on windows of 64 to 511 queries (below 512, where p90's block
               widening never applied), against the marginal's true quantile.

A window without an interval (None: "± n/a") is counted apart and left out of the coverage:
coverage is of the intervals that were shown. Everything is seeded; a run takes about a minute.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inference"))

from common.stats import MIN_SAMPLES_FOR_PERCENTILE, percentile, percentile_ci  # noqa: E402
from contract.settings import PRECISION_REACHED  # noqa: E402
from tools.measure.precision import CHECK_EVERY_S, StopRule, Target, Timeline, measure_figures, throughput_interval  # noqa: E402

PHIS = (0.7, 0.8, 0.9)
MARGINALS = ("lognormal", "gamma")
CV = 0.15  # per-query coefficient of variation
MEAN_NS = 250e6  # a 0.25-s query (resnet50 at batch 8 on the 2-core machine)
BATCH = 8
THROUGHPUT_QUERIES = (24, 48, 88)
PERCENTILE_QUERIES = (64, 128, 256, 511)
STOP_PRECISION = 0.10
STOP_MIN_QUERIES = 24
STOP_MAX_QUERIES = 2000


def ar1(rng: np.random.Generator, n: int, phi: float) -> np.ndarray:
    """A stationary AR(1) series with unit marginal variance."""
    noise = rng.standard_normal(n) * math.sqrt(1 - phi**2)
    out = np.empty(n)
    out[0] = rng.standard_normal()
    for i in range(1, n):
        out[i] = phi * out[i - 1] + noise[i]
    return out


class Process:
    """Latencies (ns) with a known mean and known quantiles: AR(1) in a Gaussian copula."""

    def __init__(self, marginal: str, phi: float) -> None:
        from scipy import stats  # a dependency of the project (scikit-learn's)

        self.phi = phi
        if marginal == "lognormal":
            sigma = math.sqrt(math.log1p(CV**2))
            self.dist = stats.lognorm(s=sigma, scale=MEAN_NS * math.exp(-(sigma**2) / 2))
        elif marginal == "gamma":
            shape = 1 / CV**2
            self.dist = stats.gamma(a=shape, scale=MEAN_NS / shape)
        else:
            raise ValueError(marginal)
        self._norm = stats.norm
        self.mean_ns = float(self.dist.mean())
        self.rate = BATCH * 1e9 / self.mean_ns

    def latencies(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.dist.ppf(self._norm.cdf(ar1(rng, n, self.phi)))

    def quantile(self, q: float) -> float:
        return float(self.dist.ppf(q / 100))


def throughput_cell(process: Process, rng: np.random.Generator, n: int, windows: int) -> tuple[int, int]:
    """(intervals given, intervals covering the true rate) over ``windows`` windows of ``n`` queries."""
    shown = covered = 0
    for _ in range(windows):
        interval = throughput_interval(Timeline.tiled(np.cumsum(process.latencies(rng, n)), BATCH))
        if interval is not None:
            shown += 1
            covered += interval.lo <= process.rate <= interval.hi
    return shown, covered


def stopped_window(process: Process, rng: np.random.Generator) -> tuple[int | None, bool]:
    """Queries at the stop rule's first look under ±10 % (None: not reached by the cap), and whether that
    window's interval covers the true rate."""
    ends = np.cumsum(process.latencies(rng, STOP_MAX_QUERIES))
    target = Target(throughput=("qps",), precision=STOP_PRECISION, check_every_s=CHECK_EVERY_S)
    rule = StopRule(target, clock=lambda: 0, max_s=math.inf)
    for n in range(STOP_MIN_QUERIES, STOP_MAX_QUERIES + 1):
        figures: dict = {}

        def measure(n: int = n):
            figures["f"] = measure_figures(target, {"qps": Timeline.tiled(ends[:n], BATCH)})
            return figures["f"]

        if rule.decide(int(ends[n - 1]), int(ends[n - 1]), measure) == PRECISION_REACHED:
            interval = figures["f"].throughput["qps"]
            return n, interval.lo <= process.rate <= interval.hi
    return None, False


def percentile_cell(process: Process, rng: np.random.Generator, n: int, name: str, windows: int) -> tuple[int, int]:
    q, need = MIN_SAMPLES_FOR_PERCENTILE[name]
    truth = process.quantile(q)
    shown = covered = 0
    for _ in range(windows):
        ordered = process.latencies(rng, n).tolist()
        values = sorted(ordered)
        percentile(values, q)
        interval = percentile_ci(ordered, values, q, need)
        if interval is not None:
            shown += 1
            covered += interval[0] <= truth <= interval[1]
    return shown, covered


def _cell(shown: int, covered: int, windows: int) -> str:
    if not shown:
        return f"n/a ({windows} of {windows} n/a)"
    refused = f", {windows - shown} n/a" if shown < windows else ""
    return f"{covered / shown:.1%}{refused}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=400, help="simulated windows per cell")
    parser.add_argument("--seed", type=int, default=31)
    parser.add_argument(
        "--stop-windows", type=int, default=200, help="windows per stop-rule cell (each runs the rule query by query)"
    )
    args = parser.parse_args(argv)
    print(
        f"Coverage of the nominal 95 % intervals ({args.windows} windows a cell; AR(1) latencies, CV {CV:.0%}; "
        f"seed {args.seed})\n"
    )
    print(
        "| marginal | lag-1 | "
        + " | ".join(f"throughput, {n} q" for n in THROUGHPUT_QUERIES)
        + " | stopped at ±10 % | queries at stop (median, p90) |"
    )
    print("|---|---|" + "---|" * (len(THROUGHPUT_QUERIES) + 2))
    for marginal in MARGINALS:
        for phi in PHIS:
            process = Process(marginal, phi)
            rng = np.random.default_rng([args.seed, MARGINALS.index(marginal), int(phi * 10)])
            cells = [_cell(*throughput_cell(process, rng, n, args.windows), args.windows) for n in THROUGHPUT_QUERIES]
            stops = [stopped_window(process, rng) for _ in range(args.stop_windows)]
            reached = [(n, hit) for n, hit in stops if n is not None]
            stop_cell = _cell(len(reached), sum(hit for _, hit in reached), args.stop_windows)
            counts = sorted(n for n, _ in reached)
            queries = f"{counts[len(counts) // 2]}, {counts[int(len(counts) * 0.9)]}" if counts else "-"
            print(f"| {marginal} | {phi} | " + " | ".join(cells) + f" | {stop_cell} | {queries} |")
    print("\n| marginal | lag-1 | percentile | " + " | ".join(f"{n} q" for n in PERCENTILE_QUERIES) + " |")
    print("|---|---|---|" + "---|" * len(PERCENTILE_QUERIES))
    for marginal in MARGINALS:
        for phi in PHIS:
            process = Process(marginal, phi)
            rng = np.random.default_rng([args.seed, MARGINALS.index(marginal), int(phi * 10), 1])
            for name in ("p50", "p90"):
                cells = [
                    _cell(*percentile_cell(process, rng, n, name, args.windows), args.windows)
                    for n in PERCENTILE_QUERIES
                ]
                print(f"| {marginal} | {phi} | {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
