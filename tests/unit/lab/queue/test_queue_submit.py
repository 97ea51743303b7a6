"""Submitting to a shared queue: when the CLI only waits, what it prints about each run, and
that SQLite with no worker keeps executing the runs here (real SQLite, no process)."""

from __future__ import annotations

import io
from pathlib import Path

from sqlalchemy import update
from sqlalchemy.orm import Session

from db.models import Run, RunStatus
from lab.context import LabContext
from lab.queue.run_waiter import RunWaiter
from lab.queue.submit import SharedQueueWaiter, live_shared_workers, open_waiter
from lab.settings import Settings
from tests.support.queue import enqueue, register


def test_sqlite_is_never_a_shared_queue_so_nothing_changes(engine, tmp_path: Path) -> None:
    register(engine, "box-a")
    assert live_shared_workers(engine=engine, lease_s=60) == {}
    context = LabContext(settings=Settings(data_dir=tmp_path / "data"))
    with open_waiter(context, local=False, quiet=True) as waiter:
        assert isinstance(waiter, RunWaiter)


def _finish(engine, run_id: int, *, worker: str, status: str, reason: str | None = None) -> None:
    with Session(engine) as session:
        session.execute(
            update(Run).where(Run.id == run_id).values(worker_name=worker, status=status, status_reason=reason)
        )
        session.commit()


def test_the_waiter_names_the_worker_that_took_each_run_and_how_it_ended(engine) -> None:
    first, second = enqueue(engine) + enqueue(engine)
    _finish(engine, first, worker="gpu-box", status=RunStatus.DONE)
    _finish(engine, second, worker="cpu-box", status=RunStatus.FAILED, reason="k6 crashed\nstack")
    out = io.StringIO()
    SharedQueueWaiter(engine=engine, live_workers={"gpu-box": ["gpu"], "cpu-box": []}, poll_s=0.01, out=out).wait(
        [first, second]
    )
    lines = out.getvalue().splitlines()
    assert f"run #{first} (" in lines[0] and lines[0].endswith("taken by worker gpu-box")
    assert lines[1].endswith("on worker gpu-box: done")
    assert lines[2].endswith("taken by worker cpu-box")
    assert lines[3].endswith("on worker cpu-box: failed (k6 crashed)")
    with Session(engine) as session:  # the waiter executed nothing: the states are those the workers wrote
        assert [session.get_one(Run, i).status for i in (first, second)] == ["done", "failed"]


def test_a_run_no_live_worker_may_take_is_named_once(engine) -> None:
    [run_id] = enqueue(engine, requires=["gpu"])
    out = io.StringIO()
    waiter = SharedQueueWaiter(engine=engine, live_workers={"cpu-box": ["cpu"]}, out=out)
    with Session(engine) as session:
        run = session.get_one(Run, run_id)
        waiter._report(run)
        waiter._report(run)
    text = out.getvalue()
    assert text.count("no live worker may take it") == 1 and "labels gpu" in text and "--local" in text
