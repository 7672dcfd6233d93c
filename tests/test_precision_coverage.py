"""The nominal 95 % intervals cover at least 90 % in the shipped regime (issue 31, item 5).

Seeded simulations through the project's own functions (bench/interval_coverage.py prints the
full table): AR(1) latencies with lag-1 0.7, 0.8 and 0.9 (what docs/measurement.md measured for
consecutive queries on the 2-core machine), lognormal and gamma marginals with a 15 % coefficient
of variation, so the true rate and quantiles are known. Each window is judged where the stop rule
first looks and finds it within ±10 % (the shipped cases' precision), from 24 queries on (their
``min_query_count``); a window that reached no interval is "± n/a", which is honest, and is
counted apart. No clock is involved: a query's time is its simulated latency.
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.interval_coverage import Process, percentile_cell, stopped_window
from common.stats import correlated_ranks, percentile_interval

pytest.importorskip("scipy.stats")  # the marginals' quantiles; scikit-learn's dependency, always installed
WINDOWS = 432  # 72 per (marginal, lag-1) cell


@pytest.fixture(scope="module")
def stopped():
    results = []
    for marginal in ("lognormal", "gamma"):
        for phi in (0.7, 0.8, 0.9):
            process = Process(marginal, phi)
            rng = np.random.default_rng([31, len(marginal), int(phi * 10)])
            results += [(phi, *stopped_window(process, rng)) for _ in range(WINDOWS // 6)]
    return results


def test_the_throughput_interval_where_the_stop_rule_stops_covers_at_least_90_percent(stopped):
    reached = [(phi, n, hit) for phi, n, hit in stopped if n is not None]
    assert len(reached) == WINDOWS  # every window reached ±10 % within 2000 queries
    coverage = sum(hit for _, _, hit in reached) / len(reached)
    assert coverage >= 0.90, coverage
    for phi in (0.7, 0.8, 0.9):  # no regime hides behind the others
        cell = [hit for p, _, hit in reached if p == phi]
        assert sum(cell) / len(cell) >= 0.85, (phi, sum(cell) / len(cell))


def test_a_window_needs_more_queries_the_more_its_queries_are_correlated(stopped):
    median = {phi: float(np.median([n for p, n, _ in stopped if p == phi])) for phi in (0.7, 0.8, 0.9)}
    assert 24 < median[0.7] < median[0.8] < median[0.9] <= 2000, median


def test_percentile_intervals_below_512_queries_cover_at_least_90_percent_or_say_n_a():
    shown = covered = 0
    for marginal in ("lognormal", "gamma"):
        for phi in (0.7, 0.8, 0.9):
            process = Process(marginal, phi)
            rng = np.random.default_rng([31, len(marginal), int(phi * 10), 1])
            for name, n in (("p50", 64), ("p50", 200), ("p90", 200), ("p90", 400)):
                cell_shown, cell_covered = percentile_cell(process, rng, n, name, 12)
                shown, covered = shown + cell_shown, covered + cell_covered
    assert shown >= 100 and covered / shown >= 0.90, (shown, covered)


def test_independent_latencies_keep_nearly_the_order_statistic_interval():
    rng = np.random.default_rng(5)
    ordered = rng.lognormal(size=400).tolist()
    lo, hi = correlated_ranks(ordered, 90)
    plain = percentile_interval(sorted(ordered), 90)
    values = sorted(ordered)
    assert values[lo] <= plain[0] and values[hi] >= plain[1] and (values[hi] - values[lo]) < 1.8 * (plain[1] - plain[0])


def test_a_percentile_without_an_honest_interval_renders_plus_minus_n_a():
    from utils.results.summary import percentile_cell as cell

    assert cell({"p90": 12.3}, "p90", 100, {"p90": None}) == "12.30 ± n/a"  # measured; its interval refused
    assert cell({"p90": 12.3}, "p90", 100, {"p90": [12.0, 12.6]}) == "12.30 ±2.4%"
    assert cell({"p90": 12.3}, "p90", 100, {}) == "12.30"  # a result written before intervals existed
    assert cell({"p90": None}, "p90", 10, {"p90": None}) == "n/a (<64 queries)"
