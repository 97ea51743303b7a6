"""The shared queue in a few lines: queue one quick run, register a worker."""

from __future__ import annotations

from sqlalchemy.orm import Session

from db import worker_store
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
