"""Storing a run's final state: tried again when the write fails, then without its figures,
then kept by the worker to write before its next run, so a run never stays active because
a write failed (a full disk, a database that cannot be written).

Which values each try writes is ``run_decisions``'s; this module does the writing.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from db import store
from lab.execution import run_decisions as decisions

log = logging.getLogger(__name__)

# How often, and after how long, the final state of a run is written again when it fails.
FINAL_WRITE_RETRY_DELAYS_S = (0.5, 2.0, 5.0)
# A run's largest files that can be regenerated, removed when the disk is too full for its record.
REGENERABLE_RUN_FILES = ("k6.ndjson", "k6.ndjson.gz", "requests.json")


class PendingFinalStates:
    """Final states no database write could record (the database itself failing), by run id.

    The worker holds one and writes them before it claims another run."""

    def __init__(self) -> None:
        self._values_by_run_id: dict[int, dict[str, Any]] = {}

    def __len__(self) -> int:
        return len(self._values_by_run_id)

    def add(self, run_id: int, values: dict[str, Any]) -> None:
        self._values_by_run_id[run_id] = values

    def save(self, engine: Engine) -> list[int]:
        """Write the final states that could not be written earlier; returns the run ids written."""
        written = []
        for run_id, values in list(self._values_by_run_id.items()):
            try:
                store.set_run_status(engine=engine, run_id=run_id, **values)
            except SQLAlchemyError:
                continue
            del self._values_by_run_id[run_id]
            written.append(run_id)
        return written


class FinalStateWriter:
    """Writes one run's final state with its reason and figures."""

    def __init__(self, *, engine: Engine, run_id: int, run_dir: Path, pending: PendingFinalStates) -> None:
        self.engine = engine
        self.run_id = run_id
        self.run_dir = run_dir
        self.pending = pending

    def write(self, status: str, *, reason: str | None = None, **columns: Any) -> None:
        """Write the final state. A failing write is tried again, then without the figures (a
        smaller write), then left to the worker to write before its next run."""
        values = decisions.final_values(status, reason=reason, columns=columns, finished_at=store.utc_now())
        problem = ""
        attempt_values = values
        for attempt, delay_s in enumerate((0.0, *FINAL_WRITE_RETRY_DELAYS_S)):
            time.sleep(delay_s)
            if decisions.frees_space_before(attempt, problem) and (freed := self._free_run_folder_space()):
                # A full disk would keep the run active for good: its raw k6 stream (already
                # read into the figures) goes, so the final state fits.
                values = decisions.with_space_freed(values, freed)
            attempt_values = decisions.final_write_attempt(values, attempt=attempt, problem=problem)
            try:
                store.set_run_status(engine=self.engine, run_id=self.run_id, **attempt_values)
                if attempt:
                    log.warning("run %s: its final state was written after %d failed tries", self.run_id, attempt)
                return
            except Exception as error:  # noqa: BLE001 (a database error, or a figure it cannot store)
                problem = decisions.write_failure_message(error) or (
                    f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
                )
        self.pending.add(self.run_id, attempt_values)
        log.error("run %s ended %s but the database could not record it (%s); the worker tries again before "
                  "its next run", self.run_id, status, problem)

    def _free_run_folder_space(self) -> str | None:
        """Remove this run's largest regenerable files; says which."""
        removed = []
        for name in REGENERABLE_RUN_FILES:
            path = self.run_dir / name
            try:
                if path.is_file() and path.stat().st_size:
                    path.unlink()
                    removed.append(name)
            except OSError:
                continue
        return " and ".join(removed) or None
