"""common.stats and tools.measure.verdict, pinned value by value (mutation testing, docs/testing.md).

Percentiles are checked against numpy's linear method (an independent
implementation), their intervals and the t quantiles against scipy's binomial
and Student t; windows against a hand-made tiling; every reason sentence in
full, and every boundary from both sides.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.stats import (
    MIN_SAMPLES_FOR_PERCENTILE,
    LatencyStats,
    enough_for,
    percentile,
    too_few_note,
)
from contract.phase import Verdict
from tools.measure.verdict import (
    MAX_WINDOWS,
    MIN_QUERIES_PER_WINDOW,
    MIN_WINDOWS,
    contention_reason,
    minimum_reasons,
    minimums_met,
    window_throughputs,
)

PROPERTY = settings(max_examples=150, deadline=None, derandomize=True)


# ---- common.stats -------------------------------------------------------------------
def test_constants_are_loadgens_floors():
    assert MIN_SAMPLES_FOR_PERCENTILE == {
        "p50": (50.0, 2),
        "p90": (90.0, 64),
        "p99": (99.0, 662),
        "p99_9": (99.9, 6620),
    }
    assert (MIN_WINDOWS, MAX_WINDOWS, MIN_QUERIES_PER_WINDOW) == (3, 10, 8)


@PROPERTY
@given(
    values=st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=60),
    q=st.floats(0.0, 100.0),
    q2=st.floats(0.0, 100.0),
)
def test_percentile_is_numpys_linear_method_monotone_and_bounded(values, q, q2):
    ordered = sorted(values)
    got = percentile(ordered, q)
    assert got == pytest.approx(float(np.percentile(np.array(ordered), q)), rel=1e-9, abs=1e-6)
    assert ordered[0] <= got <= ordered[-1]
    lo, hi = sorted((q, q2))
    assert percentile(ordered, lo) <= percentile(ordered, hi) + 1e-6


def test_percentile_exact_points_and_empty_message():
    assert percentile([1.0, 2.0, 4.0, 8.0], 50) == 3.0  # rank 1.5
    assert percentile([1.0, 2.0, 4.0, 8.0], 100 / 3) == 2.0  # rank exactly 1: no interpolation
    assert percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError, match=r"^percentile of an empty sample$"):
        percentile([], 50)


def test_enough_for_and_note_at_the_floor():
    for name, (_, need) in MIN_SAMPLES_FOR_PERCENTILE.items():
        assert enough_for(name, need) and not enough_for(name, need - 1)
    assert too_few_note("p99", 12) == "p99 needs at least 662 queries, got 12"


def test_from_ns_every_field_for_a_small_sample():
    stats = LatencyStats.from_ns([4_000_000, 1_000_000, 1_000_000])  # ms: 1, 1, 4
    mean = 2.0
    std = math.sqrt(((1 - 2) ** 2 * 2 + (4 - 2) ** 2) / 3)
    assert stats.to_dict() == {
        "count": 3,
        "mean": mean,
        "min": 1.0,
        "max": 4.0,
        "std": std,
        "cv": std / mean,
        "p50": 1.0,
        "p90": None,
        "p99": None,
        "p99_9": None,
        "notes": [
            "p90 needs at least 64 queries, got 3",
            "p99 needs at least 662 queries, got 3",
            "p99_9 needs at least 6620 queries, got 3",
        ],
    }


def test_cv_of_an_all_zero_sample_is_zero_and_of_a_sub_millisecond_one_is_std_over_mean():
    zero = LatencyStats.from_ns([0, 0, 0])
    assert zero.mean == 0.0 and zero.std == 0.0 and zero.cv == 0.0
    small = LatencyStats.from_ns([100_000, 300_000])  # 0.1 and 0.3 ms: mean 0.2 < 1
    assert small.cv == pytest.approx(0.1 / 0.2)


# ---- windows --------------------------------------------------------------------------
def _cumulative(durations):
    out, total = [], 0
    for d in durations:
        total += d
        out.append(total)
    return out


def test_window_rates_are_exact_in_integer_nanoseconds():
    # 24 queries of 1 sample, each 1 ns: three windows of 8 samples in 8 ns -> 1e9 samples/s, exactly
    assert window_throughputs(list(range(1, 25)), [1] * 24) == [1e9] * 3
    # window 2 ends where window 1 ended: it takes no time and is infinitely fast
    elapsed = list(range(1, 9)) + [8] * 8 + list(range(9, 17))
    assert window_throughputs(elapsed, [1] * 24) == [1e9, math.inf, 1e9]
    # one nanosecond of span: a rate, not infinity
    assert window_throughputs([0] * 7 + [1] + [1] * 8 + [2] * 8, [1] * 24) == [8e9, math.inf, 8e9]


@PROPERTY
@given(durations=st.lists(st.integers(1, 10**7), min_size=0, max_size=200), sizes=st.data())
def test_windows_tile_the_run(durations, sizes):
    """Property: the windows partition the queries into equal-count runs and their spans tile the time."""
    n = len(durations)
    samples = sizes.draw(st.lists(st.integers(1, 64), min_size=n, max_size=n))
    elapsed = _cumulative(durations)
    rates = window_throughputs(elapsed, samples)
    count = min(MAX_WINDOWS, n // MIN_QUERIES_PER_WINDOW)
    if count < MIN_WINDOWS:
        assert rates == []
        return
    assert len(rates) == count
    # independent tiling: window k holds queries [k*n/count, (k+1)*n/count), rounded
    edges = [round(k * n / count) for k in range(count + 1)]
    assert all(edges[k + 1] - edges[k] >= MIN_QUERIES_PER_WINDOW - 1 for k in range(count))
    spans = [sum(durations[a:b]) for a, b in zip(edges, edges[1:])]
    counted = [sum(samples[a:b]) for a, b in zip(edges, edges[1:])]
    assert sum(counted) == sum(samples)  # no query lost or counted twice
    assert sum(spans) == elapsed[-1]  # the windows cover the run exactly
    assert rates == pytest.approx([c * 1e9 / s for c, s in zip(counted, spans)], rel=1e-12)
    assert sum(r * s / 1e9 for r, s in zip(rates, spans)) == pytest.approx(sum(samples), rel=1e-9)


# ---- minimums and contention ------------------------------------------------------------------
def test_minimum_reasons_both_at_once_and_formatting():
    assert minimum_reasons(3, 0.12345, 64, 2.5) == [
        "too few queries: 3 measured, min_query_count is 64",
        "too short: 0.123 s measured, min_duration_s is 2.5",
    ]
    assert minimums_met(64, 2.0, 64, 2.0) and not minimums_met(64, 1.999, 64, 2.0)


def test_contention_reason_limit_is_inclusive_and_sentence():
    assert contention_reason(0.25, 4, 0.25) is None
    assert contention_reason(0.2501, 4, 0.25) == (
        "contention: other processes used 25% of the 4 CPU(s) available to the benchmark during the measured phase "
        "(limit 25%)"
    )


def test_verdict_add_ignores_empty_and_duplicates():
    verdict = Verdict(["x"]).add("").add("x").add("y")
    assert verdict.reasons == ["x", "y"] and not verdict.valid
    copy = verdict.to_dict()
    copy["reasons"].append("z")
    assert verdict.reasons == ["x", "y"]  # to_dict hands out a copy
