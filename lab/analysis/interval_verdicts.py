"""A verdict for a figure known only within an interval.

A rule judges one value (held, partly, did not hold ...). A measured figure is an interval,
so its verdict is the rule's verdict only where the rule gives the same answer over the whole
interval; where the interval spans a threshold, the honest answer is "inconclusive". The
rules are piecewise (bands and thresholds, on a ratio or a share), so judging the interval's
ends and a dense set of points between them finds every verdict it spans.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from enum import StrEnum


class Verdict(StrEnum):
    """A verdict on a claimed figure: the closed set, in the order a report lists them. The value
    is the identity a report and its archive store; :attr:`text` is what a reader sees."""

    HELD = "held"
    PARTLY = "partly"
    INCONCLUSIVE = "inconclusive"
    # Did not hold, and a measured resource of this machine bounds the figure (a GPU would change it).
    NOT_HELD_HARDWARE = "did not hold here (hardware)"
    NOT_HELD = "did not hold"
    # The figure is cut off by what the run could hold (the test's length, a cache that cannot fill).
    NOT_MEASURABLE = "not measurable here"
    # Runs the figure rests on shared the machine (the contention warning): no verdict from them.
    NOT_JUDGED_BUSY = "not judged: machine busy"
    NOT_MEASURED = "not measured"

    @property
    def text(self) -> str:
        """The verdict as a reader sees it (a new wording changes this, never the identity)."""
        return VERDICT_TEXT[self]


VERDICT_TEXT: dict[Verdict, str] = {
    Verdict.HELD: "held",
    Verdict.PARTLY: "partly",
    Verdict.INCONCLUSIVE: "inconclusive",
    Verdict.NOT_HELD_HARDWARE: "did not hold here (hardware)",
    Verdict.NOT_HELD: "did not hold",
    Verdict.NOT_MEASURABLE: "not measurable here",
    Verdict.NOT_JUDGED_BUSY: "not judged: machine busy",
    Verdict.NOT_MEASURED: "not measured",
}
# Points judged inside an interval, spaced evenly on a log scale for positive intervals.
_POINTS = 400


def _points(low: float, high: float) -> list[float]:
    if low > 0:
        step = (math.log(high) - math.log(low)) / _POINTS
        return [math.exp(math.log(low) + i * step) for i in range(_POINTS + 1)]
    step = (high - low) / _POINTS
    return [low + i * step for i in range(_POINTS + 1)]


def verdicts_over(judge: Callable[[float], Verdict], low: float, high: float) -> list[Verdict]:
    """Every verdict ``judge`` gives somewhere in [low, high], in the order met from low up."""
    seen: list[Verdict] = []
    for value in _points(low, high):
        verdict = judge(value)
        if verdict not in seen:
            seen.append(verdict)
    return seen


def interval_verdict(
    judge: Callable[[float], Verdict], point: float | None, low: float | None, high: float | None
) -> Verdict:
    """``judge(point)`` when the interval is unknown (one repeat); otherwise the one verdict
    the whole interval gets, or :attr:`Verdict.INCONCLUSIVE` when it spans more than one."""
    if point is None:
        return judge(float("nan"))
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return judge(point)
    verdicts = verdicts_over(judge, min(low, point), max(high, point))
    return verdicts[0] if len(verdicts) == 1 else Verdict.INCONCLUSIVE
