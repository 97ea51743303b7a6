"""Confidence intervals and significance for repeated measurements.

Repeats of one cell give a mean with a 95% confidence interval (Student's t with n-1
degrees of freedom); two cells compare with Welch's t-test (unequal variances). The t
distribution comes from scipy, never a hand-written table.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from scipy import stats as scipy_stats

CONFIDENCE_LEVEL = 0.95
SIGNIFICANCE_LEVEL = 0.05
# Below this many repeats per side, a significance verdict is not given.
MIN_REPEATS_FOR_SIGNIFICANCE = 3


def finite_numbers(values: Iterable[object]) -> list[float]:
    """The finite int/float values of ``values`` (None, NaN, text and booleans left out)."""
    numbers = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if math.isfinite(value):
            numbers.append(float(value))
    return numbers


@dataclass(frozen=True)
class MeanInterval:
    """A mean with its 95% confidence interval; low/high are None under two values."""

    mean: float | None
    ci95_low: float | None
    ci95_high: float | None
    n: int

    @property
    def half_width(self) -> float | None:
        if self.ci95_low is None or self.ci95_high is None:
            return None
        return (self.ci95_high - self.ci95_low) / 2

    @property
    def relative_half_width(self) -> float | None:
        """Half the interval as a share of the mean (0.1 = ±10%)."""
        if self.half_width is None or not self.mean:
            return None
        return abs(self.half_width / self.mean)


def mean_interval(values: Iterable[object], *, confidence: float = CONFIDENCE_LEVEL) -> MeanInterval:
    """Mean and Student-t confidence interval of the finite numbers in ``values``."""
    numbers = finite_numbers(values)
    n = len(numbers)
    if n == 0:
        return MeanInterval(None, None, None, 0)
    mean = statistics.fmean(numbers)
    if n < 2:
        return MeanInterval(mean, None, None, n)
    standard_error = statistics.stdev(numbers) / math.sqrt(n)
    t_critical = float(scipy_stats.t.ppf((1 + confidence) / 2, df=n - 1))
    return MeanInterval(mean, mean - t_critical * standard_error, mean + t_critical * standard_error, n)


@dataclass(frozen=True)
class Significance:
    """Welch's t-test between two samples: ``verdict`` is what a reader is shown."""

    p_value: float | None
    significant: bool | None
    verdict: str


def welch_test(first: Iterable[object], second: Iterable[object], *, alpha: float = SIGNIFICANCE_LEVEL) -> Significance:
    """Whether two samples' means differ (two-sided Welch's t-test at ``alpha``).

    Under :data:`MIN_REPEATS_FOR_SIGNIFICANCE` values on either side the verdict is
    "n too small" and no p-value is given.
    """
    a, b = finite_numbers(first), finite_numbers(second)
    if min(len(a), len(b)) < MIN_REPEATS_FOR_SIGNIFICANCE:
        return Significance(None, None, f"n too small (n={len(a)} vs {len(b)}; needs {MIN_REPEATS_FOR_SIGNIFICANCE} each)")
    if statistics.pvariance(a) == 0 and statistics.pvariance(b) == 0:
        # scipy returns NaN here; identical constant samples do not differ, distinct ones do.
        same = statistics.fmean(a) == statistics.fmean(b)
        return Significance(1.0 if same else 0.0, not same, "no difference" if same else "significant")
    result = scipy_stats.ttest_ind(a, b, equal_var=False)
    p_value = float(result.pvalue)
    significant = p_value < alpha
    return Significance(p_value, significant, f"{'significant' if significant else 'not significant'} (p={p_value:.3g})")
