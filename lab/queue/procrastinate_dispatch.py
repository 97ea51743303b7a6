"""The shared queue on PostgreSQL: procrastinate (its version pinned in requirements.txt, its
schema applied by the lab's own migrations, db/migrations.py) carries each queued run to a worker.

- **Dispatch.** A queued run without a job gets one (``dispatch_queued``), in the same transaction
  that writes the job's id on the run: the job's queue routes it (lab.queue.dispatch.queue_name:
  its labels, its pinned worker, or the machine its long experiment is bound to), its priority is
  the run's. Any worker does this before it fetches, so no path that queues runs needs to know.
- **Claim.** procrastinate's fetch (``procrastinate_fetch_job_v2``: the worker's queues, highest
  priority first, then the oldest, ``FOR UPDATE SKIP LOCKED``), then the run is taken only if it
  is still queued and carried by that job (a run cancelled or deleted meanwhile ends its job).
- **Lost workers.** Each worker is a row of ``procrastinate_workers`` whose heartbeat it renews;
  ``get_stalled_jobs`` finds the jobs of workers silent for longer than the stall timeout
  (``LAB_WORKER_LEASE_S``): their runs end ``interrupted`` and their jobs ``failed``, never retried.

The lab's worker is synchronous (it also executes runs inside ``lab run``), so procrastinate's job
manager is driven through its sync psycopg connector, each of its async calls awaited at once.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Collection, Coroutine
from typing import Any, LiteralString, TypeVar

from procrastinate import exceptions, jobs
from procrastinate.manager import JobManager
from procrastinate.sync_psycopg_connector import SyncPsycopgConnector
from sqlalchemy import Engine, select, text, update
from sqlalchemy.orm import Session

from db import store, worker_store
from db.models import Experiment, LongExperiment, LongExperimentState, Run, RunStatus
from lab.queue.dispatch import Claim, queue_name, worker_queues
from lab.settings import Settings

log = logging.getLogger(__name__)

T = TypeVar("T")

# The task every job names: the worker that fetches it executes the run (lab.queue.worker).
TASK_NAME = "lab.execute_run"
# A dead worker's row in procrastinate_workers is removed after this long; its jobs were taken by
# the stalled-job detection long before.
PRUNE_WORKERS_AFTER_S = 24 * 3600.0


class BlockingConnector(SyncPsycopgConnector):
    """procrastinate's sync psycopg connector, answering the job manager's async queries with its
    sync ones: the lab's worker is synchronous and awaits each call at once (``_wait``)."""

    async def execute_query_async(self, query: LiteralString, **arguments: Any) -> None:
        self.execute_query(query, **arguments)

    async def execute_query_one_async(self, query: LiteralString, **arguments: Any) -> dict[str, Any]:
        return self.execute_query_one(query, **arguments)

    async def execute_query_all_async(self, query: LiteralString, **arguments: Any) -> list[dict[str, Any]]:
        return self.execute_query_all(query, **arguments)


_loops = threading.local()


def _wait(call: Coroutine[Any, Any, T]) -> T:
    """Await one of the job manager's calls (which never waits on anything else: BlockingConnector),
    on an event loop of the calling thread's own, kept for its next call."""
    loop = getattr(_loops, "loop", None)
    if loop is None:
        loop = _loops.loop = asyncio.new_event_loop()
    return loop.run_until_complete(call)


def _run_id(job: jobs.Job) -> int:
    """The run a job carries (0 for a job the lab did not defer: it matches no run)."""
    value = job.task_kwargs.get("run_id")
    return value if isinstance(value, int) else 0


class ProcrastinateDispatch:
    """The shared queue's dispatch (lab.queue.dispatch.Dispatch) on procrastinate."""

    def __init__(
        self,
        *,
        engine: Engine,
        settings: Settings,
        worker_name: str,
        labels: Collection[str],
        hardware: dict[str, Any],
        worker_pid: int,
    ) -> None:
        self.engine, self.worker_name, self.hardware, self.worker_pid = engine, worker_name, hardware, worker_pid
        self.labels = sorted(labels)
        self.queues = worker_queues(worker_name=worker_name, labels=self.labels)
        self.stall_timeout_s = settings.worker_lease_s
        conninfo = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        self.connector = BlockingConnector(conninfo=conninfo, min_size=1, max_size=3)
        self.jobs = JobManager(self.connector)
        self.queue_worker_id: int | None = None
        self._registration = threading.Lock()
        # When this worker's heartbeats last went through, and since when without a gap longer than
        # the stall timeout: after a gap (an outage, a stop) the others get a stall timeout to beat
        # again before this worker takes their runs.
        self._last_beat_s: float | None = None
        self._beating_since_s: float | None = None

    # -- joining --------------------------------------------------------------------------
    def open(self) -> None:
        self.connector.open()
        self._register()

    def close(self) -> None:
        try:
            if self.queue_worker_id is not None:
                _wait(self.jobs.unregister_worker(self.queue_worker_id))
        except exceptions.ConnectorException as error:
            log.warning("could not leave the queue: %s", error.__cause__ or error)
        finally:
            self.queue_worker_id = None
            self.connector.close()

    def _register(self) -> int:
        with self._registration:
            self.queue_worker_id = _wait(self.jobs.register_worker())
            self._beat_went_through()
            return self.queue_worker_id

    def _worker_id(self) -> int:
        """This worker's procrastinate worker, registered again if its row was pruned meanwhile."""
        worker_id = self.queue_worker_id
        if worker_id is None:
            return self._register()
        with Session(self.engine) as session:
            known = session.scalar(text("SELECT id FROM procrastinate_workers WHERE id = :id"), {"id": worker_id})
        return worker_id if known is not None else self._register()

    def _beat_went_through(self) -> None:
        now_s = time.monotonic()
        if self._last_beat_s is None or now_s - self._last_beat_s > self.stall_timeout_s:
            self._beating_since_s = now_s
        self._last_beat_s = now_s

    def beat(self, *, current_run_id: int | None) -> None:
        # The workers row first: the Workers page and ``lab run`` read it.
        worker_store.renew_worker_heartbeat(engine=self.engine, name=self.worker_name, current_run_id=current_run_id)
        _wait(self.jobs.update_heartbeat(self._worker_id()))
        self._beat_went_through()

    # -- dispatching and claiming -------------------------------------------------------------
    def dispatch_queued(self, *, excluded_experiment_ids: Collection[int] = ()) -> int:
        """Give every queued run without a job one, routed and prioritised; how many. Runs of a
        paused long experiment wait without one; those this worker must not take are left to others."""
        excluded = set(excluded_experiment_ids)
        with Session(self.engine) as session:
            rows = session.execute(
                select(
                    Run.id,
                    Run.requires_labels,
                    Run.pinned_worker,
                    Run.priority,
                    Run.experiment_id,
                    LongExperiment.state,
                    LongExperiment.machine_worker,
                )
                .outerjoin(Experiment, Experiment.id == Run.experiment_id)
                .outerjoin(LongExperiment, LongExperiment.id == Experiment.long_experiment_id)
                .where(Run.status == RunStatus.QUEUED, Run.job_id.is_(None))
                .order_by(Run.id)
                .with_for_update(of=Run, skip_locked=True)
            ).all()
            routed = [
                (
                    row.id,
                    jobs.Job(
                        queue=queue_name(
                            requires_labels=row.requires_labels,
                            # A long experiment bound to one machine: that machine's queue.
                            pinned_worker=row.pinned_worker or row.machine_worker,
                        ),
                        priority=row.priority or 0,
                        lock=None,
                        queueing_lock=None,
                        task_name=TASK_NAME,
                        task_kwargs={"run_id": row.id},
                    ),
                )
                for row in rows
                if row.experiment_id not in excluded and row.state in (None, LongExperimentState.RUNNING)
            ]
            if not routed:
                session.rollback()
                return 0
            # The jobs and their ids on the runs in one transaction: a run has one job or none.
            connection = session.connection().connection.dbapi_connection
            deferred = self.jobs.batch_defer_jobs([job for _, job in routed], connection=connection)
            for (run_id, _), job in zip(routed, deferred, strict=True):
                session.execute(update(Run).where(Run.id == run_id).values(job_id=job.id))
            session.commit()
        return len(routed)

    def claim(self, *, excluded_experiment_ids: Collection[int] = ()) -> Claim | None:
        self.dispatch_queued(excluded_experiment_ids=excluded_experiment_ids)
        while True:
            worker_id = self.queue_worker_id if self.queue_worker_id is not None else self._register()
            job = _wait(self.jobs.fetch_job(self.queues, worker_id))
            if job is None or job.id is None:
                return None
            run_id = _run_id(job)
            with Session(self.engine) as session:
                experiment_id = session.scalar(select(Run.experiment_id).where(Run.id == run_id, Run.job_id == job.id))
                if experiment_id is not None and experiment_id in excluded_experiment_ids:
                    # Routed before its experiment was bound to another machine: dispatched again.
                    session.execute(
                        update(Run)
                        .where(Run.id == run_id, Run.job_id == job.id, Run.status == RunStatus.QUEUED)
                        .values(job_id=None)
                    )
                    token = None
                else:
                    token = store.take_run(
                        session,
                        run_id=run_id,
                        job_id=job.id,
                        worker_name=self.worker_name,
                        hardware=self.hardware,
                        worker_pid=self.worker_pid,
                    )
                session.commit()
            if token is not None:
                return Claim(run_id=run_id, fencing_token=token, job_id=job.id)
            self._end_job(job.id, jobs.Status.ABORTED)  # cancelled, deleted or routed again meanwhile

    def finish(self, claim: Claim) -> None:
        if claim.job_id is not None:
            self._end_job(claim.job_id, jobs.Status.SUCCEEDED)

    def _end_job(self, job_id: int, status: jobs.Status) -> None:
        try:
            _wait(self.jobs.finish_job_by_id_async(job_id=job_id, status=status, delete_job=False))
        except exceptions.ConnectorException as error:
            # Already ended by another worker (it found this one stalled): nothing to add.
            log.info("job %s was already ended: %s", job_id, error.__cause__ or error)

    # -- lost workers -----------------------------------------------------------------------
    def interrupt_lost_runs(self) -> list[int]:
        beating_since_s = self._beating_since_s
        if beating_since_s is None or time.monotonic() - beating_since_s < self.stall_timeout_s:
            return []
        interrupted = []
        for job in _wait(self.jobs.get_stalled_jobs(seconds_since_heartbeat=self.stall_timeout_s)):
            if job.id is None:
                continue
            run_id = _run_id(job)
            with Session(self.engine) as session:
                row = session.execute(
                    select(Run.status, Run.worker_name).where(Run.id == run_id, Run.job_id == job.id)
                ).first()
                if row is not None and row.status == RunStatus.QUEUED:  # fetched, never started: again
                    session.execute(update(Run).where(Run.id == run_id, Run.job_id == job.id).values(job_id=None))
                    session.commit()
            if row is not None and row.status in RunStatus.ACTIVE:
                reason = (
                    f"worker {row.worker_name!r} stopped renewing its heartbeat (stall timeout "
                    f"{self.stall_timeout_s:g} s) while this run was {row.status}; interrupted by worker "
                    f"{self.worker_name!r}"
                )
                if worker_store.interrupt_lost_run(engine=self.engine, run_id=run_id, reason=reason, job_id=job.id):
                    interrupted.append(run_id)
            self._end_job(job.id, jobs.Status.FAILED)
        _wait(self.jobs.prune_stalled_workers(PRUNE_WORKERS_AFTER_S))
        return interrupted
