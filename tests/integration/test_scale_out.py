"""Scale-out: real ``python -m lab worker`` processes, each with its own data folder, share one
PostgreSQL queue and run short external runs against the OpenAI stub on loopback.

Needs PostgreSQL (see tests/integration/conftest.py) and k6.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from db import store, worker_store
from db.models import RunStatus
from lab.queue import experiments
from lab.specs.schema import ExperimentSpec, RunSpec
from tests.stub_openai import StubServer
from tests.support.integration_workers import HEARTBEAT_S, LEASE_S, wait_until

pytestmark = pytest.mark.integration


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


def runs_by_id(engine: Engine, run_ids: list[int]) -> dict:
    with Session(engine) as session:
        runs = store.list_runs(session=session, run_ids=run_ids)
        for run in runs:
            session.expunge(run)
        return {run.id: run for run in runs}


def all_final(engine: Engine, run_ids: list[int]) -> bool:
    return all(run.status in RunStatus.FINAL for run in runs_by_id(engine, run_ids).values())


def claims(engine: Engine) -> list[tuple[int, str]]:
    with Session(engine) as session:
        return [(claim.run_id, claim.worker_name) for claim in worker_store.list_run_claims(session=session)]


def test_two_workers_share_the_queue_respect_labels_and_take_over_a_killed_workers_run(
    stub_server: StubServer, shared_engine: Engine, start_workers
) -> None:
    cpu, gpu = start_workers(("cpu-box", "cpu"), ("gpu-box", "cpu,gpu"))
    gpu_runs = enqueue(shared_engine, stub_run(stub_server.url, duration_s=2, requires=["gpu"]), repeats=2)
    free_runs = enqueue(shared_engine, stub_run(stub_server.url, duration_s=2), repeats=6)
    every = gpu_runs + free_runs
    wait_until(lambda: all_final(shared_engine, every), 300, "the 8 runs", [cpu, gpu])

    runs = runs_by_id(shared_engine, every)
    assert {run_id: run.status for run_id, run in runs.items()} == dict.fromkeys(every, RunStatus.DONE), {
        run_id: run.status_reason for run_id, run in runs.items()
    }
    claim_log = claims(shared_engine)
    assert Counter(run_id for run_id, _ in claim_log) == Counter(every)  # each run claimed exactly once
    assert {runs[run_id].worker_name for run_id in gpu_runs} == {"gpu-box"}  # never the cpu worker
    assert {name for _, name in claim_log} == {"cpu-box", "gpu-box"}  # both ran some
    assert all(run.requests_ok and run.worker_hardware["cpu_cores"] for run in runs.values())

    # SIGKILL the cpu worker mid-run: the gpu worker interrupts its run within lease + heartbeat.
    [victim] = enqueue(shared_engine, stub_run(stub_server.url, duration_s=60, worker="cpu-box"))
    wait_until(
        lambda: runs_by_id(shared_engine, [victim])[victim].status == RunStatus.RUNNING,
        60,
        "the pinned run to load",
        [cpu, gpu],
    )
    os.kill(cpu.process.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    [after] = enqueue(shared_engine, stub_run(stub_server.url, duration_s=2))
    wait_until(
        lambda: runs_by_id(shared_engine, [victim])[victim].status == RunStatus.INTERRUPTED,
        LEASE_S + HEARTBEAT_S + 30,
        "the killed worker's run to be interrupted",
        [gpu],
    )
    # The bound a user relies on, plus slack for a busy shared machine (polls, process start).
    assert time.monotonic() - killed_at <= LEASE_S + HEARTBEAT_S + 5
    reason = runs_by_id(shared_engine, [victim])[victim].status_reason
    assert "'cpu-box' stopped renewing its heartbeat" in reason and "'gpu-box'" in reason
    wait_until(lambda: all_final(shared_engine, [after]), 120, "the queue to go on", [gpu])
    assert runs_by_id(shared_engine, [after])[after].status == RunStatus.DONE
    assert runs_by_id(shared_engine, [after])[after].worker_name == "gpu-box"

    # Cancel from here (as the web lab on any machine would) reaches the worker running it.
    [cancelled] = enqueue(shared_engine, stub_run(stub_server.url, duration_s=60))
    wait_until(
        lambda: runs_by_id(shared_engine, [cancelled])[cancelled].status == RunStatus.RUNNING,
        60,
        "the run to load",
        [gpu],
    )
    with Session(shared_engine) as session:
        store.request_cancel(session=session, run_id=cancelled)
    wait_until(lambda: all_final(shared_engine, [cancelled]), 30, "the cancel to reach gpu-box", [gpu])
    assert runs_by_id(shared_engine, [cancelled])[cancelled].status == RunStatus.CANCELLED


def test_workers_started_together_on_an_empty_queue_never_claim_a_run_twice(
    stub_server: StubServer, shared_engine: Engine, start_workers
) -> None:
    first, second = start_workers(("box-1", "cpu"), ("box-2", "cpu"))
    run_ids = enqueue(shared_engine, stub_run(stub_server.url, duration_s=1), repeats=20)  # 20 at once, one commit
    wait_until(lambda: all_final(shared_engine, run_ids), 600, "the 20 runs", [first, second])

    runs = runs_by_id(shared_engine, run_ids)
    assert all(run.status == RunStatus.DONE for run in runs.values()), {
        run_id: run.status_reason for run_id, run in runs.items() if run.status != RunStatus.DONE
    }
    claim_log = claims(shared_engine)
    assert sorted(run_id for run_id, _ in claim_log) == sorted(run_ids)  # no run claimed twice, none lost
    assert {runs[run_id].worker_name for run_id, _ in claim_log} <= {"box-1", "box-2"}
    for worker in (first, second):
        assert "deadlock" not in worker.log().lower()
        assert worker.process.poll() is None  # both still serving
