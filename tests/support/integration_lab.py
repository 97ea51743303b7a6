"""A private lab for integration tests (its own data folder, SQLite file, settings and worker)
and the run specs the fault tests enqueue on it."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from db import store
from db.models import Run, RunStatus
from lab.analysis.compare import RunRecord
from lab.context import LabContext
from lab.queue import experiments
from lab.queue.worker import Worker
from lab.settings import Settings
from lab.specs.schema import ExperimentSpec, RunSpec
from services.supervisor import ManagedService

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = PROJECT_ROOT / "models" / "SmolLM2-135M-Instruct"


class Lab:
    """A private lab: its own data folder, SQLite file, settings and worker."""

    def __init__(self, data_dir: Path) -> None:
        self.settings = Settings(data_dir=data_dir, stop_idle_backends=True, worker_poll_interval_s=0.2)
        self.context = LabContext(settings=self.settings)
        self.engine = self.context.engine
        self.worker = Worker(context=self.context)
        self._thread: threading.Thread | None = None

    def enqueue(self, *specs: RunSpec, name: str = "faults") -> list[int]:
        ids = []
        for spec in specs:
            with Session(self.engine) as session:
                experiment = experiments.enqueue_experiment(session=session, spec=ExperimentSpec(name=name, base=spec))
                ids += [run.id for run in experiment.runs]
        return ids

    def run_queue(self) -> None:
        while self.worker.run_one() is not None:
            pass

    def start_worker(self) -> None:
        self._thread = threading.Thread(target=self.run_queue, daemon=True)
        self._thread.start()

    def join_worker(self, timeout_s: float = 120) -> None:
        assert self._thread is not None
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), "the worker did not finish the queue in time"

    def run(self, run_id: int) -> Run:
        with Session(self.engine) as session:
            run = store.get_run(session=session, run_id=run_id)
            assert run is not None
            session.expunge(run)
            return run

    def series(self, run_id: int) -> dict[str, Any]:
        with Session(self.engine) as session:
            row = store.get_run_series(session=session, run_id=run_id)
            return dict(row.series) if row and row.series else {}

    def wait_for(self, run_id: int, predicate: Callable[[Run], bool], timeout_s: float = 90) -> Run:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            run = self.run(run_id)
            if predicate(run):
                return run
            assert run.status not in RunStatus.FINAL or predicate(run), (run.status, run.status_reason)
            time.sleep(0.2)
        raise AssertionError(f"run {run_id} never reached the expected state (now {self.run(run_id).status})")

    def integrity(self) -> str:
        with self.engine.connect() as connection:
            return str(connection.execute(text("PRAGMA integrity_check")).scalar())

    def close(self) -> None:
        self.worker.stop()
        self.worker.services.stop_all()
        self.engine.dispose()


def openai_stub_service(log_path: Path, *, delay_s: float = 0.2) -> ManagedService:
    """The OpenAI stub (tests/stub_openai.py, ``delay_s`` per completion) on a free loopback port."""
    return ManagedService(
        name="stub",
        argv=[
            sys.executable,
            "-m",
            "tests.stub_openai",
            "--host",
            "{host}",
            "--port",
            "{port}",
            "--delay-s",
            str(delay_s),
        ],
        log_path=log_path,
        cwd=PROJECT_ROOT,
        readiness_timeout_s=30,
    )


def naive_spec(*, duration_s: float, **changes: object) -> RunSpec:
    return RunSpec.model_validate(
        {
            "backend": "naive",
            "model": str(DEFAULT_MODEL),
            "max_tokens": 8,
            "warmup_requests": 1,
            "load": {"vus": 1, "duration_s": duration_s, "graceful_stop_s": 5},
            **changes,
        }
    )


def stub_spec(url: str, *, duration_s: float, backend: str = "external", vus: int = 2, **changes: object) -> RunSpec:
    return RunSpec.model_validate(
        {
            "backend": backend,
            "target_url": url,
            "model": "stub",
            "max_tokens": 8,
            "warmup_requests": 0,
            "workload": {"prompts": 10_000},
            "load": {"vus": vus, "duration_s": duration_s, "graceful_stop_s": 2},
            **changes,
        }
    )


def is_running(run: Run, at_least: int = 2) -> bool:
    """The run is under load and k6 counts requests (the first may be setup's health check)."""
    return run.status == RunStatus.RUNNING and ((run.progress or {}).get("requests_completed") or 0) >= at_least


def run_experiment(engine: Engine, settings: Settings, spec: ExperimentSpec) -> list[dict[str, Any]]:
    """Queue ``spec``, run the queue in this process (a Worker on ``settings``), and read every run back."""
    with Session(engine) as session:
        run_ids = [run.id for run in experiments.enqueue_experiment(session=session, spec=spec).runs]
    worker = Worker(context=LabContext(settings=settings))
    while worker.run_one() is not None:
        pass
    with Session(engine) as session:
        runs = store.list_runs(session=session, run_ids=run_ids, newest_first=False)
        records = []
        for run in runs:
            series = store.get_run_series(session=session, run_id=run.id)
            records.append(
                {**RunRecord.of(run), "count_check": run.count_check, "series": series.series if series else {}}
            )
        return records
