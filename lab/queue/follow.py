"""Following a long experiment from the terminal: its table (lab.queue.long_status) redrawn in place
on a terminal, printed again as it changes elsewhere, until its plan ends or pauses.

Where a worker runs on this data folder (``lab start``, ``lab worker``) or live workers share the
database, this only follows: Ctrl-C or a closed terminal stops the following, not the experiment.
Where none runs, this process is the worker (as ``lab run`` is) and Ctrl-C pauses the experiment:
the run in progress ends ``interrupted`` and is replaced when a worker on this machine starts again.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from db.models import LongExperimentState
from lab.context import LabContext
from lab.queue import long_status
from lab.queue.run_waiter import RunWaiter
from lab.queue.submit import live_shared_workers


def _shown(found: long_status.LongExperimentStatus) -> tuple[object, ...]:
    """What a reprint waits for (not the estimated end, which moves every second)."""
    return (found.state, found.runs_done, found.runs_left, found.running_run, found.waiting_for, found.figures)


class _Display:
    """The table in the terminal: redrawn in place by rich (from a thread of its own, so it moves
    while this process runs a run) on a terminal; printed again whenever it changes elsewhere."""

    def __init__(self, engine: Engine, long_id: int, out: TextIO, poll_s: float) -> None:
        self.engine, self.long_id, self.out, self.poll_s = engine, long_id, out, poll_s
        self.live_shown = out.isatty()
        self._last: tuple[object, ...] = ()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def status(self) -> long_status.LongExperimentStatus:
        with Session(self.engine) as session:
            return long_status.status(session, self.long_id)

    def show(self, found: long_status.LongExperimentStatus) -> None:
        """Plain output: the table again when something other than the estimated end changed."""
        if not self.live_shown and _shown(found) != self._last:
            self._last = _shown(found)
            print("\n".join(long_status.table_lines(found)), file=self.out, flush=True)

    def __enter__(self) -> _Display:
        if self.live_shown:
            self._thread = threading.Thread(target=self._redraw, name="long-experiment-table", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _redraw(self) -> None:
        from rich.console import Console
        from rich.live import Live
        from rich.text import Text

        with Live(Text(""), console=Console(file=self.out), refresh_per_second=2, redirect_stderr=False) as live:
            while True:
                try:
                    live.update(Text("\n".join(long_status.table_lines(self.status()))))
                except Exception as error:  # a database hiccup: the table waits, the experiment goes on
                    live.update(Text(f"(the table is unavailable: {type(error).__name__})"))
                if self._stop.wait(self.poll_s):
                    live.update(Text("\n".join(long_status.table_lines(self.status()))))
                    return


def follow(context: LabContext, long_id: int, *, poll_s: float = 2.0, out: TextIO | None = None) -> str:
    """Show the table (see :class:`_Display`) until the experiment ends or pauses; its state then.
    KeyboardInterrupt propagates (the caller says what it stopped)."""
    engine = context.engine
    shared = bool(live_shared_workers(engine=engine, lease_s=context.settings.worker_lease_s))
    waiter = None if shared else RunWaiter(settings=context.settings, quiet=True)
    try:
        with _Display(engine, long_id, out or sys.stderr, poll_s) as display:
            while True:
                found = display.status()
                display.show(found)
                if found.state != LongExperimentState.RUNNING:
                    return found.state
                ran = waiter.run_next() if waiter is not None else None
                if ran is None:
                    time.sleep(poll_s)
    finally:
        if waiter is not None:
            waiter.close()


def runs_here(context: LabContext) -> bool:
    """Whether following would execute the runs in this process (no worker runs on this data
    folder and none shares the database)."""
    import psutil

    from lab.queue.worker_lock import lock_holder_pid

    if live_shared_workers(engine=context.engine, lease_s=context.settings.worker_lease_s):
        return False
    holder = lock_holder_pid(context.settings.data_dir)
    return holder is None or not psutil.pid_exists(holder)
