"""What does the scenario runner (tools.measure.scenarios) cost per query? A no-op engine
driven by a bare loop and by each scenario, side by side in one run.

    python3 -m bench.scenario_overhead [--queries 200000] [--rated-queries 5000] [--rate 2000] [--rounds 3]

  us/query  window duration / queries with the no-op engine ``lambda inputs:
            (inputs, 0.0)``: the harness's own per-query cost (clock calls,
            bookkeeping) plus the no-op call; "added" subtracts the bare loop.
  server saturated: target_qps so high that every arrival is already due.
  server rated: --rate queries/s (batch --batch, so target_qps = rate x batch
            samples/s), not saturating: the runner sleeps until each arrival.
            issued/target = issued_qps / target_qps (the schedule's realised
            rate; a Poisson count, so +-1/sqrt(queries) is noise, hence a fixed
            seed); actual/target = the rate at which the engine was really
            called (first to last call); cv = coefficient of variation of the
            scheduled inter-arrival gaps (1 for exponential gaps); lateness =
            engine call time - scheduled arrival (sleep wake-up error plus
            harness), which server latencies include.
Each figure is the median over --rounds rounds (the machine is shared and
noisy; the variants alternate within each round). Exit status 1 if offline,
single_stream or saturated server cost more than 20 us/query, or the rated
server's issued or actual rate is off target_qps by more than 2 %.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inference"))

from tools.measure.scenarios import ScenarioSpec, run_scenario  # noqa: E402

BUDGET_US = 20.0
RATE_TOLERANCE = 0.02
POOL = [[object()] for _ in range(16)]


def noop(inputs: list) -> tuple[list, float]:
    return inputs, 0.0


def bare_loop(queries: int) -> float:
    """us/query of a plain loop calling the no-op engine on the pool round robin."""
    pool, n, step, clock = POOL, len(POOL), noop, time.perf_counter_ns
    start = clock()
    for i in range(queries):
        step(pool[i % n])
    return (clock() - start) / queries / 1e3


def scenario_cost(scenario: str, queries: int, batch: int, target_qps: float | None = None) -> float:
    run = run_scenario(
        noop,
        POOL,
        ScenarioSpec(
            scenario=scenario,
            batch_size=batch,
            min_query_count=queries,
            min_duration_s=0.0,
            max_duration_s=600.0,
            target_qps=target_qps,
        ),
    )
    assert run.queries == queries, (scenario, run.queries)
    return run.duration_s / run.queries * 1e6


def rated_server(queries: int, rate: float, batch: int, seed: int) -> dict:
    """A non-saturating server run; the engine records when it is really called."""
    calls: list[int] = []
    starts: list[int] = []
    perf = time.perf_counter_ns

    def clock() -> int:
        t = perf()
        if not starts:
            starts.append(t)  # the runner's first reading is the window start
        return t

    def step(inputs: list) -> tuple[list, float]:
        calls.append(perf())
        return inputs, 0.0

    target = rate * batch
    run = run_scenario(
        step,
        POOL,
        ScenarioSpec(
            scenario="server",
            batch_size=batch,
            target_qps=target,
            seed=seed,
            min_query_count=queries,
            min_duration_s=0.0,
            max_duration_s=600.0,
            clock=clock,
        ),
    )
    arrivals = [c - lat for c, lat in zip(run.completions_ns, run.latencies_ns)]  # scheduled, relative
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    lateness_us = sorted((call - starts[0] - arrival) / 1e3 for call, arrival in zip(calls, arrivals))
    actual = (len(calls) - 1) * batch / ((calls[-1] - calls[0]) / 1e9)
    return {
        "queries": run.queries,
        "issued_ratio": run.issued_qps / target,
        "actual_ratio": actual / target,
        "cv": statistics.pstdev(gaps) / statistics.fmean(gaps),
        "lateness_p50_us": lateness_us[len(lateness_us) // 2],
        "lateness_p99_us": lateness_us[int(len(lateness_us) * 0.99)],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=200_000, help="queries per no-op loop")
    parser.add_argument("--rated-queries", type=int, default=5000, help="queries of the rated server run")
    parser.add_argument("--rate", type=float, default=2000.0, help="rated server arrivals, queries/s")
    parser.add_argument("--batch", type=int, default=4, help="batch size (samples per query)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    names = ["bare loop", "offline c=1", "single_stream", "server saturated"]
    costs: dict[str, list[float]] = {name: [] for name in names}
    rated: list[dict] = []
    for _ in range(args.rounds):
        costs["bare loop"].append(bare_loop(args.queries))
        costs["offline c=1"].append(scenario_cost("offline", args.queries, args.batch))
        costs["single_stream"].append(scenario_cost("single_stream", args.queries, args.batch))
        costs["server saturated"].append(scenario_cost("server", args.queries, args.batch, target_qps=1e12))
        rated.append(rated_server(args.rated_queries, args.rate, args.batch, args.seed))

    bare = statistics.median(costs["bare loop"])
    print(f"no-op engine, batch {args.batch}, {args.queries} queries, median of {args.rounds} rounds")
    print(f"{'variant':<18} {'us/query':>9} {'added':>7}")
    failures = []
    for name in names:
        cost = statistics.median(costs[name])
        print(f"{name:<18} {cost:>9.3f} {cost - bare:>7.3f}")
        if name != "bare loop" and cost > BUDGET_US:
            failures.append(f"{name}: {cost:.2f} us/query > {BUDGET_US} us")

    med = {key: statistics.median(r[key] for r in rated) for key in rated[0]}
    noise = 1 / args.rated_queries**0.5
    print(
        f"\nserver rated: {args.rate:g} queries/s x batch {args.batch} = target_qps {args.rate * args.batch:g} "
        "samples/s, "
        f"{rated[0]['queries']} queries, seed {args.seed} (Poisson noise of the rate ~{noise:.1%})"
    )
    print(f"{'issued/target':>14} {'actual/target':>14} {'gap cv':>7} {'lateness p50 us':>16} {'p99 us':>8}")
    print(
        f"{med['issued_ratio']:>14.4f} {med['actual_ratio']:>14.4f} {med['cv']:>7.3f} "
        f"{med['lateness_p50_us']:>16.1f} {med['lateness_p99_us']:>8.1f}"
    )
    for key in ("issued_ratio", "actual_ratio"):
        if abs(med[key] - 1) > RATE_TOLERANCE:
            failures.append(f"server rated: {key} {med[key]:.4f} off by more than {RATE_TOLERANCE:.0%}")
    for failure in failures:
        print(f"FAIL {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
