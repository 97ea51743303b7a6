"""Data functions over the baselines table: one baseline per run configuration.

The caller computes the configuration and its key (``lab.specs.configuration``) and checks
that the runs are done; these functions store and read what they are given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session, selectinload

from db.engine import changed_rows
from db.models import Baseline, Run, RunStatus, utc_now


def set_baseline(
    *,
    session: Session,
    configuration_key: str,
    configuration: dict[str, Any],
    run_ids: Sequence[int],
    experiment_id: int | None = None,
    run_id: int | None = None,
) -> Baseline:
    """Make ``run_ids`` the baseline of the configuration (replacing any before). Commits."""
    row = session.get(Baseline, configuration_key)
    if row is None:
        row = Baseline(configuration_key=configuration_key)
        session.add(row)
    row.configuration, row.run_ids = configuration, sorted(int(run) for run in run_ids)
    row.experiment_id, row.run_id, row.marked_at = experiment_id, run_id, utc_now()
    session.commit()
    return row


def get_baseline(*, session: Session, configuration_key: str) -> Baseline | None:
    return session.get(Baseline, configuration_key)


def list_baselines(*, session: Session) -> list[Baseline]:
    """Every baseline, the newest marked first."""
    return list(session.scalars(select(Baseline).order_by(Baseline.marked_at.desc())))


def clear_baseline(*, session: Session, configuration_key: str) -> bool:
    """Remove the configuration's baseline; whether there was one. Commits."""
    removed = changed_rows(session, delete(Baseline).where(Baseline.configuration_key == configuration_key))
    session.commit()
    return bool(removed)


def done_runs_like(
    *, session: Session, backend: str, model: str, workload: str, max_tokens: int, limit: int = 5000
) -> list[Run]:
    """Done runs sharing the spec columns a configuration fixes (the caller compares the rest),
    oldest first: the candidates for runs of one configuration."""
    query = (
        select(Run)
        .options(selectinload(Run.experiment))
        .where(
            Run.status == RunStatus.DONE,
            Run.backend == backend,
            Run.model == model,
            Run.workload == workload,
            Run.max_tokens == max_tokens,
        )
        .order_by(Run.id.desc())
        .limit(limit)
    )
    return sorted(session.scalars(query), key=lambda run: run.id)
