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

from lab.analysis._scipy_stats import normal_quantile, t_quantile, welch_p_value

CONFIDENCE_LEVEL = 0.95
SIGNIFICANCE_LEVEL = 0.05
# Below this many repeats per side, a significance verdict is not given.
MIN_REPEATS_FOR_SIGNIFICANCE = 3


def _t_critical(confidence: float, degrees_of_freedom: float) -> float:
    """Student's t quantile of a two-sided ``confidence`` interval."""
    return t_quantile((1 + confidence) / 2, degrees_of_freedom)


def mean_of_known(values: Iterable[object]) -> float | None:
    """The mean of the values that are known: a value is missing when it is None, NaN, infinite,
    text or a boolean, and is left out (it never counts as 0); None when no value is known. The one
    rule for a plain mean of repeats (a capacity probe's, a regression gate's)."""
    numbers = finite_numbers(values)
    return sum(numbers) / len(numbers) if numbers else None


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
    t_critical = _t_critical(confidence, n - 1)
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
        return Significance(
            None, None, f"n too small (n={len(a)} vs {len(b)}; needs {MIN_REPEATS_FOR_SIGNIFICANCE} each)"
        )
    if statistics.pvariance(a) == 0 and statistics.pvariance(b) == 0:
        # scipy returns NaN here; identical constant samples do not differ, distinct ones do.
        same = statistics.fmean(a) == statistics.fmean(b)
        return Significance(1.0 if same else 0.0, not same, "no difference" if same else "significant")
    p_value = welch_p_value(a, b)
    significant = p_value < alpha
    return Significance(
        p_value, significant, f"{'significant' if significant else 'not significant'} (p={p_value:.3g})"
    )


@dataclass(frozen=True)
class RatioInterval:
    """A ratio of two positive figures with its 95% interval, computed on a log scale so its
    bounds are positive; ``method`` says how (see :func:`ratio_interval`)."""

    ratio: float | None
    ci95_low: float | None
    ci95_high: float | None
    n_numerator: int
    n_denominator: int
    method: str

    def excludes(self, value: float) -> bool:
        """Whether the whole interval lies on one side of ``value`` (False without an interval)."""
        if self.ci95_low is None or self.ci95_high is None:
            return False
        return self.ci95_low > value or self.ci95_high < value

    def widened(self, factor: float) -> RatioInterval:
        """The interval stretched by a multiplicative ``factor`` (>= 1) at both ends: a drift the
        machine showed between identical cells is an uncertainty the repeats did not see."""
        if self.ci95_low is None or self.ci95_high is None or factor <= 1:
            return self
        return RatioInterval(
            self.ratio,
            self.ci95_low / factor,
            self.ci95_high * factor,
            self.n_numerator,
            self.n_denominator,
            f"{self.method}, widened x{factor:.3g} for drift",
        )


PAIRED_LOG = "paired by round, t interval of the per-round log ratios"
UNPAIRED_LOG = "log of the ratio of means, delta method with Welch's degrees of freedom"


def _log_mean_variance(numbers: list[float]) -> float:
    """Variance of log(mean) by the delta method: var(mean) / mean^2."""
    return statistics.variance(numbers) / len(numbers) / statistics.fmean(numbers) ** 2


def ratio_interval(
    numerator: Iterable[object],
    denominator: Iterable[object],
    *,
    paired: bool = False,
    confidence: float = CONFIDENCE_LEVEL,
) -> RatioInterval:
    """The ratio of two positive figures (numerator over denominator) with its interval.

    ``paired``: the i-th values of both sides were measured in the same round (interleaved
    trials), so a drift of the machine between rounds cancels in each per-round ratio; the
    interval is Student's t on the log ratios (the point is their geometric mean). Unpaired:
    the ratio of the arithmetic means, its interval exp(log ratio +- t * se) with se from the
    delta method and Welch-Satterthwaite degrees of freedom. Either way no bound is negative.
    Under two values a side (or any value <= 0) the interval is None.
    """
    a, b = finite_numbers(numerator), finite_numbers(denominator)
    method = PAIRED_LOG if paired else UNPAIRED_LOG
    if not a or not b or statistics.fmean(b) <= 0 or statistics.fmean(a) <= 0:
        return RatioInterval(None, None, None, len(a), len(b), method)
    if paired and len(a) == len(b) and min(a) > 0 and min(b) > 0:
        logs = [math.log(x / y) for x, y in zip(a, b, strict=True)]
        center = statistics.fmean(logs)
        if len(logs) < 2:
            return RatioInterval(math.exp(center), None, None, len(a), len(b), method)
        half = _t_critical(confidence, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
        return RatioInterval(math.exp(center), math.exp(center - half), math.exp(center + half), len(a), len(b), method)
    method = UNPAIRED_LOG
    ratio = statistics.fmean(a) / statistics.fmean(b)
    if min(len(a), len(b)) < 2:
        return RatioInterval(ratio, None, None, len(a), len(b), method)
    var_a, var_b = _log_mean_variance(a), _log_mean_variance(b)
    total = var_a + var_b
    if total == 0:
        return RatioInterval(ratio, ratio, ratio, len(a), len(b), method)
    # Welch-Satterthwaite degrees of freedom for the two log-mean variances.
    df = total**2 / (var_a**2 / (len(a) - 1) + var_b**2 / (len(b) - 1))
    half = _t_critical(confidence, df) * math.sqrt(total)
    return RatioInterval(ratio, ratio * math.exp(-half), ratio * math.exp(half), len(a), len(b), method)


def positive_mean_interval(values: Iterable[object], *, confidence: float = CONFIDENCE_LEVEL) -> MeanInterval:
    """The mean of a quantity that cannot be negative (a rate, a duration, a share), with an
    interval on the log scale (delta method, Student's t with n-1 degrees of freedom): close
    to the t interval when the spread is small, never below zero when it is large."""
    numbers = finite_numbers(values)
    if not numbers or min(numbers) < 0:
        return mean_interval(numbers, confidence=confidence)
    mean = statistics.fmean(numbers)
    if len(numbers) < 2 or mean == 0:
        return MeanInterval(mean, None if len(numbers) < 2 else 0.0, None if len(numbers) < 2 else 0.0, len(numbers))
    half = _t_critical(confidence, len(numbers) - 1) * math.sqrt(_log_mean_variance(numbers))
    return MeanInterval(mean, mean * math.exp(-half), mean * math.exp(half), len(numbers))


def proportion_interval(successes: int, trials: int, *, confidence: float = CONFIDENCE_LEVEL) -> MeanInterval:
    """A share ``successes / trials`` with its Wilson score interval (never outside [0, 1], and
    not empty at 0 or ``trials`` successes, where the normal approximation's is); no share
    without a trial."""
    if trials <= 0:
        return MeanInterval(None, None, None, 0)
    share = successes / trials
    z = normal_quantile((1 + confidence) / 2)
    denominator = 1 + z * z / trials
    centre = (share + z * z / (2 * trials)) / denominator
    half_width = z * math.sqrt(share * (1 - share) / trials + z * z / (4 * trials * trials)) / denominator
    return MeanInterval(share, max(0.0, centre - half_width), min(1.0, centre + half_width), trials)
