"""Confidence intervals and significance against scipy's own values."""

import math

import pytest
from scipy import stats

from lab.analysis.statistics import finite_numbers, mean_interval, welch_test


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
