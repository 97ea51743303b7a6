"""The dispatch: how a queued run reaches one worker, and what happens to the run of a worker that
is lost. The ``runs`` table stays the source of truth for a run's state, progress and figures; the
dispatch only hands runs out.

Two dispatches, one interface (``Dispatch``), chosen by the database (``lab.queue.worker.open_dispatch``):

- **PostgreSQL, many machines**: procrastinate (lab.queue.procrastinate_dispatch). Each queued run
  is a procrastinate job whose queue name routes it (``queue_name``); a worker fetches from the
  queues its name and labels satisfy (``worker_queues``), highest priority first, then the oldest.
  Procrastinate's worker heartbeats and stalled-job detection find a lost worker.
- **SQLite, one machine**: ``LocalDispatch``, the same order and routing over the ``runs`` table
  (db.store.claim_next_run); a lost worker is a process gone from this machine.

Either way a claim raises the run's fencing token (db.store), the executor's writes carry it, and
a lost worker's run ends ``interrupted`` with a reason, never executed again silently: what
follows is the lab's (a long experiment's plan queues a replacement, lab.queue.long_experiments).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Protocol

import psutil
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from db import store, worker_store
from db.models import Run, RunStatus

log = logging.getLogger(__name__)

# A worker listens to one queue per subset of its labels (and as many for its name): labels are
# few words (gpu, h100, cpu); past this many the queue names would be too many to list.
MAX_ROUTED_LABELS = 10


@dataclass(frozen=True)
class Claim:
    """A run handed to this worker: the token its writes carry, and the job that carried it."""

    run_id: int
    fencing_token: int
    job_id: int | None = None


class Dispatch(Protocol):
    """What a worker asks of its dispatch (``lab.queue.worker.Worker``)."""

    def open(self) -> None:
        """Join the queue (before the first claim)."""

    def close(self) -> None:
        """Leave the queue."""

    def beat(self, *, current_run_id: int | None) -> None:
        """Say this worker is alive (from the worker's heartbeat thread, also during a run)."""

    def claim(self, *, excluded_experiment_ids: Collection[int] = ()) -> Claim | None:
        """The next run this worker may take, now ``starting`` and its own; None when none."""

    def finish(self, claim: Claim) -> None:
        """The claimed run reached a final state (or was taken from this worker)."""

    def interrupt_lost_runs(self) -> list[int]:
        """End the runs of lost workers ``interrupted``, with the reason; their ids."""


def queue_name(*, requires_labels: Iterable[str] | None, pinned_worker: str | None) -> str:
    """The queue a run goes to: ``any;labels=gpu,h100``, or ``worker=box-1;labels=`` when pinned
    to a worker (or bound to one machine, a long experiment's)."""
    labels = ",".join(sorted(set(requires_labels or ())))
    return f"{f'worker={pinned_worker}' if pinned_worker else 'any'};labels={labels}"


def worker_queues(*, worker_name: str, labels: Collection[str]) -> list[str]:
    """Every queue a worker named ``worker_name`` with ``labels`` may take runs from: each subset
    of its labels, for runs pinned to nobody and for runs pinned to it."""
    unique = sorted(set(labels))
    if len(unique) > MAX_ROUTED_LABELS:
        raise ValueError(f"a worker has at most {MAX_ROUTED_LABELS} labels on the queue ({len(unique)} given)")
    subsets = [subset for size in range(len(unique) + 1) for subset in combinations(unique, size)]
    return [
        queue_name(requires_labels=subset, pinned_worker=pinned) for pinned in (None, worker_name) for subset in subsets
    ]


@dataclass(frozen=True)
class QueuedRun:
    """A queued run as the Runs page lists the queue."""

    run_id: int
    priority: int
    cell_label: str


def queue_order(*, session: Session, limit: int = 5) -> tuple[list[QueuedRun], int]:
    """The first ``limit`` queued runs in the order workers take them (higher priority first, then
    the oldest; each worker takes the first it may), and how many runs are queued in all."""
    queued = select(Run.id, Run.priority, Run.cell_label).where(Run.status == RunStatus.QUEUED)
    rows = session.execute(queued.order_by(Run.priority.desc(), Run.id).limit(limit)).all()
    total = session.scalar(select(func.count()).select_from(queued.subquery())) or 0
    return [QueuedRun(run_id, priority or 0, cell_label) for run_id, priority, cell_label in rows], int(total)


def claim_of(engine: Engine, run_id: int, job_id: int | None = None) -> Claim:
    """The claim of a run this worker has just taken (its fencing token read back)."""
    with Session(engine) as session:
        token = session.scalar(select(Run.fencing_token).where(Run.id == run_id))
    return Claim(run_id=run_id, fencing_token=int(token or 0), job_id=job_id)


class LocalDispatch:
    """One machine's dispatch (SQLite): claims over the ``runs`` table; the runs of a worker whose
    process is gone from this machine are interrupted by another."""

    def __init__(
        self, *, engine: Engine, worker_name: str, labels: Collection[str], hardware: dict[str, Any], worker_pid: int
    ) -> None:
        self.engine, self.worker_name, self.labels = engine, worker_name, sorted(labels)
        self.hardware, self.worker_pid = hardware, worker_pid

    def open(self) -> None:
        return None

    def close(self) -> None:
        return None

    def beat(self, *, current_run_id: int | None) -> None:
        worker_store.renew_worker_heartbeat(engine=self.engine, name=self.worker_name, current_run_id=current_run_id)

    def claim(self, *, excluded_experiment_ids: Collection[int] = ()) -> Claim | None:
        run_id = store.claim_next_run(
            engine=self.engine,
            worker_name=self.worker_name,
            labels=self.labels,
            hardware=self.hardware,
            worker_pid=self.worker_pid,
            excluded_experiment_ids=excluded_experiment_ids,
        )
        return None if run_id is None else claim_of(self.engine, run_id)

    def finish(self, claim: Claim) -> None:
        return None

    def interrupt_lost_runs(self) -> list[int]:
        host = socket.gethostname()
        with Session(self.engine) as session:
            active = worker_store.active_runs_of_others(session=session, except_worker=self.worker_name)
            hosts = {
                name: record.host
                for name in {name for _, _, name, _ in active if name}
                if (record := worker_store.get_worker(session=session, name=name)) is not None
            }
        interrupted = []
        for run_id, status, name, pid in active:
            # One machine: a worker is lost when its process is gone (its pid is checked here,
            # on the host it registered from; a run claimed without a name is its process's own).
            if name is None or hosts.get(name) != host or pid is None or _process_alive(pid):
                continue
            reason = (
                f"worker {name!r} stopped (its process {pid} is gone) while this run was {status}; "
                f"interrupted by worker {self.worker_name!r}"
            )
            if worker_store.interrupt_lost_run(engine=self.engine, run_id=run_id, reason=reason):
                interrupted.append(run_id)
        return interrupted


def _process_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, dead but not yet reaped by its parent, does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
