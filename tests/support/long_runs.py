"""Driving a long experiment without processes: the worker's loop (advance, then execute what is
queued) with the runner replaced by a stand-in that writes each run's outcome."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from db.models import LongExperiment, LongExperimentState, Run, RunStatus
from lab.queue import long_experiments

# Writes one claimed run's final state (and figures) as the runner would.
Outcome = Callable[[Engine, Run], None]


def drive(engine: Engine, long_id: int, outcome: Outcome, *, max_steps: int = 200) -> str:
    """Advance and execute until the long experiment ends; its final state."""
    for _ in range(max_steps):
        long_experiments.advance(engine, long_id)
        with Session(engine) as session:
            state = session.get_one(LongExperiment, long_id).state
            if state != LongExperimentState.RUNNING:
                return state
            queued = [
                run
                for experiment in long_experiments.experiments_of(session, long_id)
                for run in experiment.runs
                if run.status == RunStatus.QUEUED
            ]
        for run in queued:
            outcome(engine, run)
    raise AssertionError(f"long experiment #{long_id} did not end in {max_steps} steps")
