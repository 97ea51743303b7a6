"""Storing a run's final state: tried again when the write fails, so a run never stays
active and never loses the figures k6 produced because a write failed.

- The database cannot be reached (stopped, restarting, the network): the whole final state
  is tried again with growing waits for ``LAB_FINAL_WRITE_RETRY_S`` (60 s by default), then
  kept in the run's folder (``final_state.json``) and in the worker, which writes it as soon
  as the database answers again (before its next claim, or at its next start);
  ``python -m lab runs recover`` writes those left by a worker that is gone.
- Anything else (a full disk, a figure the database refuses): tried again after 0.5, 2 and
  5 s, on a full disk after removing the run's regenerable files, then without the figures.

Which values each try writes, and how long to wait, is ``run_decisions``'s; this module
does the writing. :func:`retry_while_unreachable` gives other writes of the run's end (its
series) the same patience.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from db import store
from db.models import RunStatus, utc_now
from lab.run import decisions
from lab.workloads.datasets import atomic_write_bytes

log = logging.getLogger(__name__)

# How often, and after how long, a final state that fails for another reason than an
# unreachable database is written again.
FINAL_WRITE_RETRY_DELAYS_S = (0.5, 2.0, 5.0)
# A run's largest files that can be regenerated, removed when the disk is too full for its record.
REGENERABLE_RUN_FILES = ("k6.ndjson", "k6.ndjson.gz", "requests.json")
# A final state no write could record, kept in the run's folder until it is written.
PENDING_FINAL_STATE_FILE = "final_state.json"
# The states a kept final state may replace: the run's own (active), or interrupted by a
# worker that saw it silent during the outage.
REPLACEABLE_STATES = (*RunStatus.ACTIVE, RunStatus.INTERRUPTED)

T = TypeVar("T")


def retry_while_unreachable(action: Callable[[], T], *, budget_s: float) -> T:
    """``action`` (a database write), tried again with growing waits while the database
    cannot be reached, for up to ``budget_s``; any other error, or the last failure, raises."""
    deadline = time.monotonic() + budget_s
    attempt = 0
    while True:
        try:
            return action()
        except SQLAlchemyError as error:
            attempt += 1
            delay_s = decisions.next_final_write_delay_s(
                attempt,
                unreachable=decisions.database_unreachable(error),
                remaining_s=deadline - time.monotonic(),
                delays_s=(),
            )
            if delay_s is None:
                raise
            time.sleep(delay_s)


# The run's other rows written with its final state when they could not be written before
# (the database was unreachable): kept with it, written first.
PART_WRITERS: dict[str, Callable[..., None]] = {"series": store.save_run_series, "requests": store.save_run_requests}


def write_parts(engine: Engine, run_id: int, parts: Mapping[str, dict[str, Any]]) -> None:
    for name, values in parts.items():
        PART_WRITERS[name](engine=engine, run_id=run_id, **values)


def _encode(value: Any) -> Any:
    if isinstance(value, datetime):
        return {"__datetime__": value.isoformat()}
    if isinstance(value, (bytes, bytearray)):
        return {"__bytes__": base64.b64encode(value).decode("ascii")}
    raise TypeError(f"{type(value).__name__} is not JSON")


def _decode(document: dict[str, Any]) -> Any:
    if set(document) == {"__datetime__"}:
        return datetime.fromisoformat(document["__datetime__"])
    if set(document) == {"__bytes__"}:
        return base64.b64decode(document["__bytes__"])
    return document


class PendingFinalStates:
    """Final states no database write could record, by run id: held by the worker and kept in
    each run's folder (so a restarted worker or ``lab runs recover`` finds them)."""

    def __init__(self) -> None:
        self._values_by_run_id: dict[int, dict[str, Any]] = {}
        self._parts_by_run_id: dict[int, dict[str, dict[str, Any]]] = {}
        self._files_by_run_id: dict[int, Path] = {}

    def __len__(self) -> int:
        return len(self._values_by_run_id)

    def remaining(self) -> list[int]:
        """The run ids still waiting to be written."""
        return sorted(self._values_by_run_id)

    def add(
        self,
        run_id: int,
        values: dict[str, Any],
        *,
        run_dir: Path | None = None,
        parts: Mapping[str, dict[str, Any]] | None = None,
    ) -> None:
        """Hold a final state (and the run's ``parts`` not written either: series, requests)."""
        self._values_by_run_id[run_id], self._parts_by_run_id[run_id] = values, dict(parts or {})
        if run_dir is None:
            return
        path = run_dir / PENDING_FINAL_STATE_FILE
        document = {"run_id": run_id, "values": values, "parts": self._parts_by_run_id[run_id]}
        try:
            atomic_write_bytes(path, json.dumps(document, default=_encode).encode())
            self._files_by_run_id[run_id] = path
        except (OSError, TypeError, ValueError) as error:  # the worker still holds it in memory
            log.error("run %s: its final state could not be kept in %s either: %s", run_id, path, error)

    def load(self, runs_dir: Path) -> list[int]:
        """Take up the final states kept in the run folders under ``runs_dir``; returns their run ids."""
        found = []
        for path in sorted(runs_dir.glob(f"*/{PENDING_FINAL_STATE_FILE}")) if runs_dir.is_dir() else []:
            try:
                document = json.loads(path.read_text(encoding="utf-8"), object_hook=_decode)
                run_id, values, parts = int(document["run_id"]), dict(document["values"]), document.get("parts") or {}
            except (OSError, ValueError, KeyError, TypeError) as error:
                log.error("a kept final state cannot be read (%s): %s", path, error)
                continue
            if path.parent.name == str(run_id) and run_id not in self._values_by_run_id:
                self._values_by_run_id[run_id], self._files_by_run_id[run_id] = values, path
                self._parts_by_run_id[run_id] = dict(parts)
                found.append(run_id)
        return found

    def save(self, engine: Engine) -> list[int]:
        """Write the final states that could not be written earlier (each only while its run is
        still active or interrupted); returns the run ids written."""
        written = []
        for run_id, values in list(self._values_by_run_id.items()):
            try:
                with Session(engine) as session:
                    run = store.get_run(session=session, run_id=run_id)
                    replaceable = run is not None and run.status in REPLACEABLE_STATES
                if replaceable:
                    store.check_fence(engine=engine, run_id=run_id, fencing_token=values.get("fencing_token"))
                    write_parts(engine, run_id, self._parts_by_run_id.get(run_id) or {})
                    store.set_run_status(engine=engine, run_id=run_id, **values)
            except SQLAlchemyError:
                continue
            except store.RunFenced as fenced:
                log.warning("%s: its kept final state is not written", fenced)
                replaceable = False
            del self._values_by_run_id[run_id]
            self._parts_by_run_id.pop(run_id, None)
            if (path := self._files_by_run_id.pop(run_id, None)) is not None:
                path.unlink(missing_ok=True)
            if replaceable:
                written.append(run_id)
        return written


class FinalStateWriter:
    """Writes one run's final state with its reason and figures."""

    def __init__(
        self,
        *,
        engine: Engine,
        run_id: int,
        run_dir: Path,
        pending: PendingFinalStates,
        retry_s: float = 60.0,
        fencing_token: int | None = None,
    ) -> None:
        self.engine = engine
        self.run_id = run_id
        self.fencing_token = fencing_token  # the claim's: a run taken from this worker is not written
        self.run_dir = run_dir
        self.pending = pending
        self.retry_s = retry_s

    def write(
        self,
        status: str,
        *,
        reason: str | None = None,
        parts: Mapping[str, dict[str, Any]] | None = None,
        **columns: Any,
    ) -> None:
        """Write the final state (after ``parts``, the run's rows not written yet): tried again
        while the database cannot be reached (then kept for later, figures whole); for other
        failures, tried again, then without the figures."""
        values = decisions.final_values(status, reason=reason, columns=columns, finished_at=utc_now())
        if self.fencing_token is not None:
            values["fencing_token"] = self.fencing_token
        deadline = time.monotonic() + self.retry_s
        problem, failures, tries, unreachable = "", 0, 0, False
        while True:
            if decisions.frees_space_before(failures, problem) and (freed := self._free_run_folder_space()):
                # A full disk would keep the run active for good: its raw k6 stream (already
                # read into the figures) goes, so the final state fits.
                values = decisions.with_space_freed(values, freed)
            attempt_values = decisions.final_write_attempt(values, attempt=failures, problem=problem)
            try:
                store.check_fence(engine=self.engine, run_id=self.run_id, fencing_token=self.fencing_token)
                if failures < decisions.FINAL_WRITE_TRIES_WITH_FIGURES:  # the small write goes alone
                    write_parts(self.engine, self.run_id, parts or {})
                store.set_run_status(engine=self.engine, run_id=self.run_id, **attempt_values)
                if tries:
                    log.warning("run %s: its final state was written after %d failed tries", self.run_id, tries)
                return
            except store.RunFenced as fenced:
                log.warning("%s: its %s result is not written", fenced, status)
                return
            except Exception as error:
                problem = decisions.write_failure_message(error) or (
                    f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
                )
                unreachable = decisions.database_unreachable(error)
            tries, failures = tries + 1, failures + (0 if unreachable else 1)
            delay_s = decisions.next_final_write_delay_s(
                failures if not unreachable else tries,
                unreachable=unreachable,
                remaining_s=deadline - time.monotonic(),
                delays_s=FINAL_WRITE_RETRY_DELAYS_S,
            )
            if delay_s is None:
                break
            time.sleep(delay_s)
        # An unreachable database: the whole final state, figures included, waits for it.
        self.pending.add(self.run_id, values if unreachable else attempt_values, run_dir=self.run_dir, parts=parts)
        log.error(
            "run %s ended %s but the database could not record it (%s); it is kept in %s and written when "
            "the database answers again (by the worker, or python -m lab runs recover)",
            self.run_id,
            status,
            problem,
            self.run_dir / PENDING_FINAL_STATE_FILE,
        )

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
