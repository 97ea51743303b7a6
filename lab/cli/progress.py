"""Progress of queued runs in the terminal, as GuideLLM's and AIPerf's clients show theirs: runs done
of planned, the current run's phase and elapsed seconds, and an end time estimated from the stored
runs (:func:`lab.history.estimate_runs`), redrawn in place by rich while the runs execute.

Only on a terminal: where the output is a file or a pipe the waiters' plain lines (one per run that
ends) are the record, and ``--json`` prints only JSON. The display reads the database from a thread
of its own, so it moves while this process's worker executes a run.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from types import TracebackType
from typing import TextIO

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from db import store
from db.models import RunStatus, utc_now

# How often the display reads the runs again.
POLL_S = 1.0


@dataclass(frozen=True)
class RunsSoFar:
    """Where a batch of runs stands: done of planned, the running one, and the seconds left."""

    finished: int
    planned: int
    failed: int
    current: str | None
    seconds_left: float | None

    def line(self) -> str:
        """``2 of 6 runs done · #14 naive vus=8: running 12 s · about 3 min left (ends 14:52)``."""
        parts = [f"{self.finished} of {self.planned} runs done" + (f" ({self.failed} not done)" if self.failed else "")]
        if self.current:
            parts.append(self.current)
        if self.seconds_left is not None and self.finished < self.planned:
            ends = (utc_now() + timedelta(seconds=self.seconds_left)).astimezone().strftime("%H:%M")
            minutes = self.seconds_left / 60
            left = f"about {minutes:.0f} min left" if minutes >= 1 else f"about {self.seconds_left:.0f} s left"
            parts.append(f"{left} (ends {ends})")
        return " · ".join(parts)


def runs_so_far(engine: Engine, run_ids: Sequence[int]) -> RunsSoFar:
    """The batch ``run_ids`` as it stands now."""
    from lab.history import estimate_runs

    with Session(engine) as session:
        runs = store.list_runs(session=session, run_ids=list(run_ids), newest_first=False)
        finished = [run for run in runs if run.status in RunStatus.FINAL]
        active = next((run for run in runs if run.status in RunStatus.ACTIVE), None)
        queued = [run.spec for run in runs if run.status == RunStatus.QUEUED]
        seconds = estimate_runs(session=session, specs=queued).seconds if queued else 0.0
    current = None
    if active is not None:
        elapsed = ""
        if active.started_at is not None:
            started = active.started_at
            now = utc_now().replace(tzinfo=None) if started.tzinfo is None else utc_now()
            elapsed_s = max(0.0, (now - started).total_seconds())
            elapsed = f" {elapsed_s:.0f} s"
            seconds += max(0.0, (active.duration_s or 0) + 30 - elapsed_s)
        current = f"#{active.id} {active.cell_label}: {active.status}{elapsed}"
    failed = sum(1 for run in finished if run.status != RunStatus.DONE)
    return RunsSoFar(len(finished), len(runs), failed, current, seconds if (queued or active) else None)


class RunsProgress:
    """A rich live line for ``run_ids`` while the block runs (nothing when ``out`` is no terminal)."""

    def __init__(self, engine: Engine, run_ids: Sequence[int], *, out: TextIO | None = None) -> None:
        self.engine, self.run_ids = engine, list(run_ids)
        self.out = out or sys.stderr
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def shown(self) -> bool:
        return self.out.isatty()

    def __enter__(self) -> RunsProgress:
        if self.shown:
            self._thread = threading.Thread(target=self._follow, name="runs-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _follow(self) -> None:
        from rich.console import Console
        from rich.live import Live
        from rich.text import Text

        console = Console(file=self.out)
        with Live(Text("queued"), console=console, refresh_per_second=4, redirect_stderr=False) as live:
            while True:
                try:
                    live.update(Text(runs_so_far(self.engine, self.run_ids).line()))
                except Exception as error:  # a database hiccup: the display waits, the runs go on
                    live.update(Text(f"(progress unavailable: {type(error).__name__})"))
                if self._stop.wait(POLL_S):
                    live.update(Text(runs_so_far(self.engine, self.run_ids).line()))
                    return
