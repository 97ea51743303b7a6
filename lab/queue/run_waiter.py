"""Waiting for runs from the CLI: execute the queue in this process when no worker runs on
this data folder, else wait for the lab's workers, printing progress to stderr.

``wait_for_runs`` waits once; ``RunWaiter`` over several batches keeps its worker (its lock
and the services it started) between them.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import AbstractContextManager
from pathlib import Path

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from db import store
from db.engine import sqlite_file_identity, sqlite_path
from db.models import RunStatus
from lab.context import LabContext
from lab.queue.worker import Worker, stop_own_services
from lab.queue.worker_lock import WorkerBusyError, WorkerLock, lock_holder_pid
from lab.settings import Settings


class WorkerUnusableError(RuntimeError):
    """The worker that holds the lock can never execute the queued runs."""


def wait_for_runs(*, settings: Settings, run_ids: list[int], poll_s: float = 2.0, quiet: bool = False) -> None:
    """Wait until every run of ``run_ids`` is final: execute the queue here (holding the worker
    lock) if no worker runs on this data folder; else (or for runs this machine may not take)
    wait for the lab's workers, printing progress to stderr.

    Raises ``WorkerUnusableError`` when the waiting could never end (a database file
    removed or replaced under the worker or this process).
    """
    with RunWaiter(settings=settings, poll_s=poll_s, quiet=quiet) as waiter:
        waiter.wait(run_ids)


def worker_on_removed_database(settings: Settings) -> int | None:
    """The pid of the lock-holding worker if it still uses a removed SQLite file (Linux /proc)."""
    database = sqlite_path(settings.resolved_database_url)
    pid = lock_holder_pid(settings.data_dir)
    if database is None or pid is None:
        return None
    try:
        open_files = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
    except OSError:
        return None
    return pid if f"{database.resolve()} (deleted)" in open_files else None


class RunWaiter:
    """``wait_for_runs`` over several batches: between two ``wait`` calls the worker this
    process runs keeps its lock and the services it started (a capacity search queues its
    probes one at a time and must not restart vLLM for each). ``close`` stops them."""

    def __init__(self, *, settings: Settings, poll_s: float = 2.0, quiet: bool = False) -> None:
        self.settings, self.poll_s, self.quiet = settings, poll_s, quiet
        self.context = LabContext(settings=settings)
        self.engine = self.context.engine
        self._database = sqlite_file_identity(settings.resolved_database_url)
        self._lock = WorkerLock(settings.data_dir)
        self._worker: Worker | None = None
        self._serving: AbstractContextManager[Worker] | None = None

    def __enter__(self) -> RunWaiter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _open_worker(self) -> bool:
        """Become this data folder's worker; False when another one is."""
        try:
            self._lock.acquire()
        except WorkerBusyError:
            if (pid := worker_on_removed_database(self.settings)) is not None:
                raise WorkerUnusableError(
                    f"the lab's worker (pid {pid}) still uses a database file that was removed, so it never sees "
                    "these runs: stop it or start the lab again, then run again"
                ) from None
            return False
        worker = Worker(context=self.context)
        serving = worker.serving()
        try:
            serving.__enter__()
        except WorkerBusyError:  # a live worker elsewhere has this host's name: it takes them
            self._lock.release()
            return False
        self._worker, self._serving = worker, serving
        return True

    def close(self) -> None:
        """Stop the services this process's worker started and give the lock back."""
        if self._worker is None or self._serving is None:
            return
        worker, serving = self._worker, self._serving
        self._worker = self._serving = None
        try:
            serving.__exit__(None, None, None)
        finally:
            stop_own_services(worker.services)
            self._lock.release()

    def run_next(self) -> int | None:
        """Execute the next queued run this machine may take, becoming this data folder's worker
        first if no other process is; its id, or None (nothing to run, or another worker runs here)."""
        if self._worker is None and not self._open_worker():
            return None
        assert self._worker is not None
        return self._worker.run_one()

    @property
    def executes(self) -> bool:
        """Whether this process is the data folder's worker (it runs the runs, not the lab's worker)."""
        return self._worker is not None

    def wait(self, run_ids: list[int]) -> None:
        """Return once every run of ``run_ids`` is final (see ``wait_for_runs``)."""
        last_line = ""
        while True:
            if self._database and sqlite_file_identity(self.settings.resolved_database_url) != self._database:
                raise WorkerUnusableError("the lab's database file was removed or replaced while waiting for the runs")
            with Session(self.engine) as session:
                runs = store.list_runs(session=session, run_ids=run_ids)
                if all(run.status in RunStatus.FINAL for run in runs):
                    return
            ran_any = False
            if self._worker is not None or self._open_worker():
                assert self._worker is not None
                ran_any = run_pending(worker=self._worker, engine=self.engine, run_ids=run_ids, quiet=self.quiet)
                if not ran_any:
                    self.close()  # runs for other workers: do not hold the lock while they run
            if not ran_any:
                line = ", ".join(f"#{r.id} {r.status}" for r in runs)
                if line != last_line and not self.quiet:
                    print(f"waiting for the lab's workers: {line}", file=sys.stderr)
                    last_line = line
                time.sleep(self.poll_s)


def run_pending(*, worker: Worker, engine: Engine, run_ids: list[int], quiet: bool) -> bool:
    """Execute queued runs while some of ``run_ids`` are pending; True if any ran."""
    ran_any = False
    while True:
        with Session(engine) as session:
            pending = [r for r in store.list_runs(session=session, run_ids=run_ids) if r.status not in RunStatus.FINAL]
        if not pending:
            return ran_any
        run_id = worker.run_one()
        if run_id is None:
            return ran_any
        ran_any = True
        if not quiet:
            with Session(engine) as session:
                run = store.get_run(session=session, run_id=run_id)
                if run is None:  # deleted from a page meanwhile: nothing to report
                    continue
                print(
                    f"run #{run_id} {run.cell_label} repeat {run.repeat_index + 1}: {run.status}"
                    + (f" ({run.status_reason.splitlines()[0]})" if run.status_reason else ""),
                    file=sys.stderr,
                )
