"""Data functions over the queue's workers: registration, the heartbeat the Workers page and
``lab run`` read, taking a lost worker's run, and the services each worker records.
Keyword-only arguments; the caller owns the session.

Which worker is lost is the dispatch's to say (lab.queue.dispatch: procrastinate's stalled jobs
on PostgreSQL, a dead process on one machine); :func:`interrupt_lost_run` then ends its run.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, func, select, update
from sqlalchemy.orm import Session

from db.engine import rows_changed
from db.models import Run, RunStatus, ServiceRecord, WorkerRecord, utc_now


def database_now(session: Session) -> datetime:
    """The database server's clock (PostgreSQL), so workers' own clocks need not agree."""
    if session.get_bind().dialect.name == "sqlite":
        return utc_now()  # one machine: its clock is the database's
    return session.execute(select(func.now())).scalar_one()


def get_worker(*, session: Session, name: str) -> WorkerRecord | None:
    return session.get(WorkerRecord, name)


def list_workers(*, session: Session) -> list[WorkerRecord]:
    return list(session.scalars(select(WorkerRecord).order_by(WorkerRecord.name)))


def register_worker(
    *, engine: Engine, name: str, host: str, pid: int, labels: Sequence[str], hardware: dict[str, Any]
) -> None:
    """Create or take over the worker row ``name``, alive from now. Commits."""
    with Session(engine) as session:
        now = database_now(session)
        record = session.get(WorkerRecord, name)
        if record is None:
            record = WorkerRecord(name=name)
            session.add(record)
        record.host, record.pid, record.labels, record.hardware = host, pid, sorted(labels), hardware
        record.state, record.current_run_id, record.started_at, record.heartbeat_at = "running", None, now, now
        session.commit()


def renew_worker_heartbeat(*, engine: Engine, name: str, current_run_id: int | None = None) -> None:
    """Say the worker is alive now (the database's clock)."""
    with Session(engine) as session:
        session.execute(
            update(WorkerRecord)
            .where(WorkerRecord.name == name)
            .values(heartbeat_at=database_now(session), current_run_id=current_run_id, state="running")
        )
        session.commit()


def mark_worker_stopped(*, engine: Engine, name: str) -> None:
    with Session(engine) as session:
        session.execute(
            update(WorkerRecord).where(WorkerRecord.name == name).values(state="stopped", current_run_id=None)
        )
        session.commit()


def heartbeat_age_s(*, session: Session, record: WorkerRecord) -> float | None:
    """Seconds since ``record`` last renewed its heartbeat (None if it never did)."""
    if record.heartbeat_at is None:
        return None
    now, beat = database_now(session), record.heartbeat_at
    if beat.tzinfo is None:  # SQLite keeps naive UTC
        now = now.replace(tzinfo=None)
    return max(0.0, (now - beat).total_seconds())


def interrupt_lost_run(*, engine: Engine, run_id: int, reason: str, job_id: int | None = None) -> bool:
    """End ``run_id`` ``interrupted`` with ``reason`` if it is still active (and still carried by
    ``job_id`` when given), raising its fencing token so its lost worker's late writes are refused.
    The run ends at its worker's last heartbeat when known. True when this call ended it."""
    with Session(engine) as session:
        condition = [Run.id == run_id, Run.status.in_(RunStatus.ACTIVE)]
        if job_id is not None:
            condition.append(Run.job_id == job_id)
        worker_name = session.scalar(select(Run.worker_name).where(*condition))
        record = session.get(WorkerRecord, worker_name) if worker_name else None
        changed = rows_changed(
            session,
            update(Run)
            .where(*condition)
            .values(
                status=RunStatus.INTERRUPTED,
                status_reason=reason,
                # Its worker's last heartbeat: the stall timeout's wait is not time the run ran.
                finished_at=(record.heartbeat_at if record is not None else None) or utc_now(),
                progress=None,
                fencing_token=Run.fencing_token + 1,
            ),
        )
        if changed and worker_name:
            session.execute(
                update(WorkerRecord)
                .where(WorkerRecord.name == worker_name, WorkerRecord.current_run_id == run_id)
                .values(current_run_id=None)
            )
        session.commit()
    return bool(changed)


def active_runs_of_others(*, session: Session, except_worker: str) -> list[tuple[int, str, str | None, int | None]]:
    """The active runs not claimed by ``except_worker``: (id, status, worker name, worker pid)."""
    rows = session.execute(
        select(Run.id, Run.status, Run.worker_name, Run.worker_pid).where(
            Run.status.in_(RunStatus.ACTIVE), (Run.worker_name.is_(None)) | (Run.worker_name != except_worker)
        )
    ).all()
    return [(run_id, status, name, pid) for run_id, status, name, pid in rows]


# Services ---------------------------------------------------------------------------------
# Each worker starts services on its own machine: a record is keyed by (worker, name).


def get_service_record(*, session: Session, name: str, worker: str) -> ServiceRecord | None:
    return session.get(ServiceRecord, (worker, name))


def list_service_records(*, session: Session, worker: str | None = None) -> list[ServiceRecord]:
    """The service records of ``worker`` (of every worker when None)."""
    query = select(ServiceRecord).order_by(ServiceRecord.worker, ServiceRecord.name)
    if worker is not None:
        query = query.where(ServiceRecord.worker == worker)
    return list(session.scalars(query))


def upsert_service_record(*, engine: Engine, name: str, worker: str, **values: Any) -> None:
    with Session(engine) as session:
        record = session.get(ServiceRecord, (worker, name))
        if record is None:
            record = ServiceRecord(worker=worker, name=name, kind=values.get("kind", name))
            session.add(record)
        for key, value in values.items():
            setattr(record, key, value)
        session.commit()
