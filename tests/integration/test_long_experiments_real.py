"""Long experiments with real processes: ``python -m lab worker`` drives an until-decided experiment on
the OpenAI stub through a SIGTERM in one round and a SIGKILL in another, restarted each time; and two
workers whose machine records differ (a faked CPU description) on one shared queue.

Needs k6 (and PostgreSQL for the two-worker test, see tests/integration/conftest.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from db.engine import make_engine
from db.migrations import upgrade
from db.models import LongExperiment, LongExperimentState, Run, RunStatus
from lab.queue import long_experiments, long_status
from lab.specs.schema import ExperimentSpec, UntilDecided
from services.processes import PROJECT_ROOT
from tests.stub_openai import StubServer
from tests.support.cpuinfo import AVX2_ONLY_FLAGS, fake_cpuinfo
from tests.support.integration_workers import WorkerProcess, wait_until

pytestmark = pytest.mark.integration


def stub_grid(url: str, *, repeats: int, duration_s: float) -> ExperimentSpec:
    return ExperimentSpec.model_validate(
        {
            "name": "long stub grid",
            "repeats": repeats,
            "base": {
                "backend": "external",
                "target_url": url,
                "model": "stub",
                "max_tokens": 8,
                "warmup_requests": 0,
                "workload": {"prompts": 1000},
                "load": {"vus": 1, "duration_s": duration_s, "graceful_stop_s": 1},
            },
            "grid": {"load.vus": [1, 2]},
        }
    )


def create(engine: Engine, spec: ExperimentSpec, *, budget_s: float = 900) -> int:
    return long_experiments.create(
        engine=engine,
        kind=long_experiments.GRID,
        name=spec.name,
        specs={spec.name: spec},
        until=UntilDecided(budget_s=budget_s),
        allow_dirty=True,
    )


def runs(engine: Engine, long_id: int) -> list[Run]:
    with Session(engine, expire_on_commit=False) as session:
        return [run for e in long_experiments.experiments_of(session, long_id) for run in e.runs]


def state(engine: Engine, long_id: int) -> str:
    with Session(engine) as session:
        return session.get_one(LongExperiment, long_id).state


def running_in_round(engine: Engine, long_id: int, round_index: int) -> Run | None:
    return next(
        (run for run in runs(engine, long_id) if run.status == RunStatus.RUNNING and run.repeat_index == round_index),
        None,
    )


def test_an_until_decided_experiment_survives_sigterm_and_sigkill_with_every_round_once(
    stub_server: StubServer, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    engine = make_engine(url)
    upgrade(engine)
    long_id = create(engine, stub_grid(stub_server.url, repeats=3, duration_s=3))

    def start() -> WorkerProcess:
        return WorkerProcess(name="box", labels="cpu", database_url=url, data_dir=tmp_path / "box")

    worker = start()
    wait_until(lambda: running_in_round(engine, long_id, 0), 90, "a run of round 1 to load", [worker])
    worker.process.send_signal(signal.SIGTERM)  # as `lab start` stopping, or systemd
    worker.process.wait(timeout=60)
    down_s = time.monotonic()
    time.sleep(4)
    worker = start()
    down_s = time.monotonic() - down_s
    wait_until(lambda: running_in_round(engine, long_id, 1), 120, "a run of round 2 to load", [worker])
    worker.process.send_signal(signal.SIGKILL)  # as a power cut
    worker.process.wait(timeout=30)
    killed_at = time.monotonic()
    time.sleep(4)
    worker = start()
    down_s += time.monotonic() - killed_at
    wait_until(lambda: state(engine, long_id) != LongExperimentState.RUNNING, 300, "the experiment to end", [worker])
    worker.stop()

    every = runs(engine, long_id)
    assert state(engine, long_id) == LongExperimentState.FINISHED, [(r.id, r.status, r.status_reason) for r in every]
    cut = [run for run in every if run.status == RunStatus.INTERRUPTED]
    assert len(cut) == 2, [(r.id, r.status, r.status_reason) for r in every]
    assert "the lab was stopped during this run" in (cut[0].status_reason or "")
    assert "the lab stopped while this run was running" in (cut[1].status_reason or "")
    done = [(run.cell_label, run.repeat_index) for run in every if run.status == RunStatus.DONE]
    assert len(done) == len(set(done)), "a round ran twice"
    assert {(label, r) for label in ("vus=1", "vus=2") for r in range(3)} <= set(done)  # every planned round once
    for run in cut:  # each replaced in its own round
        assert (run.cell_label, run.repeat_index) in done
    with Session(engine) as session:
        found = long_status.status(session, long_id)
    # The budget counts the seconds runs ran: the two stops' downtime is not in it.
    assert found.spent_s <= found.wall.span_s - down_s + 2, (found.spent_s, found.wall.span_s, down_s)


def test_a_worker_on_another_machine_takes_none_of_the_experiment_and_status_names_the_machine(
    stub_server: StubServer, shared_engine: Engine, postgres_database_url: str, tmp_path: Path
) -> None:
    home = WorkerProcess(name="home", labels="cpu", database_url=postgres_database_url, data_dir=tmp_path / "home")
    long_id = create(shared_engine, stub_grid(stub_server.url, repeats=2, duration_s=1))
    wait_until(lambda: any(run.status == RunStatus.DONE for run in runs(shared_engine, long_id)), 90, "a run", [home])
    home.stop()
    # Same name, same labels, another CPU: a machine that would measure other figures.
    fake = fake_cpuinfo(tmp_path, "cpuinfo", flags=AVX2_ONLY_FLAGS, model_name="Intel Xeon (faked)")
    os.environ["LAB_CPUINFO"] = str(fake)
    try:
        stranger = WorkerProcess(
            name="stranger", labels="cpu", database_url=postgres_database_url, data_dir=tmp_path / "stranger"
        )
    finally:
        del os.environ["LAB_CPUINFO"]
    time.sleep(6)  # long enough for several polls of the stranger
    assert {run.worker_name for run in runs(shared_engine, long_id) if run.worker_name} == {"home"}
    status = subprocess.run(
        [sys.executable, "-m", "lab", "reproduce", "--status", str(long_id)],
        cwd=PROJECT_ROOT,
        env={**os.environ, "LAB_DATABASE_URL": postgres_database_url, "LAB_DATA_DIR": str(tmp_path / "cli")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert status.returncode == 0, status.stderr
    assert "waits for a worker on" in status.stdout and "(worker home)" in status.stdout, status.stdout
    home = WorkerProcess(name="home", labels="cpu", database_url=postgres_database_url, data_dir=tmp_path / "home")
    wait_until(
        lambda: state(shared_engine, long_id) != LongExperimentState.RUNNING, 240, "the experiment to end", [home]
    )
    home.stop()
    stranger.stop()
    assert {run.worker_name for run in runs(shared_engine, long_id)} == {"home"}
    gone = subprocess.run(
        [sys.executable, "-m", "lab", "reproduce", "--stop", "9999"],
        cwd=PROJECT_ROOT,
        env={**os.environ, "LAB_DATABASE_URL": postgres_database_url, "LAB_DATA_DIR": str(tmp_path / "cli")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        gone.returncode == 2
        and gone.stderr.strip() == "error: no long experiment #9999 (lab reproduce --status lists them)"
    )
