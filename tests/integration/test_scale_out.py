"""Scale-out on procrastinate: real ``python -m lab worker`` processes, each with its own data folder,
share one PostgreSQL queue and run short external runs (k6) against the OpenAI stub on loopback.

Three workers take 30 runs with mixed labels, each once; a SIGKILLed worker's run ends
``interrupted`` within the stall timeout and is never run again; a worker stopped (SIGSTOP) past
the stall timeout and continued cannot overwrite the run taken from it, and stops its load; with
PostgreSQL stopped and started mid-run the run ends in a definite state and the queue goes on.
The stall timeout is short here (tests.support.integration_workers: ``LEASE_S``).

Needs PostgreSQL (see tests/integration/conftest.py) and k6.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from db import store
from db.engine import make_engine
from db.migrations import upgrade
from db.models import Run, RunStatus
from lab.queue import experiments
from lab.specs.schema import ExperimentSpec, RunSpec
from tests.stub_openai import StubServer
from tests.support.integration_postgres import PostgresCluster
from tests.support.integration_workers import HEARTBEAT_S, LEASE_S, WorkerProcess, wait_until

pytestmark = pytest.mark.integration

# The bound a user relies on (the stall timeout, a heartbeat to notice), plus slack for a busy
# shared machine (polls, process start).
TAKEN_WITHIN_S = LEASE_S + 2 * HEARTBEAT_S + 5


def stub_run(url: str, *, duration_s: float, **placement: object) -> RunSpec:
    return RunSpec.model_validate(
        {
            "backend": "external",
            "target_url": url,
            "model": "stub",
            "max_tokens": 8,
            "warmup_requests": 0,
            "workload": {"prompts": 1000},
            "load": {"vus": 1, "duration_s": duration_s, "graceful_stop_s": 1},
            **placement,
        }
    )


def enqueue(engine: Engine, spec: RunSpec, *, repeats: int = 1) -> list[int]:
    with Session(engine) as session:
        experiment = experiments.enqueue_experiment(
            session=session, spec=ExperimentSpec(name="scale-out", base=spec, repeats=repeats)
        )
        return [run.id for run in experiment.runs]


def runs_by_id(engine: Engine, run_ids: list[int]) -> dict[int, Run]:
    with Session(engine) as session:
        runs = store.list_runs(session=session, run_ids=run_ids)
        for run in runs:
            session.expunge(run)
        return {run.id: run for run in runs}


def run_of(engine: Engine, run_id: int) -> Run:
    return runs_by_id(engine, [run_id])[run_id]


def all_final(engine: Engine, run_ids: list[int]) -> bool:
    return all(run.status in RunStatus.FINAL for run in runs_by_id(engine, run_ids).values())


def jobs_by_status(engine: Engine) -> dict[str, int]:
    """procrastinate's jobs, counted by status."""
    with Session(engine) as session:
        rows = session.execute(text("SELECT status::text, count(*) FROM procrastinate_jobs GROUP BY status")).all()
    return {status: count for status, count in rows}


def k6_of(worker: WorkerProcess) -> list[int]:
    """The k6 processes loading for ``worker`` (found by its data folder in their argv)."""
    pids = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            argv = process.info["cmdline"] or []
            if argv and Path(argv[0]).name == "k6" and str(worker.data_dir) in " ".join(argv):
                pids.append(process.pid)
        except psutil.Error:
            continue
    return pids


def test_three_workers_take_30_mixed_runs_once_and_a_killed_workers_run_is_interrupted_never_rerun(
    stub_server: StubServer, shared_engine: Engine, start_workers
) -> None:
    cpu, gpu, both = start_workers(("cpu-box", "cpu"), ("gpu-box", "gpu"), ("big-box", "cpu,gpu"))
    gpu_runs = enqueue(shared_engine, stub_run(stub_server.url, duration_s=1, requires=["gpu"]), repeats=10)
    cpu_runs = enqueue(shared_engine, stub_run(stub_server.url, duration_s=1, requires=["cpu"]), repeats=10)
    free_runs = enqueue(shared_engine, stub_run(stub_server.url, duration_s=1), repeats=10)
    every = gpu_runs + cpu_runs + free_runs
    wait_until(lambda: all_final(shared_engine, every), 600, "the 30 runs", [cpu, gpu, both])

    runs = runs_by_id(shared_engine, every)
    assert {run_id: run.status for run_id, run in runs.items()} == dict.fromkeys(every, RunStatus.DONE), {
        run_id: run.status_reason for run_id, run in runs.items()
    }
    assert {run.fencing_token for run in runs.values()} == {1}  # each claimed once
    # One job each, none failed or retried (a worker ends a job just after writing its run's state).
    wait_until(lambda: jobs_by_status(shared_engine) == {"succeeded": 30}, 10, "the jobs to end")
    assert {runs[run_id].worker_name for run_id in gpu_runs} <= {"gpu-box", "big-box"}
    assert {runs[run_id].worker_name for run_id in cpu_runs} <= {"cpu-box", "big-box"}
    assert {run.worker_name for run in runs.values()} == {"cpu-box", "gpu-box", "big-box"}  # all three ran some
    assert all(run.requests_ok and (run.worker_hardware or {})["cpu_cores"] for run in runs.values())

    # SIGKILL the cpu worker mid-run: another interrupts its run within the stall timeout.
    [victim] = enqueue(shared_engine, stub_run(stub_server.url, duration_s=60, worker="cpu-box"))
    wait_until(lambda: run_of(shared_engine, victim).status == RunStatus.RUNNING, 60, "the pinned run to load", [cpu])
    os.kill(cpu.process.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    wait_until(
        lambda: run_of(shared_engine, victim).status == RunStatus.INTERRUPTED,
        TAKEN_WITHIN_S + 30,
        "the killed worker's run to be interrupted",
        [gpu, both],
    )
    assert time.monotonic() - killed_at <= TAKEN_WITHIN_S
    run = run_of(shared_engine, victim)
    assert run.status_reason is not None and "'cpu-box' stopped renewing its heartbeat" in run.status_reason
    [after] = enqueue(shared_engine, stub_run(stub_server.url, duration_s=1))
    wait_until(lambda: all_final(shared_engine, [after]), 120, "the queue to go on", [gpu, both])
    assert run_of(shared_engine, after).status == RunStatus.DONE
    run = run_of(shared_engine, victim)
    assert (run.status, run.fencing_token) == (RunStatus.INTERRUPTED, 2)  # its claim, then the takeover: never rerun
    # Its job failed; the others' succeeded (a worker ends a job just after writing its run's state).
    wait_until(lambda: jobs_by_status(shared_engine) == {"succeeded": 31, "failed": 1}, 10, "the jobs to end")


def test_a_worker_stopped_past_the_stall_timeout_cannot_overwrite_its_run_and_stops_its_load(
    stub_server: StubServer, shared_engine: Engine, start_workers
) -> None:
    paused, other = start_workers(("paused-box", "cpu"), ("other-box", "cpu"))
    [run_id] = enqueue(shared_engine, stub_run(stub_server.url, duration_s=30, worker="paused-box"))
    wait_until(lambda: run_of(shared_engine, run_id).status == RunStatus.RUNNING, 60, "the run to load", [paused])
    os.kill(paused.process.pid, signal.SIGSTOP)
    try:
        wait_until(
            lambda: run_of(shared_engine, run_id).status == RunStatus.INTERRUPTED,
            TAKEN_WITHIN_S + 30,
            "the stopped worker's run to be interrupted",
            [other],
        )
        taken = run_of(shared_engine, run_id)
    finally:
        os.kill(paused.process.pid, signal.SIGCONT)
    # Back: its next cancel check (once a second) finds the run taken; it stops k6 and says so once.
    wait_until(lambda: "was taken from this worker" in paused.log(), 30, "the late worker to notice", [paused])
    wait_until(lambda: not k6_of(paused), 30, "the late worker's k6 to stop", [paused])
    time.sleep(2 * HEARTBEAT_S)
    late = run_of(shared_engine, run_id)
    assert (late.status, late.status_reason, late.fencing_token) == (
        RunStatus.INTERRUPTED,
        taken.status_reason,
        taken.fencing_token,
    )
    assert late.req_per_s is None  # no figure of the late worker
    assert paused.log().count("was taken from this worker") == 1
    # It goes on serving the queue.
    [next_run] = enqueue(shared_engine, stub_run(stub_server.url, duration_s=1, worker="paused-box"))
    wait_until(lambda: all_final(shared_engine, [next_run]), 120, "the late worker's next run", [paused])
    assert run_of(shared_engine, next_run).status == RunStatus.DONE


def test_postgres_stopped_and_started_mid_run_the_run_ends_definite_and_the_queue_goes_on(
    stub_server: StubServer, outage_database_url: str, postgres_cluster: PostgresCluster, tmp_path: Path
) -> None:
    engine = make_engine(outage_database_url)
    upgrade(engine)
    workers = [
        WorkerProcess(name=name, labels="cpu", database_url=outage_database_url, data_dir=tmp_path / name)
        for name in ("box-1", "box-2")
    ]
    try:
        [run_id] = enqueue(engine, stub_run(stub_server.url, duration_s=8))
        wait_until(lambda: run_of(engine, run_id).status == RunStatus.RUNNING, 120, "the run to load", workers)
        assert postgres_cluster.stop().returncode == 0
        time.sleep(3)
        assert postgres_cluster.start().returncode == 0
        wait_until(lambda: all_final(engine, [run_id]), 120, "the run to end", workers)
        assert run_of(engine, run_id).status in (RunStatus.DONE, RunStatus.INTERRUPTED, RunStatus.FAILED)
        after = enqueue(engine, stub_run(stub_server.url, duration_s=1), repeats=2)
        wait_until(lambda: all_final(engine, after), 120, "the queue to go on", workers)
        assert {run.status for run in runs_by_id(engine, after).values()} == {RunStatus.DONE}
        assert {run.fencing_token for run in runs_by_id(engine, after).values()} == {1}  # each claimed once
    finally:
        for worker in workers:
            worker.stop()
        engine.dispose()
