"""``lab run`` on a shared PostgreSQL queue with a live worker: it only queues and waits,
naming the worker that took each run; the worker (a real ``python -m lab worker``) runs a
short external run against the OpenAI stub. Needs PostgreSQL and k6; a few seconds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from db import store
from services.processes import PROJECT_ROOT
from tests.stub_openai import StubServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def _lab_run(database_url: str, data_dir: Path, target_url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LAB_DATABASE_URL": database_url, "LAB_DATA_DIR": str(data_dir), "LAB_WORKER_NAME": "cli-box"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "lab",
            "run",
            "--preset",
            "seed-exp1",
            "--quick",
            "--json",
            "--set",
            "backend=external",
            "--set",
            f"target_url={target_url}",
            "--set",
            "model=stub",
            "--set",
            "grid.load.vus=[1]",
            "--set",
            "load.duration_s=2",
            "--set",
            "load.graceful_stop_s=2",
            "--set",
            "max_tokens=8",
            "--set",
            "warmup_requests=0",
            *extra,
        ],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_lab_run_only_queues_when_a_live_worker_shares_the_database(
    postgres_database_url: str, shared_engine: Engine, start_workers, stub_server: StubServer, tmp_path: Path
) -> None:
    start_workers(("box-1", ""))
    result = _lab_run(postgres_database_url, tmp_path / "cli-data", stub_server.url)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "only waits" in result.stderr and "taken by worker box-1" in result.stderr, result.stderr
    assert "on worker box-1: done" in result.stderr
    with Session(shared_engine) as session:
        [run] = store.list_runs(session=session)
        assert run.worker_name == "box-1" and run.requests_ok
    assert not (tmp_path / "cli-data" / "runs").exists()  # nothing executed here


def test_local_runs_here_as_before(
    postgres_database_url: str, shared_engine: Engine, stub_server: StubServer, tmp_path: Path
) -> None:
    result = _lab_run(postgres_database_url, tmp_path / "cli-data", stub_server.url, "--local")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "taken by worker" not in result.stderr
    with Session(shared_engine) as session:
        [run] = store.list_runs(session=session)
        assert run.worker_name == "cli-box" and run.requests_ok
