"""``lab worker`` with its runs executed by a stub, for the queue's process tests (a SIGTERM, a
SIGKILL, a cancel from another process) on SQLite and on PostgreSQL, where only the queue matters.

    python -m tests.support.stub_worker --name box-1 --labels cpu      # the lab worker's arguments

The stub "loads" for the run's ``duration_s``, checking the cancel (and its claim's fence) every
0.1 s as the real executor does once a second, then ends the run ``done``; a stop signal ends it
``interrupted``, a fenced write ends it without a word more than one line.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from db import store
from db.models import Run, RunStatus, utc_now

log = logging.getLogger("tests.support.stub_worker")

CHECK_INTERVAL_S = 0.1


class StubExecutor:
    """Stands in for ``lab.run.runner.RunExecutor`` (same arguments, same outcomes, no load)."""

    def __init__(self, *, engine: Engine, run_id: int, fencing_token: int | None = None, **_: Any) -> None:
        self.engine, self.run_id, self.fencing_token = engine, run_id, fencing_token

    def _set(self, status: str, **values: Any) -> None:
        store.set_run_status(
            engine=self.engine, run_id=self.run_id, status=status, fencing_token=self.fencing_token, **values
        )

    def execute(self) -> str:
        with Session(self.engine) as session:
            duration_s = float(session.scalar(select(Run.duration_s).where(Run.id == self.run_id)) or 0)
        try:
            self._set(RunStatus.RUNNING, load_started_at=utc_now())
            deadline = time.monotonic() + duration_s
            while time.monotonic() < deadline:
                if store.is_cancel_requested(engine=self.engine, run_id=self.run_id, fencing_token=self.fencing_token):
                    self._set(RunStatus.CANCELLED, reason="cancelled by the user")
                    return RunStatus.CANCELLED
                time.sleep(CHECK_INTERVAL_S)
            self._set(RunStatus.DONE, requests_ok=1)
            return RunStatus.DONE
        except store.RunFenced as fenced:
            log.warning("%s: this worker stops its load and writes nothing more", fenced)
            return RunStatus.INTERRUPTED
        except BaseException:
            with contextlib.suppress(store.RunFenced):
                self._set(RunStatus.INTERRUPTED, reason="the lab was stopped during this run")
            raise


def main() -> int:
    import lab.queue.worker as worker_module
    from lab.cli import main as lab_main

    worker_module.RunExecutor = StubExecutor  # type: ignore[misc,assignment]  # the queue alone is tested
    return lab_main(["worker", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
