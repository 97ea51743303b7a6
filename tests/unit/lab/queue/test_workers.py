"""Workers on one queue (real SQLite): labels, pins, the claim log, leases, own recovery,
cancel across workers, the version-1 -> 2 upgrade and the worker's name check."""

from __future__ import annotations

import socket
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session

from db import migrations, store, worker_store
from db.engine import make_engine
from db.models import Run, RunStatus, WorkerRecord
from lab.context import LabContext
from lab.queue.worker import Worker
from lab.queue.worker_identity import hardware_summary
from lab.queue.worker_lock import WorkerBusyError
from lab.settings import Settings
from lab.specs.schema import SpecError, load_preset
from tests.support.old_schema import version_1_database
from tests.support.queue import HARDWARE, enqueue, register


def test_runs_go_only_to_workers_with_the_labels_and_the_name_they_ask_for(engine) -> None:
    [gpu_run] = enqueue(engine, requires=["gpu"])
    [pinned_run] = enqueue(engine, worker="box-b")
    [any_run] = enqueue(engine)
    # A cpu worker skips the gpu run and the run pinned elsewhere, and takes the free one.
    assert store.claim_next_run(engine=engine, worker_name="box-a", labels=["cpu"]) == any_run
    assert store.claim_next_run(engine=engine, worker_name="box-a", labels=["cpu"]) is None
    assert store.claim_next_run(engine=engine, worker_name="box-b", labels=["cpu"]) == pinned_run
    assert (
        store.claim_next_run(engine=engine, worker_name="box-c", labels=["gpu", "h100"], hardware=HARDWARE) == gpu_run
    )
    with Session(engine) as session:
        run = session.get_one(Run, gpu_run)
        assert (run.worker_name, run.worker_hardware, run.requires_labels) == ("box-c", HARDWARE, ["gpu"])
        claims = [(claim.run_id, claim.worker_name) for claim in worker_store.list_run_claims(session=session)]
    assert claims == [(any_run, "box-a"), (pinned_run, "box-b"), (gpu_run, "box-c")]


def test_bad_labels_and_names_are_refused_with_a_clear_message() -> None:
    with pytest.raises(SpecError, match="not a worker name or label"):
        load_preset("seed-exp1", quick=True, overrides=[("requires", ["g p u"])])
    with pytest.raises(SpecError, match="not a worker name or label"):
        load_preset("seed-exp1", quick=True, overrides=[("worker", "a;b")])


def test_a_lost_workers_run_is_interrupted_by_another_naming_it(engine) -> None:
    register(engine, "box-a")
    register(engine, "box-b")
    [run_id] = enqueue(engine)
    assert store.claim_next_run(engine=engine, worker_name="box-a") == run_id
    # Fresh heartbeat: box-b leaves the run alone.
    assert worker_store.interrupt_runs_of_lost_workers(engine=engine, lease_s=60, except_worker="box-b") == []
    with Session(engine) as session:
        session.execute(
            update(WorkerRecord)
            .where(WorkerRecord.name == "box-a")
            .values(heartbeat_at=store.utc_now() - timedelta(seconds=120))
        )
        session.commit()
    # A worker never reaps itself; another does.
    assert worker_store.interrupt_runs_of_lost_workers(engine=engine, lease_s=60, except_worker="box-a") == []
    assert worker_store.interrupt_runs_of_lost_workers(engine=engine, lease_s=60, except_worker="box-b") == [run_id]
    with Session(engine) as session:
        run = session.get_one(Run, run_id)
        assert run.status == RunStatus.INTERRUPTED and run.status_reason is not None
        assert "'box-a' stopped renewing its heartbeat" in run.status_reason and "'box-b'" in run.status_reason


def test_a_restarted_worker_recovers_only_its_own_runs(engine) -> None:
    register(engine, "box-a")
    register(engine, "box-b")
    first, second = enqueue(engine, repeats=2)
    store.claim_next_run(engine=engine, worker_name="box-a")
    store.claim_next_run(engine=engine, worker_name="box-b")
    assert store.mark_orphaned_runs_interrupted(engine=engine, worker_name="box-a") == [first]
    with Session(engine) as session:
        assert session.get_one(Run, second).status == RunStatus.STARTING


def test_cancel_reaches_the_worker_that_owns_the_run(engine) -> None:
    [run_id] = enqueue(engine)
    store.claim_next_run(engine=engine, worker_name="box-a")
    with Session(engine) as session:  # e.g. the web lab on another machine
        assert store.request_cancel(session=session, run_id=run_id) == RunStatus.STARTING
    assert store.is_cancel_requested(engine=engine, run_id=run_id)


def test_a_live_worker_name_elsewhere_is_refused_a_restart_here_is_not(engine, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, worker_name="box-a")
    worker_store.register_worker(engine=engine, name="box-a", host="another-host", pid=1, labels=[], hardware=HARDWARE)
    with pytest.raises(WorkerBusyError, match="alive on another-host"):
        Worker(context=LabContext(settings=settings)).register()
    # Same host, its process gone: a restart, which takes the name over.
    worker_store.register_worker(
        engine=engine, name="box-a", host=socket.gethostname(), pid=2**22 + 7, labels=[], hardware=HARDWARE
    )
    worker = Worker(context=LabContext(settings=settings), labels=["gpu"])
    worker.register()
    with Session(engine) as session:
        record = worker_store.get_worker(session=session, name="box-a")
        assert record is not None and record.hardware is not None
        assert (record.labels, record.state, record.host) == (["gpu"], "running", socket.gethostname())
        assert record.hardware["cpu_cores"] and "lab_version" in record.hardware
        age_s = worker_store.heartbeat_age_s(session=session, record=record)
        assert age_s is not None and age_s < 30


def test_upgrade_from_version_1_keeps_runs_and_services(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'old.db'}")
    version_1_database(engine)
    assert migrations.upgrade(engine) == 1
    with Session(engine) as session:
        [run] = store.list_runs(session=session)
        assert (run.status, run.req_per_s, run.worker_name) == (RunStatus.DONE, 2.5, None)
        [service] = worker_store.list_service_records(session=session)
        assert (service.worker, service.name, service.pid, service.config) == (
            socket.gethostname(),
            "naive",
            1234,
            {"model": "m"},
        )
    [run_id] = enqueue(engine)
    assert store.claim_next_run(engine=engine, worker_name="box-a") == run_id


def test_hardware_summary_names_gpus_and_cpu() -> None:
    hardware = {**HARDWARE, "gpus": [{"name": "NVIDIA H200", "memory_gib": 139.8}] * 2}
    assert hardware_summary(hardware) == "2x NVIDIA H200 (139.8 GiB), Xeon (2 cores, 8.0 GiB)"
    assert hardware_summary(HARDWARE) == "Xeon (2 cores, 8.0 GiB)"
    assert hardware_summary(None) == ""
