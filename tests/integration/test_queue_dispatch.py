"""The queue's behaviour, the same tests on both dispatches (lab.queue.dispatch): SQLite's local one
and PostgreSQL's procrastinate. Each run claimed once by concurrent workers; labels and pinning;
the order (priority, then age, so a single run outranks a long experiment's remaining rounds);
a run taken from a lost worker is fenced; and, with real ``lab worker`` processes whose runs a stub
executes (tests.support.stub_worker): a cancel from another process, a SIGTERM, a SIGKILL.

Needs PostgreSQL for its ``postgres`` cases (see tests/integration/conftest.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session

from db import store
from db.engine import make_engine
from db.migrations import upgrade
from db.models import Run, RunStatus
from lab.queue import long_experiments
from lab.queue.dispatch import Claim, Dispatch
from lab.queue.worker import open_dispatch
from lab.settings import Settings
from lab.specs.schema import ExperimentSpec
from services.processes import PROJECT_ROOT
from tests.support.integration_workers import HEARTBEAT_S, LEASE_S, WorkerProcess, registered, wait_until
from tests.support.long_runs import grid_spec
from tests.support.queue import HARDWARE, enqueue, register

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("postgres")]


@pytest.fixture(params=["sqlite", "postgres"])
def queue_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The database URL of a fresh lab database on each dispatch's database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'lab.db'}"
    url: str = request.getfixturevalue("postgres_database_url")
    return url


@pytest.fixture()
def queue_engine(queue_url: str) -> Iterator[Engine]:
    engine = make_engine(queue_url)
    upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture()
def dispatches(queue_engine: Engine) -> Iterator[Callable[..., Dispatch]]:
    """Opens a dispatch for a worker (name, labels), registered; closed afterwards."""
    opened: list[Dispatch] = []
    settings = Settings(worker_lease_s=LEASE_S)

    def open_one(name: str, labels: tuple[str, ...] = ()) -> Dispatch:
        register(queue_engine, name, labels)
        dispatch = open_dispatch(
            engine=queue_engine, settings=settings, worker_name=name, labels=labels, hardware=HARDWARE, pid=os.getpid()
        )
        dispatch.open()
        opened.append(dispatch)
        return dispatch

    yield open_one
    for dispatch in opened:
        dispatch.close()


def finish(engine: Engine, dispatch: Dispatch, claim: Claim) -> None:
    store.set_run_status(engine=engine, run_id=claim.run_id, status=RunStatus.DONE, fencing_token=claim.fencing_token)
    dispatch.finish(claim)


def statuses(engine: Engine, run_ids: list[int]) -> dict[int, str]:
    with Session(engine) as session:
        return dict(session.execute(select(Run.id, Run.status).where(Run.id.in_(run_ids))).all())


def test_concurrent_workers_claim_each_run_exactly_once(queue_engine: Engine, dispatches) -> None:
    workers = [dispatches(f"box-{index}") for index in range(3)]
    run_ids = enqueue(queue_engine, repeats=30)
    claimed: list[tuple[str, int]] = []
    lock = threading.Lock()

    def serve(name: str, dispatch: Dispatch) -> None:
        while (claim := dispatch.claim()) is not None:
            with lock:
                claimed.append((name, claim.run_id))
            finish(queue_engine, dispatch, claim)

    threads = [threading.Thread(target=serve, args=(f"box-{i}", d)) for i, d in enumerate(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert Counter(run_id for _, run_id in claimed) == Counter(run_ids)  # every run, once
    assert set(statuses(queue_engine, run_ids).values()) == {RunStatus.DONE}
    with Session(queue_engine) as session:  # one claim each: the token went up once
        assert set(session.scalars(select(Run.fencing_token).where(Run.id.in_(run_ids)))) == {1}


def test_runs_go_only_to_workers_with_the_labels_and_the_name_they_ask_for(queue_engine: Engine, dispatches) -> None:
    [gpu_run] = enqueue(queue_engine, requires=["gpu"])
    [pinned_run] = enqueue(queue_engine, worker="box-b")
    [any_run] = enqueue(queue_engine)
    box_a, box_b = dispatches("box-a", ("cpu",)), dispatches("box-b", ("cpu",))
    box_c = dispatches("box-c", ("gpu", "h100"))
    # A cpu worker skips the gpu run and the run pinned elsewhere, and takes the free one.
    claim = box_a.claim()
    assert claim is not None and claim.run_id == any_run
    assert box_a.claim() is None
    claim_b = box_b.claim()
    assert claim_b is not None and claim_b.run_id == pinned_run
    claim_c = box_c.claim()
    assert claim_c is not None and claim_c.run_id == gpu_run
    with Session(queue_engine) as session:
        run = session.get_one(Run, gpu_run)
        assert (run.worker_name, run.worker_hardware, run.requires_labels) == ("box-c", HARDWARE, ["gpu"])


def test_a_single_run_outranks_a_long_experiments_remaining_rounds(queue_engine: Engine, dispatches) -> None:
    spec = ExperimentSpec.model_validate(
        {**grid_spec(repeats=1).model_dump(mode="json"), "grid": {"load.vus": list(range(1, 21))}}
    )
    long_experiments.create(
        engine=queue_engine, kind=long_experiments.GRID, name="long", specs={"long": spec}, until=None, allow_dirty=True
    )
    with Session(queue_engine) as session:
        long_runs = list(session.scalars(select(Run.id).where(Run.status == RunStatus.QUEUED).order_by(Run.id)))
    assert len(long_runs) == 20
    worker = dispatches("box-a")
    first = worker.claim()
    assert first is not None and first.run_id == long_runs[0]  # the long experiment is under way
    [single] = enqueue(queue_engine)  # queued behind 19 of its runs
    finish(queue_engine, worker, first)
    claim = worker.claim()
    assert claim is not None and claim.run_id == single  # it starts next
    finish(queue_engine, worker, claim)
    # Then the long experiment's runs, in their drawn order.
    order = []
    while (claim := worker.claim()) is not None:
        order.append(claim.run_id)
        finish(queue_engine, worker, claim)
    assert order == long_runs[1:]


def test_a_run_taken_from_its_worker_refuses_the_workers_late_writes(queue_engine: Engine, dispatches) -> None:
    from db import worker_store

    [run_id] = enqueue(queue_engine)
    claim = dispatches("box-a").claim()
    assert claim is not None
    assert worker_store.interrupt_lost_run(engine=queue_engine, run_id=run_id, reason="lost")
    with pytest.raises(store.RunFenced):
        store.set_run_status(
            engine=queue_engine, run_id=run_id, status=RunStatus.DONE, fencing_token=claim.fencing_token
        )
    with pytest.raises(store.RunFenced):
        store.is_cancel_requested(engine=queue_engine, run_id=run_id, fencing_token=claim.fencing_token)
    assert statuses(queue_engine, [run_id]) == {run_id: RunStatus.INTERRUPTED}


# -- real worker processes (a stub executes their runs) --------------------------------------------


@pytest.fixture()
def stub_workers(queue_url: str, queue_engine: Engine, tmp_path: Path) -> Iterator[Callable[..., list[WorkerProcess]]]:
    started: list[WorkerProcess] = []

    def start(*name_labels: tuple[str, str]) -> list[WorkerProcess]:
        workers = [
            WorkerProcess(name=name, labels=labels, database_url=queue_url, data_dir=tmp_path / name, stub=True)
            for name, labels in name_labels
        ]
        started.extend(workers)
        wait_until(lambda: all(registered(queue_engine, w.name) for w in workers), 60, "workers to register", workers)
        return workers

    yield start
    for worker in started:
        worker.stop()


def stub_runs(engine: Engine, *, duration_s: float, repeats: int = 1, **placement: object) -> list[int]:
    run_ids = enqueue(engine, repeats=repeats, **placement)
    with Session(engine) as session:
        session.execute(update(Run).where(Run.id.in_(run_ids)).values(duration_s=duration_s))
        session.commit()
    return run_ids


def run_of(engine: Engine, run_id: int) -> Run:
    with Session(engine) as session:
        run = session.get_one(Run, run_id)
        session.expunge(run)
        return run


def test_a_cancel_from_another_process_reaches_the_worker(queue_url: str, queue_engine: Engine, stub_workers) -> None:
    [worker] = stub_workers(("box-a", "cpu"))
    [running] = stub_runs(queue_engine, duration_s=60)
    wait_until(lambda: run_of(queue_engine, running).status == RunStatus.RUNNING, 30, "the run to load", [worker])
    [queued] = stub_runs(queue_engine, duration_s=1, worker="box-a")
    script = (
        "import sys; from sqlalchemy.orm import Session; from db import store; from db.engine import make_engine\n"
        "engine = make_engine(sys.argv[1])\n"
        "for run_id in sys.argv[2:]:\n"
        "    with Session(engine) as session: print(store.request_cancel(session=session, run_id=int(run_id)))\n"
    )
    subprocess.run(
        [sys.executable, "-c", script, queue_url, str(queued), str(running)], cwd=PROJECT_ROOT, check=True, timeout=60
    )
    wait_until(lambda: run_of(queue_engine, running).status == RunStatus.CANCELLED, 20, "the cancel", [worker])
    time.sleep(1.0)  # the worker's next claim: the queued run was cancelled before it, never started
    assert (run_of(queue_engine, queued).status, run_of(queue_engine, queued).started_at) == (RunStatus.CANCELLED, None)


def test_sigterm_ends_the_run_interrupted_and_a_sigkilled_workers_run_is_taken_never_rerun(
    queue_engine: Engine, stub_workers
) -> None:
    stopped, killed, survivor = stub_workers(("box-term", "cpu"), ("box-kill", "cpu"), ("box-live", "cpu"))
    [by_term] = stub_runs(queue_engine, duration_s=60, worker="box-term")
    [by_kill] = stub_runs(queue_engine, duration_s=60, worker="box-kill")
    for run_id in (by_term, by_kill):
        wait_until(lambda: run_of(queue_engine, run_id).status == RunStatus.RUNNING, 30, "the runs to load")  # noqa: B023 - called in its iteration
    stopped.process.send_signal(signal.SIGTERM)
    assert stopped.process.wait(timeout=30) == 0
    run = run_of(queue_engine, by_term)
    assert (run.status, run.status_reason) == (RunStatus.INTERRUPTED, "the lab was stopped during this run")

    os.kill(killed.process.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    wait_until(
        lambda: run_of(queue_engine, by_kill).status == RunStatus.INTERRUPTED,
        LEASE_S + HEARTBEAT_S + 30,
        "the killed worker's run to be interrupted",
        [survivor],
    )
    assert time.monotonic() - killed_at <= LEASE_S + 2 * HEARTBEAT_S + 5  # the stall timeout, plus a busy machine
    run = run_of(queue_engine, by_kill)
    assert run.status_reason is not None and "'box-kill'" in run.status_reason and "'box-live'" in run.status_reason
    # Never executed again: the queue goes on with other runs, this one stays interrupted.
    [after] = stub_runs(queue_engine, duration_s=0.2)
    wait_until(lambda: run_of(queue_engine, after).status == RunStatus.DONE, 30, "the queue to go on", [survivor])
    assert run_of(queue_engine, after).worker_name == "box-live"
    assert (run_of(queue_engine, by_kill).status, run_of(queue_engine, by_kill).fencing_token) == (
        RunStatus.INTERRUPTED,
        2,  # its claim, then the takeover: no second claim
    )
