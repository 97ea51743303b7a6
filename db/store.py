"""Data functions over the run store. Keyword-only arguments; the caller owns the session.

The queue is the ``runs`` table: ``enqueue_experiment`` adds queued rows and
``claim_next_run`` hands the oldest one to the worker, atomically.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, delete, func, or_, select, update
from sqlalchemy.orm import Session, selectinload

from db.models import Experiment, Run, RunSeries, RunStatus, ServiceRecord, utc_now


def enqueue_experiment(
    *,
    session: Session,
    name: str,
    preset: str | None,
    scale: str,
    spec: dict[str, Any],
    runs: Sequence[dict[str, Any]],
    tags: str = "",
) -> Experiment:
    """Store an experiment and queue its runs, one per ``runs`` item (the columns of a Run:
    ``cell_label``, ``repeat_index``, ``spec`` and the spec's denormalised columns). Commits.

    The values are taken as given: callers validate (``lab.experiments`` builds them from a
    validated ExperimentSpec).
    """
    experiment = Experiment(name=name, preset=preset, scale=scale, spec=spec)
    session.add(experiment)
    for columns in runs:
        experiment.runs.append(Run(tags=tags, **columns))
    session.commit()
    return experiment


def enqueue_run_again(*, session: Session, run_id: int) -> Run:
    """Queue a new run with exactly the spec of ``run_id`` (same experiment, cell and repeat). Commits."""
    original = session.get(Run, run_id)
    if original is None:
        raise LookupError(f"run {run_id} does not exist")
    run = Run(
        experiment_id=original.experiment_id,
        tags=original.tags,
        **{name: getattr(original, name) for name in Run.SPEC_COLUMNS},
    )
    session.add(run)
    session.commit()
    return run


def claim_next_run(*, engine: Engine, worker_pid: int) -> int | None:
    """Atomically move the oldest queued run to ``starting``; its id, or None if none."""
    with Session(engine) as session:
        while True:
            run_id = session.scalar(
                select(Run.id).where(Run.status == RunStatus.QUEUED).order_by(Run.id).limit(1)
            )
            if run_id is None:
                return None
            claimed = session.execute(
                update(Run)
                .where(Run.id == run_id, Run.status == RunStatus.QUEUED)
                .values(status=RunStatus.STARTING, started_at=utc_now(), worker_pid=worker_pid)
            ).rowcount
            session.commit()
            if claimed:
                return run_id


def set_run_status(*, engine: Engine, run_id: int, status: str, reason: str | None = None, **values: Any) -> None:
    """Write a run's status (and any other columns) in its own short transaction."""
    changes: dict[str, Any] = {"status": status, **values}
    if reason is not None:
        changes["status_reason"] = reason
    if status in RunStatus.FINAL:
        changes.setdefault("finished_at", utc_now())
    with Session(engine) as session:
        session.execute(update(Run).where(Run.id == run_id).values(**changes))
        session.commit()


def update_run(*, engine: Engine, run_id: int, **values: Any) -> None:
    """Write columns of one run in its own short transaction."""
    with Session(engine) as session:
        session.execute(update(Run).where(Run.id == run_id).values(**values))
        session.commit()


def save_run_series(
    *, engine: Engine, run_id: int, series: dict[str, Any], service_log_tails: dict[str, str] | None = None
) -> None:
    """Store (or replace) a run's per-second series and service log tails."""
    with Session(engine) as session:
        row = session.get(RunSeries, run_id)
        if row is None:
            session.add(RunSeries(run_id=run_id, series=series, service_log_tails=service_log_tails))
        else:
            row.series = series
            row.service_log_tails = service_log_tails
        session.commit()


def request_cancel(*, session: Session, run_id: int) -> str:
    """Cancel a run: a queued one at once, an active one through its worker. Returns the new state."""
    run = session.get(Run, run_id)
    if run is None:
        raise LookupError(f"run {run_id} does not exist")
    if run.status == RunStatus.QUEUED:
        run.status = RunStatus.CANCELLED
        run.status_reason = "cancelled before it started"
        run.finished_at = utc_now()
    elif run.status in RunStatus.ACTIVE:
        run.cancel_requested = True
    session.commit()
    return run.status


def is_cancel_requested(*, engine: Engine, run_id: int) -> bool:
    with Session(engine) as session:
        return bool(session.scalar(select(Run.cancel_requested).where(Run.id == run_id)))


def get_run(*, session: Session, run_id: int) -> Run | None:
    return session.get(Run, run_id, options=[selectinload(Run.experiment)])


def get_run_series(*, session: Session, run_id: int) -> RunSeries | None:
    return session.get(RunSeries, run_id)


def list_runs(
    *,
    session: Session,
    experiment_ids: Sequence[int] | None = None,
    run_ids: Sequence[int] | None = None,
    preset: str | None = None,
    backends: Sequence[str] | None = None,
    model_contains: str | None = None,
    statuses: Sequence[str] | None = None,
    tag: str | None = None,
    created_after: datetime | None = None,
    created_before: datetime | None = None,
    newest_first: bool = True,
    limit: int | None = None,
) -> list[Run]:
    """Runs matching every given filter."""
    query = select(Run).options(selectinload(Run.experiment))
    if experiment_ids:
        query = query.where(Run.experiment_id.in_(experiment_ids))
    if run_ids:
        query = query.where(Run.id.in_(run_ids))
    if preset:
        query = query.join(Experiment).where(Experiment.preset == preset)
    if backends:
        query = query.where(Run.backend.in_(backends))
    if model_contains:
        query = query.where(Run.model.contains(model_contains))
    if statuses:
        query = query.where(Run.status.in_(statuses))
    if tag:
        query = query.where(or_(Run.tags == tag, Run.tags.contains(tag)))
    if created_after:
        query = query.where(Run.created_at >= created_after)
    if created_before:
        query = query.where(Run.created_at <= created_before)
    query = query.order_by(Run.id.desc() if newest_first else Run.id)
    if limit:
        query = query.limit(limit)
    return list(session.scalars(query))


def list_experiments(*, session: Session, limit: int | None = None) -> list[Experiment]:
    query = select(Experiment).order_by(Experiment.id.desc())
    if limit:
        query = query.limit(limit)
    return list(session.scalars(query))


def queue_summary(*, session: Session) -> dict[str, int]:
    """Number of runs per status."""
    rows = session.execute(select(Run.status, func.count()).group_by(Run.status))
    return {status: count for status, count in rows}


def active_run(*, session: Session) -> Run | None:
    """The run the worker is executing now, if any."""
    return session.scalar(select(Run).where(Run.status.in_(RunStatus.ACTIVE)).order_by(Run.id).limit(1))


def set_run_notes(*, session: Session, run_id: int, tags: str | None = None, notes: str | None = None) -> None:
    run = session.get(Run, run_id)
    if run is None:
        raise LookupError(f"run {run_id} does not exist")
    if tags is not None:
        run.tags = ",".join(part.strip() for part in tags.split(",") if part.strip())[:500]
    if notes is not None:
        run.notes = notes[:20_000]
    session.commit()


def delete_runs(*, session: Session, run_ids: Iterable[int]) -> int:
    """Delete finished or queued runs (never an active one). Returns how many."""
    ids = list(session.scalars(select(Run.id).where(Run.id.in_(list(run_ids)), Run.status.not_in(RunStatus.ACTIVE))))
    session.execute(delete(RunSeries).where(RunSeries.run_id.in_(ids)))
    deleted = session.execute(delete(Run).where(Run.id.in_(ids))).rowcount
    session.commit()
    return int(deleted or 0)


def mark_orphaned_runs_interrupted(*, engine: Engine) -> list[int]:
    """Runs left active by a worker that is gone become ``interrupted``. Returns their ids.

    Only call while holding the worker lock: then no live worker owns an active run.
    """
    with Session(engine) as session:
        runs = session.scalars(select(Run).where(Run.status.in_(RunStatus.ACTIVE))).all()
        ids = [run.id for run in runs]
        for run in runs:
            run.status_reason = (
                f"the lab stopped while this run was {run.status}; what k6 wrote is kept in the run's folder"
            )
            run.status = RunStatus.INTERRUPTED
            run.finished_at = utc_now()
        session.commit()
    return ids


# Services ---------------------------------------------------------------------------------

def get_service_record(*, session: Session, name: str) -> ServiceRecord | None:
    return session.get(ServiceRecord, name)


def list_service_records(*, session: Session) -> list[ServiceRecord]:
    return list(session.scalars(select(ServiceRecord).order_by(ServiceRecord.name)))


def upsert_service_record(*, engine: Engine, name: str, **values: Any) -> None:
    with Session(engine) as session:
        record = session.get(ServiceRecord, name)
        if record is None:
            record = ServiceRecord(name=name, kind=values.get("kind", name))
            session.add(record)
        for key, value in values.items():
            setattr(record, key, value)
        session.commit()
