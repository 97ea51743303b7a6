"""The shared queue in a few lines: queue one quick run, register a worker, finish a run as done."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from db import store, worker_store
from db.models import RunStatus
from lab.queue import experiments
from lab.specs.schema import load_preset

HARDWARE = {"cpu_model": "Xeon", "cpu_cores": 2, "memory_gib": 8.0, "gpus": [], "lab_version": "test"}


def enqueue(engine, **overrides) -> list[int]:
    spec = load_preset(
        "seed-exp1",
        quick=True,
        overrides=[("grid.load.vus", [1]), ("grid.backend", ["naive"]), ("repeats", 1), *overrides.items()],
    )
    with Session(engine) as session:
        return [run.id for run in experiments.enqueue_experiment(session=session, spec=spec).runs]


def register(engine, name: str, labels: tuple[str, ...] = ()) -> None:
    worker_store.register_worker(engine=engine, name=name, host="box", pid=1, labels=list(labels), hardware=HARDWARE)


def finish_run(engine, run_id: int, **figures) -> None:
    """Mark ``run_id`` done with these figures, 90 s after it started (stored history)."""
    start = datetime(2026, 12, 3, 10, 0)
    store.set_run_status(
        engine=engine,
        run_id=run_id,
        status=RunStatus.DONE,
        started_at=start,
        finished_at=start + timedelta(seconds=90),
        **figures,
    )
