"""Later runs against a baseline: the change of each figure with its 95% interval and whether
it is significant, and the regression gate's verdicts and exit codes.

Pure: figures in, typed verdicts out. The change is the ratio of the later runs' mean to the
baseline's, minus one, its interval :func:`~lab.analysis.statistics.ratio_interval`'s
(unpaired: a baseline and a later experiment never share rounds). It is significant when the
interval leaves out "no change"; under :data:`MIN_REPEATS_FOR_SIGNIFICANCE` runs a side no
verdict is given. A figure regresses when it is worse than the baseline by more than its
threshold AND the change is significant; too few repeats is its own outcome, never a pass.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lab.analysis.statistics import MIN_REPEATS_FOR_SIGNIFICANCE, mean_of_known, ratio_interval

HIGHER_IS_BETTER = 1
LOWER_IS_BETTER = -1
# Figures a gate may watch, each with the direction that is better.
FIGURE_DIRECTIONS: dict[str, int] = {
    **{
        name: HIGHER_IS_BETTER
        for name in (
            "req_per_s",
            "output_tok_per_s",
            "input_tok_per_s",
            "steady_output_tok_per_s",
            "steady_req_per_s",
            "goodput_req_per_s",
            "slo_attainment",
            "prefix_cache_hit_rate",
            "response_cache_hit_rate",
        )
    },
    **{
        name: LOWER_IS_BETTER
        for name in (
            "latency_avg_s",
            "latency_p50_s",
            "latency_p90_s",
            "latency_p95_s",
            "latency_p99_s",
            "latency_max_s",
            "ttft_avg_s",
            "ttft_p50_s",
            "ttft_p95_s",
            "ttft_p99_s",
            "tpot_avg_s",
            "tpot_p95_s",
            "server_ttft_avg_s",
            "server_time_per_output_token_avg_s",
        )
    },
}
# The figures Compare and Run detail show against a baseline (those a run measured).
HEADLINE_FIGURES: tuple[str, ...] = (
    "output_tok_per_s",
    "req_per_s",
    "steady_output_tok_per_s",
    "latency_avg_s",
    "latency_p95_s",
    "ttft_p95_s",
    "tpot_avg_s",
)
MAX_THRESHOLD_PERCENT = 10_000.0

# Outcomes of one figure under the gate, and the command's exit codes.
REGRESSION, PASSED, UNDECIDED = "regression", "pass", "undecided"
EXIT_PASSED, EXIT_RUNS_FAILED, EXIT_BAD_INPUT, EXIT_REGRESSION, EXIT_UNDECIDED = 0, 1, 2, 3, 4


class GateInputError(ValueError):
    """A ``--fail-on-regression`` limit that cannot be used; the message names what is wrong."""


@dataclass(frozen=True)
class Threshold:
    """Fail when ``figure`` is worse than the baseline by more than ``percent``."""

    figure: str
    percent: float


def parse_threshold(text: str) -> Threshold:
    """``output_tok_per_s=5`` (or ``=5%``) -> a :class:`Threshold`; GateInputError naming an
    unknown figure, a missing ``=`` or a threshold that is not a number from 0."""
    if "=" not in text:
        raise GateInputError(f"--fail-on-regression needs FIGURE=PERCENT (e.g. output_tok_per_s=5), got {text[:80]!r}")
    figure, raw = (part.strip() for part in text.split("=", 1))
    if figure not in FIGURE_DIRECTIONS:
        raise GateInputError(
            f"unknown figure {figure[:60]!r} in --fail-on-regression; figures: {', '.join(FIGURE_DIRECTIONS)}"
        )
    number = raw.removesuffix("%").strip()
    try:
        percent = float(number)
    except ValueError:
        raise GateInputError(
            f"the threshold of {figure} is not a number: {raw[:40]!r} (a percentage, e.g. {figure}=5)"
        ) from None
    if not math.isfinite(percent) or not 0 <= percent <= MAX_THRESHOLD_PERCENT:
        raise GateInputError(
            f"the threshold of {figure} must be a percentage from 0 to {MAX_THRESHOLD_PERCENT:g}, not {raw[:40]}"
        )
    return Threshold(figure, percent)


def parse_thresholds(texts: Iterable[str]) -> list[Threshold]:
    """Every ``FIGURE=PERCENT``; one figure named twice is refused."""
    thresholds = [parse_threshold(text) for text in texts]
    figures = [threshold.figure for threshold in thresholds]
    if len(set(figures)) != len(figures):
        twice = next(figure for figure in figures if figures.count(figure) > 1)
        raise GateInputError(f"--fail-on-regression names {twice} twice")
    return thresholds


@dataclass(frozen=True)
class FigureChange:
    """A figure of later runs against the baseline's: ``change`` = later mean / baseline mean - 1
    (``None`` when either side did not measure it), its 95% interval, and ``significant``
    (``None``: too few runs a side to say)."""

    figure: str
    baseline_mean: float | None
    later_mean: float | None
    change: float | None
    change_ci95_low: float | None
    change_ci95_high: float | None
    n_baseline: int
    n_later: int
    significant: bool | None
    # Why no verdict can be given, when the reason is not too few runs (an imported baseline).
    why_undecided: str | None = None
    # What the counts count: runs, or requests (against an imported run's per-request samples).
    counted: str = "runs"

    @property
    def worse_by(self) -> float | None:
        """How much worse than the baseline, as a share (negative: better); None unknown."""
        if self.change is None:
            return None
        return -FIGURE_DIRECTIONS.get(self.figure, HIGHER_IS_BETTER) * self.change

    @property
    def verdict(self) -> str:
        """What a reader is shown: worse/better (significant), no significant change, or why none."""
        if self.why_undecided:
            return self.why_undecided
        if self.change is None:
            return "not measured on both sides"
        if self.significant is None:
            return (
                f"too few runs to tell (n={self.n_later} vs {self.n_baseline}; "
                f"needs {MIN_REPEATS_FOR_SIGNIFICANCE} a side)"
            )
        if not self.significant:
            return "no significant change"
        return "significantly worse" if (self.worse_by or 0) > 0 else "significantly better"


def figure_change(figure: str, baseline_values: Sequence[object], later_values: Sequence[object]) -> FigureChange:
    """The change of ``figure`` from the baseline's values to the later runs' (one value a run)."""
    interval = ratio_interval(later_values, baseline_values)
    n_later, n_baseline = interval.n_numerator, interval.n_denominator
    baseline_mean, later_mean = mean_of_known(baseline_values), mean_of_known(later_values)
    if interval.ratio is None:
        return FigureChange(figure, baseline_mean, later_mean, None, None, None, n_baseline, n_later, None)
    decided = min(n_later, n_baseline) >= MIN_REPEATS_FOR_SIGNIFICANCE and interval.ci95_low is not None
    low = None if interval.ci95_low is None else interval.ci95_low - 1
    high = None if interval.ci95_high is None else interval.ci95_high - 1
    significant = interval.excludes(1.0) if decided else None
    return FigureChange(
        figure, baseline_mean, later_mean, interval.ratio - 1, low, high, n_baseline, n_later, significant
    )


def percent_text(share: float | None) -> str:
    """``-0.123`` -> ``-12.3%``; ``–`` when unknown."""
    return "–" if share is None else f"{share * 100:+.1f}%"


def change_text(change: FigureChange) -> str:
    """``-12.3% [95% CI -15.0%, -9.5%]``, or the change alone without an interval."""
    text = percent_text(change.change)
    if change.change is not None and change.change_ci95_low is not None and change.change_ci95_high is not None:
        text += f" [95% CI {percent_text(change.change_ci95_low)}, {percent_text(change.change_ci95_high)}]"
    return text


@dataclass(frozen=True)
class GateVerdict:
    """One watched figure of one cell under the gate."""

    cell: str
    threshold: Threshold
    change: FigureChange
    outcome: str

    def line(self, *, with_cell: bool = False) -> str:
        """One line for the terminal: outcome, figure, change with its interval, why."""
        where = f"{self.cell}: " if with_cell else ""
        figure = self.threshold.figure
        runs = f"{self.change.n_later} new vs {self.change.n_baseline} baseline {self.change.counted}"
        if self.outcome == REGRESSION:
            return (
                f"REGRESSION {where}{figure}: {change_text(self.change)}, worse than the baseline by more than "
                f"{self.threshold.percent:g}% and significant ({runs})"
            )
        if self.outcome == UNDECIDED:
            return f"CANNOT DECIDE {where}{figure}: {change_text(self.change)}; {self.change.verdict} ({runs})"
        return (
            f"ok {where}{figure}: {change_text(self.change)}; {self.change.verdict}, threshold "
            f"{self.threshold.percent:g}% ({runs})"
        )

    def as_dict(self) -> dict[str, Any]:
        """The verdict as JSON data (``--json``)."""
        change = self.change
        return {
            "cell": self.cell,
            "figure": self.threshold.figure,
            "threshold_percent": self.threshold.percent,
            "outcome": self.outcome,
            "baseline_mean": change.baseline_mean,
            "new_mean": change.later_mean,
            "change": change.change,
            "change_ci95_low": change.change_ci95_low,
            "change_ci95_high": change.change_ci95_high,
            "significant": change.significant,
            "n_baseline": change.n_baseline,
            "n_new": change.n_later,
            "message": self.line(),
        }


def judge(
    cell: str, threshold: Threshold, baseline_values: Sequence[object], later_values: Sequence[object]
) -> GateVerdict:
    """The gate's verdict on one figure of one cell."""
    return verdict_of(cell, threshold, figure_change(threshold.figure, baseline_values, later_values))


def verdict_of(cell: str, threshold: Threshold, change: FigureChange) -> GateVerdict:
    """The outcome of a figure's change under its threshold: undecided without a significance."""
    if change.change is None or change.significant is None:
        outcome = UNDECIDED
    elif change.significant and (change.worse_by or 0) * 100 > threshold.percent:
        outcome = REGRESSION
    else:
        outcome = PASSED
    return GateVerdict(cell, threshold, change, outcome)


def gate_exit_code(verdicts: Sequence[GateVerdict], *, runs_all_done: bool) -> int:
    """A regression first (:data:`EXIT_REGRESSION`), then runs that did not finish
    (:data:`EXIT_RUNS_FAILED`), then too few runs to decide (:data:`EXIT_UNDECIDED`), else 0."""
    outcomes = {verdict.outcome for verdict in verdicts}
    if REGRESSION in outcomes:
        return EXIT_REGRESSION
    if not runs_all_done:
        return EXIT_RUNS_FAILED
    if UNDECIDED in outcomes:
        return EXIT_UNDECIDED
    return EXIT_PASSED


def gate_summary(exit_code: int) -> str:
    """The gate's last line, by its exit code."""
    return {
        EXIT_PASSED: "gate passed: no watched figure regressed significantly beyond its threshold",
        EXIT_REGRESSION: f"gate FAILED: regression (exit code {EXIT_REGRESSION})",
        EXIT_RUNS_FAILED: f"gate FAILED: not every run finished done (exit code {EXIT_RUNS_FAILED})",
        EXIT_UNDECIDED: (
            f"gate CANNOT DECIDE: too few runs to tell (exit code {EXIT_UNDECIDED}); run more "
            f"repeats (at least {MIN_REPEATS_FOR_SIGNIFICANCE} a side), this is not a pass"
        ),
    }.get(exit_code, f"gate ended with exit code {exit_code}")


def change_rows(
    baseline: Sequence[Mapping[str, Any]],
    later_groups: Sequence[tuple[str, Sequence[Mapping[str, Any]]]],
    figures: Sequence[str] = HEADLINE_FIGURES,
) -> list[dict[str, Any]]:
    """One row per later group (label, its run records) and figure measured on both sides: the
    means, the change with its 95% interval and the verdict. Records are run records (dicts)."""
    rows = []
    for label, records in later_groups:
        for figure in figures:
            change = figure_change(figure, [r.get(figure) for r in baseline], [r.get(figure) for r in records])
            if change.change is None:
                continue
            rows.append(
                {
                    "later runs": label,
                    "figure": figure,
                    "baseline": change.baseline_mean,
                    "later": change.later_mean,
                    "change": percent_text(change.change),
                    "95% interval": (
                        "–"
                        if change.change_ci95_low is None
                        else f"{percent_text(change.change_ci95_low)} to {percent_text(change.change_ci95_high)}"
                    ),
                    "runs": f"{change.n_later} vs {change.n_baseline}",
                    "verdict": change.verdict,
                }
            )
    return rows
