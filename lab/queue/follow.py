"""Following a long experiment from the terminal: its table (lab.queue.long_status) printed as it
changes, until its plan ends or pauses.

Where a worker runs on this data folder (``lab start``, ``lab worker``) or live workers share the
database, this only follows: Ctrl-C or a closed terminal stops the following, not the experiment.
Where none runs, this process is the worker (as ``lab run`` is) and Ctrl-C pauses the experiment:
the run in progress ends ``interrupted`` and is replaced when a worker on this machine starts again.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from sqlalchemy.orm import Session

from db.models import LongExperimentState
from lab.context import LabContext
from lab.queue import long_status
from lab.queue.run_waiter import RunWaiter
from lab.queue.submit import live_shared_workers


def _shown(found: long_status.LongExperimentStatus) -> tuple[object, ...]:
    """What a reprint waits for (not the estimated end, which moves every second)."""
    return (found.state, found.runs_done, found.runs_left, found.running_run, found.waiting_for, found.figures)


def follow(context: LabContext, long_id: int, *, poll_s: float = 2.0, out: TextIO | None = None) -> str:
    """Print the table whenever it changes until the experiment ends or pauses; its state then.
    KeyboardInterrupt propagates (the caller says what it stopped)."""
    out = out or sys.stderr
    engine = context.engine
    shared = bool(live_shared_workers(engine=engine, lease_s=context.settings.worker_lease_s))
    waiter = None if shared else RunWaiter(settings=context.settings, quiet=True)
    last: tuple[object, ...] = ()
    try:
        while True:
            with Session(engine) as session:
                found = long_status.status(session, long_id)
            if _shown(found) != last:
                last = _shown(found)
                print("\n".join(long_status.table_lines(found)), file=out, flush=True)
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
