"""Driving a long experiment without processes: the worker's loop (advance, then execute what is
queued) with the runner replaced by a stand-in that writes each run's outcome."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from db import store
from db.models import LongExperiment, LongExperimentState, Run, RunStatus
from lab.queue import long_experiments
from lab.specs.schema import ExperimentSpec, UntilDecided

START = datetime(2026, 12, 7, 10, 0)

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


def grid_spec(repeats: int = 2) -> ExperimentSpec:
    return ExperimentSpec.model_validate(
        {
            "name": "stub grid",
            "repeats": repeats,
            "base": {
                "backend": "external",
                "target_url": "http://127.0.0.1:9",
                "model": "stub",
                "max_tokens": 8,
                "load": {"vus": 1, "duration_s": 10},
            },
            "grid": {"load.vus": [1, 4]},
        }
    )


def create(engine: Engine, *, until: UntilDecided | None = None, repeats: int = 2) -> int:
    return long_experiments.create(
        engine=engine,
        kind=long_experiments.GRID,
        name="stub grid",
        specs={"stub grid": grid_spec(repeats)},
        until=until,
        allow_dirty=True,
    )


class Clock:
    """Runs 60 s each, back to back, from START (so budgets and wall times are exact)."""

    def __init__(self) -> None:
        self.now = START

    def finish(self, engine: Engine, run: Run, *, status: str = RunStatus.DONE, **figures: Any) -> None:
        started, self.now = self.now, self.now + timedelta(seconds=60)
        store.set_run_status(
            engine=engine, run_id=run.id, status=status, started_at=started, finished_at=self.now, **figures
        )
