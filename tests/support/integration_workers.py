"""Real ``python -m lab worker`` processes on a shared database, for the scale-out tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import psutil
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from db import worker_store
from services.processes import PROJECT_ROOT

LEASE_S = 6.0
HEARTBEAT_S = 1.0


class WorkerProcess:
    """One ``python -m lab worker`` with its own data folder, on the shared database (``stub``: its
    runs executed by tests.support.stub_worker, the queue alone)."""

    def __init__(self, *, name: str, labels: str, database_url: str, data_dir: Path, stub: bool = False) -> None:
        self.name, self.data_dir = name, data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = data_dir / "worker.log"
        env = {
            **os.environ,
            "LAB_DATABASE_URL": database_url,
            "LAB_DATA_DIR": str(data_dir),
            "LAB_WORKER_LEASE_S": str(LEASE_S),
            "LAB_WORKER_HEARTBEAT_INTERVAL_S": str(HEARTBEAT_S),
            "LAB_WORKER_POLL_INTERVAL_S": "0.2",
        }
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    *(["tests.support.stub_worker"] if stub else ["lab", "worker"]),
                    "--name",
                    name,
                    "--labels",
                    labels,
                ],
                cwd=PROJECT_ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        # A SIGKILLed worker leaves its k6 behind: found by the data folder in its argv.
        for process in psutil.process_iter(["cmdline"]):
            try:
                if str(self.data_dir) in " ".join(process.info["cmdline"] or []):
                    process.kill()
            except psutil.Error:
                continue


def registered(engine: Engine, name: str) -> bool:
    with Session(engine) as session:
        record = worker_store.get_worker(session=session, name=name)
        return record is not None and record.state == "running"


def wait_until(
    predicate: Callable[[], object], timeout_s: float, what: str, workers: Sequence[WorkerProcess] = ()
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        for worker in workers:
            assert worker.process.poll() is None or worker.process.returncode == -9, worker.log()[-3000:]
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")
