"""Data functions over the shared queue's workers: registration, heartbeat, the lease after
which another worker interrupts a lost one's runs, the claim log, and the services each
worker records. Keyword-only arguments; the caller owns the session.

Workers say they are alive in the ``workers`` table; the runs of one whose heartbeat is older
than the lease are interrupted by any other (``interrupt_runs_of_lost_workers``). Claiming a
run is the queue's (:func:`db.store.claim_next_run`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, func, or_, select, update
from sqlalchemy.orm import Session

from db.engine import rows_changed
from db.models import Run, RunClaim, RunStatus, ServiceRecord, WorkerRecord, utc_now


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


def interrupt_runs_of_lost_workers(*, engine: Engine, lease_s: float, except_worker: str) -> list[int]:
    """Active runs of another worker whose heartbeat is older than ``lease_s`` (or of a worker
    that never had a name or a row) become ``interrupted``, the reason naming that worker."""
    with Session(engine) as session:
        cutoff = database_now(session) - timedelta(seconds=lease_s)
        alive = select(WorkerRecord.name).where(WorkerRecord.heartbeat_at >= cutoff, WorkerRecord.state == "running")
        last_beat = dict(session.execute(select(WorkerRecord.name, WorkerRecord.heartbeat_at)).all())
        orphans = session.execute(
            select(Run.id, Run.status, Run.worker_name)
            .where(Run.status.in_(RunStatus.ACTIVE))
            .where(or_(Run.worker_name.is_(None), Run.worker_name.not_in(alive)))
            .where(or_(Run.worker_name.is_(None), Run.worker_name != except_worker))
        ).all()
        interrupted = []
        for run_id, status, worker_name in orphans:
            who = f"worker {worker_name!r}" if worker_name else "the worker that claimed it"
            reason = (
                f"{who} stopped renewing its heartbeat (lease {lease_s:g} s) while this run was {status}; "
                f"interrupted by worker {except_worker!r}"
            )
            # Conditional: another worker may have interrupted it, or its owner finished it, meanwhile.
            changed = rows_changed(
                session,
                update(Run)
                .where(
                    Run.id == run_id,
                    Run.status.in_(RunStatus.ACTIVE),
                    Run.worker_name.is_(None) if worker_name is None else Run.worker_name == worker_name,
                )
                .values(
                    status=RunStatus.INTERRUPTED,
                    status_reason=reason,
                    # Its worker's last heartbeat: the lease's wait is not time the run ran.
                    finished_at=(last_beat.get(worker_name) if worker_name else None) or utc_now(),
                    progress=None,
                ),
            )
            if changed:
                interrupted.append(run_id)
                if worker_name:
                    session.execute(
                        update(WorkerRecord)
                        .where(WorkerRecord.name == worker_name, WorkerRecord.current_run_id == run_id)
                        .values(current_run_id=None)
                    )
        session.commit()
    return interrupted


def list_run_claims(*, session: Session) -> list[RunClaim]:
    return list(session.scalars(select(RunClaim).order_by(RunClaim.id)))


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
