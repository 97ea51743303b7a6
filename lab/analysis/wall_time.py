"""Wall time measured on the union of runs' intervals: how long runs were actually running, the
span from the first start to the last end, and the pauses between (a stopped lab, an idle queue).

Adding up experiments' spans counts twice the time their interleaved rounds overlap; adding up
runs' own seconds misses nothing and counts nothing twice, and the gaps are named apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

# A gap between runs longer than this is a pause (the lab stopped, or nothing was queued), not
# the lab's own time between two runs (parsing, the next claim).
PAUSE_MIN_S = 120.0


class TimedRun(Protocol):
    """What the wall time reads of a run (a stored ``Run`` has these columns)."""

    @property
    def started_at(self) -> datetime | None: ...
    @property
    def finished_at(self) -> datetime | None: ...
    @property
    def measured_duration_s(self) -> float | None: ...


@dataclass(frozen=True)
class Pause:
    """A stretch with no run running, longer than :data:`PAUSE_MIN_S`."""

    start: datetime
    end: datetime

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


@dataclass(frozen=True)
class WallTime:
    """``running_s``: seconds in which at least one run ran (the union of their intervals);
    ``span_s``: first start to last end; ``pauses``: the gaps longer than :data:`PAUSE_MIN_S`."""

    running_s: float
    span_s: float
    first_start: datetime | None
    last_end: datetime | None
    pauses: tuple[Pause, ...]

    @property
    def paused_s(self) -> float:
        return sum(pause.seconds for pause in self.pauses)


def wall_time(intervals: Iterable[tuple[datetime, datetime]], *, pause_min_s: float = PAUSE_MIN_S) -> WallTime:
    """The union of ``intervals`` (start, end), its span and its pauses."""
    ordered = sorted((start, end) for start, end in intervals if end >= start)
    if not ordered:
        return WallTime(0.0, 0.0, None, None, ())
    running_s = 0.0
    pauses: list[Pause] = []
    current_start, current_end = ordered[0]
    for start, end in ordered[1:]:
        if start > current_end:
            running_s += (current_end - current_start).total_seconds()
            if (start - current_end).total_seconds() > pause_min_s:
                pauses.append(Pause(current_end, start))
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    running_s += (current_end - current_start).total_seconds()
    first, last = ordered[0][0], max(end for _, end in ordered)
    return WallTime(running_s, (last - first).total_seconds(), first, last, tuple(pauses))


def run_intervals(runs: Iterable[TimedRun], *, now: datetime | None = None) -> list[tuple[datetime, datetime]]:
    """Each started run's (started_at, finished_at), an active one's up to ``now``; SQLite's naive
    datetimes and aware ones are compared as they are stored (all UTC)."""
    found = []
    for run in runs:
        start, end = run.started_at, run.finished_at
        if start is None:
            continue
        if end is None:
            if now is None:
                continue
            end = now.replace(tzinfo=None) if start.tzinfo is None else now
        found.append((start, end))
    return found


def wall_and_measured_s(runs: Sequence[TimedRun]) -> tuple[float, float] | None:
    """(seconds in which a run ran, the union of their intervals; sum of the seconds k6 measured);
    None until a run has measured something."""
    measured_s = sum(run.measured_duration_s or 0 for run in runs)
    wall = wall_time(run_intervals(runs))
    if not measured_s or not wall.running_s:
        return None
    return wall.running_s, measured_s
