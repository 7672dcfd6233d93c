"""common.stats' interval edges, pinned value by value (mutation testing, docs/testing.md).

Every expected value here is worked out by hand from the binomial probabilities
(fractions of 2**n) and the definitions in the docstrings, not read back from the
code: the tails' equality case, a confidence other than 95 %, the lag-1 of two
values, the effective size at and beyond r = 1, and the ranks carried from the
effective sample back to all the queries.
"""

from __future__ import annotations

from common.stats import (
    CORRELATED_BELOW,
    correlated_ranks,
    effective_size,
    honest_lag1,
    lag1,
    percentile_ci,
    percentile_interval,
    percentile_ranks,
)

# 16 latencies alternating low and high: their ranks' lag-1 is strongly negative, so
# honest_lag1's bias-corrected value is clipped to 0 and only one standard error
# remains, sqrt(1 / 16) = 0.25; the effective size is 16 * 0.75 / 1.25 = 9.6, so 9.
ALTERNATING = [0.0, 15.0, 1.0, 14.0, 2.0, 13.0, 3.0, 12.0, 4.0, 11.0, 5.0, 10.0, 6.0, 9.0, 7.0, 8.0]


def test_a_tail_exactly_at_its_share_is_kept():
    # Binomial(2, 1/2): P(B <= 0) = P(B >= 2) = 1/4, exactly (1 - 0.5) / 2, so at 50 %
    # confidence both ends are bounds ("probability >= confidence"): ranks 0 and 1.
    assert percentile_ranks(2, 50, confidence=0.5) == (0, 1)
    # One more quarter on either side would exceed the share: at 60 % there is none.
    assert percentile_ranks(2, 50, confidence=0.6) is None


def test_at_confidence_zero_one_sample_is_its_own_interval():
    # Each tail may hold 1/2: P(B <= 0) = 1/2 and P(B >= 1) = 1/2 for Binomial(1, 1/2), so
    # the lower search reaches the last term and the upper one the first, and lo == hi == 0.
    assert percentile_ranks(1, 50, confidence=0.0) == (0, 0)


def test_ranks_at_a_confidence_other_than_95_percent():
    # Binomial(9, 1/2), cumulative counts of 512: 1, 10, 46, 130. At 95 % (tail 12.8 of 512)
    # lo = 1 (10 <= 12.8 < 46); at 50 % (tail 128) lo = 2 (46 <= 128 < 130); hi by symmetry.
    assert percentile_ranks(9, 50) == (1, 7)
    assert percentile_ranks(9, 50, confidence=0.5) == (2, 6)
    values = [float(v) for v in range(10, 19)]
    assert percentile_interval(values, 50) == [11.0, 17.0]
    assert percentile_interval(values, 50, confidence=0.5) == [12.0, 16.0]


def test_lag1_of_two_values_and_of_fewer():
    # Two values centre to -d and d: the lag-1 sum is -d^2 over 2 d^2.
    assert lag1([1.0, 2.0]) == -0.5
    assert lag1([7.0, 3.0]) == -0.5
    assert lag1([5.0]) == 0.0
    assert lag1([]) == 0.0


def test_effective_size_at_and_beyond_perfect_correlation():
    assert effective_size(10, 0.0) == 10.0
    assert effective_size(10, 0.5) == 10 * 0.5 / 1.5
    assert effective_size(10, 1.0) == 0.0
    # honest_lag1 can exceed 1 (a bias correction on a strong r): still no independent value.
    assert honest_lag1(0.9, 10) > 1.0
    assert effective_size(10, 1.5) == 0.0
    assert effective_size(10, honest_lag1(0.9, 10)) == 0.0


def test_correlated_ranks_are_carried_to_all_the_queries():
    # The values are their own ranks (a permutation of 0..15): the derivation above.
    assert lag1(ALTERNATING) < -1 / (16 + 3)  # r + (1 + 3r) / 16 <= 0: clipped
    assert honest_lag1(lag1(ALTERNATING), 16) == 0.25
    assert effective_size(16, 0.25) == 9.6
    # m = 9 effective samples; their 95 % ranks (1, 7) carried to the 16 queries:
    # lo = floor(1 * 16 / 9) = 1, hi = ceil((7 + 1) * 16 / 9) - 1 = ceil(14.2) - 1 = 14.
    assert correlated_ranks(ALTERNATING, 50) == (1, 14)
    # At 50 % the ranks of 9 are (2, 6): lo = floor(2 * 16 / 9) = 3, hi = ceil(7 * 16 / 9) - 1 = 12.
    assert correlated_ranks(ALTERNATING, 50, confidence=0.5) == (3, 12)


def test_correlated_ranks_of_one_and_two_queries_at_confidence_zero():
    # One query: the binomial ranks of one sample, (0, 0) at confidence 0 (above).
    assert correlated_ranks([5.0], 50, confidence=0.0) == (0, 0)
    assert correlated_ranks([], 50, confidence=0.0) is None
    # Two queries go through the effective size: lag-1 -1/2, clipped to 0, plus sqrt(1/2),
    # so 2 (1 - 0.707) / 1.707 = 0.34 effective samples, none; the plain binomial ranks of
    # two (P(B = 0) = P(B = 2) = 1/4, within a tail of 1/2) would have been (0, 1).
    assert percentile_ranks(2, 50, confidence=0.0) == (0, 1)
    assert correlated_ranks([1.0, 2.0], 50, confidence=0.0) is None


def test_a_low_percentile_of_too_few_samples_has_no_lower_bound():
    # Binomial(100, 1/100): P(B <= 0) = 0.99**100 = 0.366, over the 2.5 % tail already, so no
    # order statistic is a lower bound of the 1st percentile (the lower search sets nothing);
    # the upper one is found. Mirrored, the 99th percentile has no upper bound.
    assert percentile_ranks(100, 1) is None
    assert percentile_ranks(100, 99) is None


def test_the_correlated_ranks_serve_below_512_queries_and_not_at_512():
    # Latencies that only rise: their ranks' lag-1 is about 1, the effective sample about none,
    # so below CORRELATED_BELOW the p50 has no interval. From 512 queries on, the independent
    # ranks serve. need=100 leaves 5 blocks of 100, fewer than 8: no batched widening.
    assert CORRELATED_BELOW == 512
    for n, expected in ((511, None), (512, percentile_interval([float(v) for v in range(512)], 50))):
        rising = [float(v) for v in range(n)]
        assert percentile_ci(rising, rising, 50, need=100) == expected
    assert percentile_interval([float(v) for v in range(512)], 50) is not None
