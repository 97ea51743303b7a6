"""Workers on one queue (real SQLite): labels, pins, the local dispatch's lost workers (a process
gone from this machine) and fencing, own recovery, cancel across workers, the version-1 -> 2
upgrade and the worker's name check. The same queue on both dispatches: tests/integration/test_queue_dispatch.py."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from db import migrations, store, worker_store
from db.engine import make_engine
from db.models import Run, RunStatus
from lab.context import LabContext
from lab.measurement.hardware import hardware_summary
from lab.queue.dispatch import LocalDispatch
from lab.queue.worker import Worker
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


def test_bad_labels_and_names_are_refused_with_a_clear_message() -> None:
    with pytest.raises(SpecError, match="not a worker name or label"):
        load_preset("seed-exp1", quick=True, overrides=[("requires", ["g p u"])])
    with pytest.raises(SpecError, match="not a worker name or label"):
        load_preset("seed-exp1", quick=True, overrides=[("worker", "a;b")])


def test_a_run_whose_worker_process_is_gone_is_interrupted_by_another_and_fenced(engine) -> None:
    dead_pid = 2**22 + 7  # above Linux's largest pid: no process has it
    worker_store.register_worker(
        engine=engine, name="box-a", host=socket.gethostname(), pid=dead_pid, labels=[], hardware=HARDWARE
    )
    register(engine, "box-b")
    [run_id] = enqueue(engine)
    box_a = LocalDispatch(engine=engine, worker_name="box-a", labels=[], hardware=HARDWARE, worker_pid=dead_pid)
    box_b = LocalDispatch(engine=engine, worker_name="box-b", labels=[], hardware=HARDWARE, worker_pid=1)
    claim = box_a.claim()
    assert claim is not None and claim.run_id == run_id
    # A worker never interrupts its own runs; another does, once its process is gone.
    assert box_a.interrupt_lost_runs() == []
    assert box_b.interrupt_lost_runs() == [run_id]
    with Session(engine) as session:
        run = session.get_one(Run, run_id)
        assert run.status == RunStatus.INTERRUPTED and run.status_reason is not None
        assert f"'box-a' stopped (its process {dead_pid} is gone)" in run.status_reason
        assert "'box-b'" in run.status_reason
    # Its late result is refused: the run stays interrupted.
    with pytest.raises(store.RunFenced):
        store.set_run_status(engine=engine, run_id=run_id, status=RunStatus.DONE, fencing_token=claim.fencing_token)


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
