"""The regression gate against one imported run: per-request samples, not repeats.

A run imported from another tool is one run, so the gate's usual comparison (the means of
at least three runs a side) cannot decide against it. Where the file kept every request
(GuideLLM's report, ``vllm bench serve --save-detailed``), a figure is compared on the
requests instead: a mean by the ratio of means with its delta-method interval, a percentile
by a seeded bootstrap of the requests on both sides. Figures that are not per-request
(rates) and files without samples give no verdict, and the reason says why (exit 4).
Pure: per-request values in, a :class:`~lab.analysis.regression.FigureChange` out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from lab.analysis.regression import FigureChange
from lab.analysis.statistics import MIN_REPEATS_FOR_SIGNIFICANCE, ratio_interval

# Gate figure -> (per-request series, statistic: "mean" or a percentile).
SAMPLE_FIGURES: dict[str, tuple[str, str | float]] = {
    "latency_avg_s": ("latency", "mean"),
    "latency_p50_s": ("latency", 50),
    "latency_p90_s": ("latency", 90),
    "latency_p95_s": ("latency", 95),
    "latency_p99_s": ("latency", 99),
    "ttft_avg_s": ("ttft", "mean"),
    "ttft_p50_s": ("ttft", 50),
    "ttft_p95_s": ("ttft", 95),
    "ttft_p99_s": ("ttft", 99),
    "tpot_avg_s": ("tpot", "mean"),
    "tpot_p95_s": ("tpot", 95),
}
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_RANDOM_SEED = 20261203


def undecided(figure: str, why: str) -> FigureChange:
    """No verdict on ``figure``, and why (what the gate prints)."""
    return FigureChange(figure, None, None, None, None, None, 0, 0, None, why_undecided=why)


def finite(values: Sequence[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(v)]


def percentile_change(baseline: list[float], later: list[float], share: float) -> tuple[float, float, float]:
    """The ratio of the ``share`` percentiles (later over baseline) and its bootstrap 95% interval."""
    generator = np.random.default_rng(BOOTSTRAP_RANDOM_SEED)
    first, second = np.asarray(baseline), np.asarray(later)
    ratio = float(np.percentile(second, share) / np.percentile(first, share))
    draws_first = np.percentile(
        first[generator.integers(0, len(first), (BOOTSTRAP_RESAMPLES, len(first)))], share, axis=1
    )
    draws_second = np.percentile(
        second[generator.integers(0, len(second), (BOOTSTRAP_RESAMPLES, len(second)))], share, axis=1
    )
    ratios = draws_second / draws_first
    low, high = np.percentile(ratios, [2.5, 97.5])
    return ratio, float(low), float(high)


def sample_change(
    figure: str, baseline: Sequence[float | None], later: Sequence[float | None], *, baseline_name: str
) -> FigureChange:
    """``figure`` of the later runs' requests against the imported baseline's requests."""
    if figure not in SAMPLE_FIGURES:
        return undecided(
            figure,
            f"{figure} is not a per-request figure, and {baseline_name} is one imported run: "
            f"only {', '.join(SAMPLE_FIGURES)} can be compared with it",
        )
    series, statistic = SAMPLE_FIGURES[figure]
    first, second = finite(baseline), finite(later)
    if not first:
        return undecided(figure, f"{baseline_name} keeps no per-request {series} values")
    if not second:
        return undecided(figure, f"the new runs kept no per-request {series} values")
    enough = min(len(first), len(second)) >= MIN_REPEATS_FOR_SIGNIFICANCE
    if statistic == "mean":
        interval = ratio_interval(second, first)
        if interval.ratio is None:
            return undecided(figure, f"{figure} is not positive on both sides")
        ratio, low, high = interval.ratio, interval.ci95_low, interval.ci95_high
    else:
        ratio, low, high = percentile_change(first, second, float(statistic))
    significant = (low is not None and high is not None and (low > 1 or high < 1)) if enough else None
    return FigureChange(
        figure,
        _statistic(first, statistic),
        _statistic(second, statistic),
        ratio - 1,
        None if low is None else low - 1,
        None if high is None else high - 1,
        len(first),
        len(second),
        significant,
        counted="requests",
    )


def _statistic(values: list[float], statistic: str | float) -> float:
    return float(np.mean(values)) if statistic == "mean" else float(np.percentile(values, float(statistic)))
