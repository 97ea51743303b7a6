"""Run an experiment spec through the lab's own worker, as a user's run would go, for benchmarks."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session


def run_experiment(*, engine: Any, settings: Any, spec: Any) -> list[Any]:
    """Queue ``spec``, run each of its runs with a fresh worker, stop the services it started,
    and return the finished runs (detached ORM objects, in queue order)."""
    from db import store
    from lab.context import LabContext
    from lab.queue import experiments
    from lab.queue.worker import Worker

    with Session(engine) as session:
        run_ids = [run.id for run in experiments.enqueue_experiment(session=session, spec=spec).runs]
    worker = Worker(context=LabContext(settings=settings))
    try:
        for _ in run_ids:
            worker.run_one()
    finally:
        worker.services.stop_all()
    with Session(engine, expire_on_commit=False) as session:
        runs = [store.get_run(session=session, run_id=run_id) for run_id in run_ids]
        session.expunge_all()
    return runs
