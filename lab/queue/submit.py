"""Submitting runs from the CLI: to the shared queue when live workers share the database,
else executed here as before.

When the database is shared (PostgreSQL, not SQLite) and some worker on it is alive (its
heartbeat within the lease), ``lab run`` and ``lab capacity`` only queue their runs and
wait: :class:`SharedQueueWaiter` prints which worker took each run and how it ended, and
never executes one itself. ``--local`` (``local=True``) keeps the old way: this process
executes the queue (``run_waiter.RunWaiter``). SQLite with no worker is unchanged.
"""

from __future__ import annotations

import sys
import time
from contextlib import AbstractContextManager
from typing import Protocol, TextIO

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from db import store, worker_store
from db.models import Run, RunStatus
from lab.context import LabContext
from lab.queue.run_waiter import RunWaiter


class Waiter(Protocol):
    """What the CLI waits with: ``wait(run_ids)`` returns once every run is final."""

    def wait(self, run_ids: list[int]) -> None: ...


def live_shared_workers(*, engine: Engine, lease_s: float) -> dict[str, list[str]]:
    """The live workers on a shared database, name -> labels; empty on SQLite (one machine's file)."""
    if engine.dialect.name == "sqlite":
        return {}
    with Session(engine) as session:
        live = {}
        for record in worker_store.list_workers(session=session):
            age_s = worker_store.heartbeat_age_s(session=session, record=record)
            if record.state == "running" and age_s is not None and age_s <= lease_s:
                live[record.name] = list(record.labels or [])
        return live


def run_line(run: Run) -> str:
    """``run #12 (naive 8 VUs, repeat 0)``: how the waiter names a run."""
    return f"run #{run.id} ({run.cell_label}, repeat {run.repeat_index + 1})"


class SharedQueueWaiter(AbstractContextManager["SharedQueueWaiter"]):
    """Waits for runs that the shared queue's workers execute, printing who took each and how it ended."""

    def __init__(
        self,
        *,
        engine: Engine,
        live_workers: dict[str, list[str]],
        poll_s: float = 1.0,
        quiet: bool = False,
        out: TextIO | None = None,
    ) -> None:
        self.engine, self.live_workers, self.poll_s, self.quiet = engine, live_workers, poll_s, quiet
        self.out = out or sys.stderr
        self._taken: set[int] = set()
        self._ended: set[int] = set()
        self._unfit_noted: set[int] = set()

    def __exit__(self, *exc_info: object) -> None:
        return None

    def _say(self, line: str) -> None:
        if not self.quiet:
            print(line, file=self.out, flush=True)

    def wait(self, run_ids: list[int]) -> None:
        """Return once every run of ``run_ids`` is final; executes none of them."""
        while True:
            with Session(self.engine) as session:
                runs = store.list_runs(session=session, run_ids=run_ids, newest_first=False)
                for run in runs:
                    self._report(run)
                if all(run.status in RunStatus.FINAL for run in runs):
                    return
            time.sleep(self.poll_s)

    def _report(self, run: Run) -> None:
        """One line when a worker takes the run, one when it ends; one if no live worker may take it."""
        if run.status == RunStatus.QUEUED and run.id not in self._unfit_noted and not self._fits_a_live_worker(run):
            self._unfit_noted.add(run.id)
            needs = ", ".join(run.requires_labels or []) or "-"
            self._say(
                f"{run_line(run)}: no live worker may take it (labels {needs}, worker "
                f"{run.pinned_worker or 'any'}); it waits for one (--local runs it here)"
            )
        if run.worker_name and run.id not in self._taken:
            self._taken.add(run.id)
            self._say(f"{run_line(run)} taken by worker {run.worker_name}")
        if run.status in RunStatus.FINAL and run.id not in self._ended:
            self._ended.add(run.id)
            reason = f" ({run.status_reason.splitlines()[0]})" if run.status_reason else ""
            self._say(f"{run_line(run)} on worker {run.worker_name or '-'}: {run.status}{reason}")

    def _fits_a_live_worker(self, run: Run) -> bool:
        return any(
            store.run_fits_worker(
                requires_labels=run.requires_labels, pinned_worker=run.pinned_worker, worker_name=name, labels=labels
            )
            for name, labels in self.live_workers.items()
        )


def open_waiter(context: LabContext, *, local: bool, quiet: bool = False) -> AbstractContextManager[Waiter]:
    """The waiter for a CLI command: the shared queue's when live workers share the database
    (and ``local`` is not asked), else one that executes the queue here (``RunWaiter``)."""
    live = {} if local else live_shared_workers(engine=context.engine, lease_s=context.settings.worker_lease_s)
    if not live:
        return RunWaiter(settings=context.settings, quiet=quiet)
    if not quiet:
        print(
            f"queued on the shared queue: {len(live)} live worker{'s' if len(live) != 1 else ''} "
            f"({', '.join(sorted(live))}) take the runs; this command only waits (--local runs them here)",
            file=sys.stderr,
        )
    return SharedQueueWaiter(engine=context.engine, live_workers=live, quiet=quiet)
