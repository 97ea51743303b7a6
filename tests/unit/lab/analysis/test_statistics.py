"""Confidence intervals and significance against scipy's own values."""

import math

import pytest
from scipy import stats

from lab.analysis.statistics import finite_numbers, mean_interval, mean_of_known, welch_test


def test_interval_matches_scipy_t_interval():
    values = [21.9, 22.4, 22.1, 23.0]
    interval = mean_interval(values)
    low, high = stats.t.interval(0.95, df=3, loc=stats.tmean(values), scale=stats.sem(values))
    assert interval.n == 4
    assert interval.mean == pytest.approx(sum(values) / 4)
    assert interval.ci95_low == pytest.approx(low)
    assert interval.ci95_high == pytest.approx(high)
    assert interval.relative_half_width == pytest.approx((high - low) / 2 / interval.mean)


def test_interval_of_one_or_no_value_has_no_bounds():
    assert mean_interval([5.0]) == mean_interval([5.0, None, float("nan"), "x"])
    one = mean_interval([5.0])
    assert (one.mean, one.ci95_low, one.ci95_high, one.n) == (5.0, None, None, 1)
    empty = mean_interval([])
    assert empty.mean is None and empty.n == 0 and empty.half_width is None


def test_finite_numbers_drops_booleans_and_infinities():
    assert finite_numbers([1, True, math.inf, -2.5, None]) == [1.0, -2.5]


def test_welch_matches_scipy():
    a, b = [10.1, 10.4, 9.9, 10.2], [11.0, 11.3, 10.8]
    result = welch_test(a, b)
    expected = stats.ttest_ind(a, b, equal_var=False).pvalue
    assert result.p_value == pytest.approx(expected)
    assert result.significant is bool(expected < 0.05)
    assert "significant" in result.verdict


def test_welch_not_significant_for_overlapping_samples():
    result = welch_test([10, 12, 11, 9], [10.5, 11.5, 9.5, 10.8])
    assert result.significant is False
    assert result.verdict.startswith("not significant")


def test_welch_says_n_too_small_under_three_repeats():
    result = welch_test([1.0, 2.0], [3.0, 4.0, 5.0])
    assert result.p_value is None and result.significant is None
    assert result.verdict.startswith("n too small")


def test_welch_constant_samples():
    assert welch_test([2, 2, 2], [2, 2, 2]).significant is False
    assert welch_test([2, 2, 2], [3, 3, 3]).significant is True


def _coverage(draw, true_ratio: float, *, paired: bool, trials: int = 2000) -> float:
    from lab.analysis.statistics import ratio_interval

    inside = 0
    for _ in range(trials):
        a, b = draw()
        interval = ratio_interval(a, b, paired=paired)
        assert interval.ci95_low is not None and interval.ci95_high is not None
        inside += interval.ci95_low <= true_ratio <= interval.ci95_high
    return inside / trials


def test_unpaired_ratio_interval_covers_the_true_ratio_about_95_percent():
    import random

    rng = random.Random(7)
    # Repeats with a 10% coefficient of variation, three and five a side, true ratio 2.5.
    for n in (3, 5):
        coverage = _coverage(
            lambda n=n: ([rng.gauss(25, 2.5) for _ in range(n)], [rng.gauss(10, 1.0) for _ in range(n)]),
            2.5,
            paired=False,
        )
        assert 0.92 <= coverage <= 0.98, (n, coverage)


def test_paired_ratio_interval_covers_the_true_ratio_despite_drift_between_rounds():
    import random

    rng = random.Random(11)

    def draw():
        # Each round the machine runs at a different speed (up to 2x) that hits both cells alike.
        speeds = [rng.uniform(0.5, 1.0) for _ in range(3)]
        a = [speed * 30 * math.exp(rng.gauss(0, 0.05)) for speed in speeds]
        b = [speed * 10 * math.exp(rng.gauss(0, 0.05)) for speed in speeds]
        return a, b

    assert 0.93 <= _coverage(draw, 3.0, paired=True) <= 0.97


def test_ratio_intervals_are_positive_and_say_their_method():
    from lab.analysis.statistics import PAIRED_LOG, UNPAIRED_LOG, ratio_interval

    wide = ratio_interval([1.0, 40.0, 3.0], [2.0, 2.1, 1.9])
    assert wide.ci95_low > 0 and wide.ci95_high > wide.ratio > wide.ci95_low
    assert wide.method == UNPAIRED_LOG
    paired = ratio_interval([2.0, 4.0, 3.0], [1.0, 2.0, 1.5], paired=True)
    assert paired.ratio == pytest.approx(2.0) and paired.ci95_low == pytest.approx(2.0)
    assert paired.method == PAIRED_LOG
    assert ratio_interval([1.0], [2.0]).ci95_low is None
    assert ratio_interval([1.0, 2.0], [0.0, 0.0]).ratio is None
    assert wide.excludes(0.01) and not wide.excludes(wide.ratio)
    widened = paired.widened(1.2)
    assert widened.ci95_low == pytest.approx(2.0 / 1.2) and widened.ci95_high == pytest.approx(2.4)


def test_positive_mean_interval_never_goes_below_zero():
    from lab.analysis.statistics import positive_mean_interval

    skewed = [0.5, 0.6, 35.0]  # a linear t interval would reach far below zero
    assert mean_interval(skewed).ci95_low < 0
    interval = positive_mean_interval(skewed)
    assert interval.mean == pytest.approx(mean_interval(skewed).mean)
    assert 0 < interval.ci95_low < interval.mean < interval.ci95_high
    # A small spread gives nearly the Student-t interval.
    tight = [21.9, 22.4, 22.1, 23.0]
    assert positive_mean_interval(tight).ci95_low == pytest.approx(mean_interval(tight).ci95_low, rel=0.01)


def test_a_plain_mean_leaves_missing_values_out_never_as_zero() -> None:
    # One rule for every plain mean of repeats (a capacity probe's goodput, a regression gate's means).
    assert mean_of_known([2.0, None, 4.0, math.nan, math.inf, True, "x"]) == 3.0
    assert mean_of_known([None, math.nan]) is None
    assert mean_of_known([]) is None
