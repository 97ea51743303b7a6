"""Which worker may take a long experiment's runs: one experiment, one machine (the record of the worker
that took its first run, lab.measurement.hardware.machine_identity), one commit of the lab unless its
plan allows a change (then the report names both), and one set of resolved backend settings (a
backend that resolves another dtype than at its first run ends that run ``interrupted`` and its worker
takes no more of the experiment).

The worker asks :func:`closed_experiments` before each claim and :func:`check_backend_settings` once a
run's backend is up (lab.run.runner).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session

from db import store
from db.models import LongExperiment, LongExperimentState, Run, RunStatus
from lab.measurement.hardware import machine_differences
from lab.queue.long_experiments import experiments_of


def _set_state(session: Session, long_id: int, state: str, reason: str) -> None:
    session.execute(
        update(LongExperiment)
        .where(LongExperiment.id == long_id, LongExperiment.state == LongExperimentState.RUNNING)
        .values(state=state, state_reason=reason, step=LongExperiment.step + 1)
    )


def _has_runs_for(session: Session, experiment_ids: Collection[int], worker_name: str, labels: Collection[str]) -> bool:
    queued = session.execute(
        select(Run.requires_labels, Run.pinned_worker).where(
            Run.experiment_id.in_(experiment_ids), Run.status == RunStatus.QUEUED
        )
    ).all()
    return any(
        store.run_fits_worker(requires_labels=requires, pinned_worker=pinned, worker_name=worker_name, labels=labels)
        for requires, pinned in queued
    )


def closed_experiments(
    engine: Engine, *, worker_name: str, labels: Collection[str], identity: dict[str, Any], commit: str | None
) -> set[int]:
    """The experiments this worker must not take runs of: those of paused long experiments, of ones
    recorded on another machine or refusing this worker, and of ones whose runs ran another commit
    of the lab (which this call pauses, unless their plan allows it). A long experiment with no
    machine yet takes this worker's record and commit when this worker may take one of its queued
    runs: the code that runs it, whatever the checkout held when it was created."""
    closed: set[int] = set()
    with Session(engine) as session:
        unfinished = session.scalars(
            select(LongExperiment).where(LongExperiment.state.not_in(LongExperimentState.FINAL))
        ).all()
        for long_experiment in unfinished:
            ids = {experiment.id for experiment in experiments_of(session, long_experiment.id)}
            if long_experiment.state != LongExperimentState.RUNNING or worker_name in (
                long_experiment.refused_workers or {}
            ):
                closed |= ids
                continue
            if long_experiment.machine is None:
                if _has_runs_for(session, ids, worker_name, labels):
                    session.execute(
                        update(LongExperiment)
                        .where(LongExperiment.id == long_experiment.id, LongExperiment.machine.is_(None))
                        # Its first run's worker fixes its machine and its commit: the code that runs it.
                        .values(machine=identity, machine_worker=worker_name, lab_commit=commit)
                    )
                    session.flush()
                    session.refresh(long_experiment)
                if long_experiment.machine is None:
                    continue
            if commit != long_experiment.lab_commit and not long_experiment.allow_commit_change:
                if _has_runs_for(session, ids, worker_name, labels):
                    _set_state(
                        session,
                        long_experiment.id,
                        LongExperimentState.PAUSED,
                        f"the lab's commit changed from {long_experiment.lab_commit} to {commit} between sittings: "
                        f"lab reproduce --resume {long_experiment.id} --allow-commit-change goes on (the report "
                        "then names both commits)",
                    )
                closed |= ids
                continue
            if machine_differences(long_experiment.machine, identity):
                closed |= ids
        session.commit()
    return closed


def check_backend_settings(engine: Engine, run_id: int, worker_name: str) -> str | None:
    """After a run's backend started: None when its resolved settings are those of its long
    experiment's first run of that backend (or it is the first, whose settings are then kept);
    otherwise why the run cannot go on, and this worker takes no more of the experiment."""
    with Session(engine) as session:
        run = session.get(Run, run_id)
        experiment = run.experiment if run is not None else None
        if run is None or experiment is None or experiment.long_experiment_id is None:
            return None
        long_experiment = session.get(LongExperiment, experiment.long_experiment_id)
        if long_experiment is None or not run.backend_settings:
            return None
        backend = str((run.spec or {}).get("backend") or run.backend)
        known = dict(long_experiment.backend_settings or {})
        first = known.get(backend)
        if first is None:
            long_experiment.backend_settings = {**known, backend: run.backend_settings}
            session.commit()
            return None
        if first == run.backend_settings:
            return None
        reason = (
            f"{backend} resolved {run.backend_settings} on worker {worker_name}, but this experiment's first "
            f"{backend} run resolved {first}: its runs would measure other settings, so this worker takes no "
            "more of it"
        )
        long_experiment.refused_workers = {**(long_experiment.refused_workers or {}), worker_name: reason}
        session.commit()
        return reason
