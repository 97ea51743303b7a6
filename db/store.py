"""Data functions over the run store. Keyword-only arguments; the caller owns the session.

The queue's source of truth is the ``runs`` table: ``enqueue_experiment`` adds queued rows. On
SQLite (one machine) ``claim_next_run`` hands the next one a worker may take to it; on PostgreSQL
a procrastinate job carries each queued run to a worker (lab.queue.dispatch). Either way a claim
raises the run's ``fencing_token``, and a write of its outcome that carries an older token is
refused (``RunFenced``): a worker that lost its run cannot overwrite it.
Workers and their services: :mod:`db.worker_store`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, delete, func, or_, select, update
from sqlalchemy.orm import Session, selectinload

from db.engine import rows_changed
from db.models import (
    UNKNOWN_LAUNCHER,
    Experiment,
    Run,
    RunAudit,
    RunNote,
    RunRequests,
    RunSeries,
    RunStatus,
    WorkerRecord,
    utc_now,
)


def enqueue_experiment(
    *,
    session: Session,
    name: str,
    preset: str | None,
    scale: str,
    spec: dict[str, Any],
    runs: Sequence[dict[str, Any]],
    tags: str = "",
    frozen_rules: dict[str, Any] | None = None,
    launched_by: str = UNKNOWN_LAUNCHER,
) -> Experiment:
    """Store an experiment and queue its runs, one per ``runs`` item (the columns of a Run:
    ``cell_label``, ``repeat_index``, ``spec`` and the spec's denormalised columns). Commits.

    The values are taken as given: callers validate (``lab.queue.experiments`` builds them from a
    validated ExperimentSpec).
    """
    experiment = Experiment(
        name=name, preset=preset, scale=scale, spec=spec, frozen_rules=frozen_rules, launched_by=launched_by
    )
    session.add(experiment)
    for columns in runs:
        experiment.runs.append(Run(tags=tags, launched_by=launched_by, **columns))
    session.commit()
    return experiment


def enqueue_run_again(*, session: Session, run_id: int, launched_by: str = UNKNOWN_LAUNCHER) -> Run:
    """Queue a new run with exactly the spec of ``run_id`` (same experiment, cell and repeat),
    launched by ``launched_by``. Commits."""
    original = session.get(Run, run_id)
    if original is None:
        raise LookupError(f"run {run_id} does not exist")
    run = Run(
        experiment_id=original.experiment_id,
        tags=original.tags,
        launched_by=launched_by,
        **{name: getattr(original, name) for name in Run.SPEC_COLUMNS},
    )
    session.add(run)
    session.commit()
    return run


class RunFenced(RuntimeError):
    """The run is no longer this worker's: it was taken from it (its worker was declared lost)."""


def run_fits_worker(
    *,
    requires_labels: Collection[str] | None,
    pinned_worker: str | None,
    worker_name: str | None,
    labels: Collection[str],
) -> bool:
    """True when a worker named ``worker_name`` with ``labels`` may execute the run."""
    return (pinned_worker is None or pinned_worker == worker_name) and set(requires_labels or ()) <= set(labels)


def _eligible_queued_runs(
    session: Session, *, worker_name: str | None, labels: Collection[str], excluded_experiment_ids: Collection[int] = ()
) -> list[int]:
    """Every queued run this worker may take, in queue order (priority, then id): labels are
    checked in Python (portable JSON), over all queued rows so none starves behind others."""
    query = select(Run.id, Run.requires_labels, Run.pinned_worker).where(Run.status == RunStatus.QUEUED)
    if excluded_experiment_ids:
        query = query.where(or_(Run.experiment_id.is_(None), Run.experiment_id.not_in(sorted(excluded_experiment_ids))))
    candidates = session.execute(query.order_by(Run.priority.desc(), Run.id)).all()
    return [
        run_id
        for run_id, requires, pinned in candidates
        if run_fits_worker(requires_labels=requires, pinned_worker=pinned, worker_name=worker_name, labels=labels)
    ]


def take_run(
    session: Session,
    *,
    run_id: int,
    worker_name: str | None,
    hardware: dict[str, Any] | None,
    worker_pid: int | None,
    job_id: int | None = None,
) -> int | None:
    """Move ``run_id`` from queued to ``starting`` for this worker, if it is still queued (and
    carried by ``job_id`` when given), raising its fencing token; the worker's current run is set.
    The claim's fencing token; None when another worker took it first, or it was cancelled or
    deleted meanwhile."""
    condition = [Run.id == run_id, Run.status == RunStatus.QUEUED]
    if job_id is not None:
        condition.append(Run.job_id == job_id)
    token = session.scalar(
        update(Run)
        .where(*condition)
        .values(
            status=RunStatus.STARTING,
            started_at=utc_now(),
            worker_pid=worker_pid,
            worker_name=worker_name,
            worker_hardware=hardware,
            fencing_token=Run.fencing_token + 1,
        )
        .returning(Run.fencing_token)
    )
    if token is None:
        return None
    if worker_name:
        session.execute(update(WorkerRecord).where(WorkerRecord.name == worker_name).values(current_run_id=run_id))
    return int(token)


def claim_next_run(
    *,
    engine: Engine,
    worker_name: str | None = None,
    labels: Collection[str] = (),
    hardware: dict[str, Any] | None = None,
    worker_pid: int | None = None,
    excluded_experiment_ids: Collection[int] = (),
) -> int | None:
    """Atomically move the first queued run this worker may take (highest priority, then oldest)
    to ``starting``; its id, or None. ``excluded_experiment_ids``: experiments this worker must not
    take runs of (another machine's). The local dispatch's claim (SQLite, one machine: one writer
    at a time, and the conditional update makes it exclusive); PostgreSQL's is procrastinate's.
    """
    with Session(engine) as session:
        while True:
            eligible = _eligible_queued_runs(
                session, worker_name=worker_name, labels=labels, excluded_experiment_ids=excluded_experiment_ids
            )
            if not eligible:
                session.rollback()
                return None
            run_id = session.scalar(
                select(Run.id)
                .where(Run.id.in_(eligible), Run.status == RunStatus.QUEUED)
                .order_by(Run.priority.desc(), Run.id)
                .limit(1)
                .with_for_update(skip_locked=True)
            )
            if run_id is None:  # all taken or being taken by others right now
                session.rollback()
                return None
            token = take_run(session, run_id=run_id, worker_name=worker_name, hardware=hardware, worker_pid=worker_pid)
            session.commit()
            if token is not None:
                return run_id


def _write_run(session: Session, run_id: int, fencing_token: int | None, values: dict[str, Any]) -> None:
    """Update one run; with ``fencing_token``, only while the run still carries it (else RunFenced)."""
    condition = [Run.id == run_id]
    if fencing_token is not None:
        condition.append(Run.fencing_token == fencing_token)
    changed = rows_changed(session, update(Run).where(*condition).values(**values))
    if not changed and fencing_token is not None and session.scalar(select(Run.id).where(Run.id == run_id)):
        session.rollback()
        raise RunFenced(f"run {run_id} was taken from this worker (its claim {fencing_token} is no longer current)")


def set_run_status(
    *,
    engine: Engine,
    run_id: int,
    status: str,
    reason: str | None = None,
    fencing_token: int | None = None,
    **values: Any,
) -> None:
    """Write a run's status (and any other columns) in its own short transaction; with
    ``fencing_token``, only while the run is still the claim's (else RunFenced)."""
    changes: dict[str, Any] = {"status": status, **values}
    if reason is not None:
        changes["status_reason"] = reason
    if status in RunStatus.FINAL:
        changes.setdefault("finished_at", utc_now())
    with Session(engine) as session:
        _write_run(session, run_id, fencing_token, changes)
        session.commit()


def update_run(*, engine: Engine, run_id: int, fencing_token: int | None = None, **values: Any) -> None:
    """Write columns of one run in its own short transaction (fenced like ``set_run_status``)."""
    with Session(engine) as session:
        _write_run(session, run_id, fencing_token, values)
        session.commit()


def check_fence(*, engine: Engine, run_id: int, fencing_token: int | None) -> None:
    """Raise RunFenced when ``run_id`` no longer carries ``fencing_token`` (None: no check)."""
    if fencing_token is None:
        return
    with Session(engine) as session:
        current = session.scalar(select(Run.fencing_token).where(Run.id == run_id))
    if current is not None and current != fencing_token:
        raise RunFenced(f"run {run_id} was taken from this worker (its claim {fencing_token} is no longer current)")


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


def save_run_requests(*, engine: Engine, run_id: int, **values: Any) -> None:
    """Store (or replace) a run's per-request figures (the columns of ``RunRequests``)."""
    with Session(engine) as session:
        row = session.get(RunRequests, run_id)
        if row is None:
            session.add(RunRequests(run_id=run_id, **values))
        else:
            for name, value in values.items():
                setattr(row, name, value)
        session.commit()


def get_run_requests(*, session: Session, run_id: int) -> RunRequests | None:
    return session.get(RunRequests, run_id)


def add_experiment_runs(
    *, session: Session, experiment_id: int, runs: Sequence[dict[str, Any]], tags: str = ""
) -> list[int]:
    """Queue more runs in an existing experiment (a capacity search adds its probes one by one),
    launched by whoever launched the experiment. Commits."""
    launched_by = session.scalar(select(Experiment.launched_by).where(Experiment.id == experiment_id))
    rows = [
        Run(experiment_id=experiment_id, tags=tags, launched_by=launched_by or UNKNOWN_LAUNCHER, **columns)
        for columns in runs
    ]
    session.add_all(rows)
    session.commit()
    return [row.id for row in rows]


def get_experiment(*, session: Session, experiment_id: int) -> Experiment | None:
    return session.get(Experiment, experiment_id)


def set_experiment_capacity(*, engine: Engine | Connection, experiment_id: int, capacity: dict[str, Any]) -> None:
    """Write a capacity search's state (plan, probes, results) in its own short transaction
    (``engine``: an engine, or the connection a caller's session is bound to)."""
    with Session(engine) as session:
        session.execute(update(Experiment).where(Experiment.id == experiment_id).values(capacity=capacity))
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


def is_cancel_requested(*, engine: Engine, run_id: int, fencing_token: int | None = None) -> bool:
    """Whether the user asked to cancel the run; raises RunFenced when the run is no longer the
    claim's of ``fencing_token`` (checked as often as a cancel: about once a second)."""
    with Session(engine) as session:
        row = session.execute(select(Run.cancel_requested, Run.fencing_token).where(Run.id == run_id)).first()
    if row is not None and fencing_token is not None and row.fencing_token != fencing_token:
        raise RunFenced(f"run {run_id} was taken from this worker (its claim {fencing_token} is no longer current)")
    return bool(row and row.cancel_requested)


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
    worker_name: str | None = None,
    launched_by: str | None = None,
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
    if worker_name:
        query = query.where(Run.worker_name == worker_name)
    if launched_by:
        query = query.where(Run.launched_by == launched_by)
    if created_after:
        query = query.where(Run.created_at >= created_after)
    if created_before:
        query = query.where(Run.created_at <= created_before)
    query = query.order_by(Run.id.desc() if newest_first else Run.id)
    if limit:
        query = query.limit(limit)
    return list(session.scalars(query))


def run_worker_names(*, session: Session) -> list[str]:
    """The names of the workers that claimed runs, for filters."""
    return list(
        session.scalars(
            select(Run.worker_name).where(Run.worker_name.is_not(None)).distinct().order_by(Run.worker_name)
        )
    )


def run_launchers(*, session: Session) -> list[str]:
    """Everyone who launched a run, for the "launched by" filters."""
    return list(session.scalars(select(Run.launched_by).distinct().order_by(Run.launched_by)))


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


def record_run_action(*, session: Session, run_id: int, action: str, actor: str, detail: str | None = None) -> None:
    """Add one line to the audit table (committed with the caller's session)."""
    session.add(RunAudit(run_id=run_id, action=action, actor=actor, detail=detail))


def list_run_actions(*, session: Session, run_id: int) -> list[RunAudit]:
    """A run's audit trail, oldest first."""
    return list(session.scalars(select(RunAudit).where(RunAudit.run_id == run_id).order_by(RunAudit.id)))


def add_run_note(*, session: Session, run_id: int, author: str, text: str) -> RunNote:
    """Append a note to a run's thread (at most 20,000 characters). Commits."""
    if session.get(Run, run_id) is None:
        raise LookupError(f"run {run_id} does not exist")
    note = RunNote(run_id=run_id, author=author, text=text[:20_000])
    session.add(note)
    session.commit()
    return note


def list_run_notes(*, session: Session, run_id: int) -> list[RunNote]:
    """A run's notes thread, oldest first."""
    return list(session.scalars(select(RunNote).where(RunNote.run_id == run_id).order_by(RunNote.id)))


def delete_runs(*, session: Session, run_ids: Iterable[int]) -> list[int]:
    """Delete finished or queued runs (never an active one). Returns the ids deleted."""
    ids = list(session.scalars(select(Run.id).where(Run.id.in_(list(run_ids)), Run.status.not_in(RunStatus.ACTIVE))))
    session.execute(delete(RunSeries).where(RunSeries.run_id.in_(ids)))
    session.execute(delete(RunRequests).where(RunRequests.run_id.in_(ids)))
    session.execute(delete(RunNote).where(RunNote.run_id.in_(ids)))
    session.execute(delete(Run).where(Run.id.in_(ids)))
    session.commit()
    return ids


def mark_orphaned_runs_interrupted(
    *, engine: Engine, worker_name: str | None = None, stopped_at: datetime | None = None
) -> list[int]:
    """Runs left active by ``worker_name`` (restarted, so its old process is gone) become
    ``interrupted``. Returns their ids. Other workers' runs are left to their lease.
    ``stopped_at``: when the old process was last known alive (its last heartbeat), taken as the
    runs' end so the time the lab was down is not counted as time they ran.

    Only call while holding the worker lock and the name: then that worker runs nothing.
    """
    with Session(engine) as session:
        query = select(Run).where(Run.status.in_(RunStatus.ACTIVE))
        query = query.where(Run.worker_name.is_(None) if worker_name is None else Run.worker_name == worker_name)
        runs = session.scalars(query).all()
        ids = [run.id for run in runs]
        for run in runs:
            run.status_reason = (
                f"the lab stopped while this run was {run.status}; what k6 wrote is kept in the run's folder"
            )
            run.status = RunStatus.INTERRUPTED
            run.finished_at = _last_alive(run.started_at, stopped_at)
        session.commit()
    return ids


def _last_alive(started_at: datetime | None, stopped_at: datetime | None) -> datetime:
    """When a run cut by a dead process ended: its process's last sign of life, never before its start."""
    if stopped_at is None:
        return utc_now()
    if started_at is not None:
        if started_at.tzinfo is None and stopped_at.tzinfo is not None:
            stopped_at = stopped_at.replace(tzinfo=None)
        elif started_at.tzinfo is not None and stopped_at.tzinfo is None:
            stopped_at = stopped_at.replace(tzinfo=started_at.tzinfo)
        return max(started_at, stopped_at)
    return stopped_at
