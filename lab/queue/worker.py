"""The queue worker: takes the next queued run it may take from its dispatch and executes it, one
at a time, independent of browser tabs and reruns. The dispatch (lab.queue.dispatch) is
procrastinate's on PostgreSQL, many machines sharing the queue (docs/SCALING.md), and a local one
on SQLite; the worker's heartbeat says it is alive to it and lets it find lost workers' runs.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from db import store, worker_store
from db.engine import sqlite_file_identity, sqlite_path
from lab.backends import CACHE_SUFFIX, managed_backend_names
from lab.context import LabContext
from lab.measurement.hardware import machine_identity, worker_hardware
from lab.queue import experiments, long_experiments, long_gate
from lab.queue.dispatch import Claim, Dispatch, LocalDispatch
from lab.queue.idle_stop import BackendInUse, idle_backends_to_stop
from lab.queue.worker_lock import WorkerBusyError, WorkerLock
from lab.run.decisions import write_failure_message
from lab.run.final_state import PendingFinalStates
from lab.run.runner import RunExecutor
from lab.settings import Settings
from services.catalog import stop_rank
from services.manager import ServiceManager
from services.processes import stop_process_tree

log = logging.getLogger(__name__)

# How long an orphaned k6 (left by a killed worker) is given to stop before it is killed.
ORPHANED_K6_GRACE_S = 5.0
# How long stopping waits for the heartbeat thread's last write.
HEARTBEAT_JOIN_TIMEOUT_S = 10.0


def open_dispatch(
    *, engine: Engine, settings: Settings, worker_name: str, labels: Collection[str], hardware: dict[str, Any], pid: int
) -> Dispatch:
    """The dispatch of this database: procrastinate's on PostgreSQL, the local one on SQLite."""
    if engine.dialect.name == "postgresql":
        from lab.queue.procrastinate_dispatch import ProcrastinateDispatch  # procrastinate: only where it serves

        return ProcrastinateDispatch(
            engine=engine, settings=settings, worker_name=worker_name, labels=labels, hardware=hardware, worker_pid=pid
        )
    return LocalDispatch(engine=engine, worker_name=worker_name, labels=labels, hardware=hardware, worker_pid=pid)


class DatabaseReplacedError(RuntimeError):
    """The worker's SQLite file was removed or replaced under it."""


class Worker:
    """A queue worker: one run at a time, independent of browser tabs and reruns.

    It has a name (the host's by default) and labels; on a shared PostgreSQL queue many
    workers on many machines take runs side by side. While serving it renews a heartbeat and
    interrupts the runs of workers its dispatch finds lost (silent for longer than the lease).
    """

    def __init__(self, *, context: LabContext, name: str | None = None, labels: list[str] | None = None) -> None:
        self.context = context
        self.engine = context.engine
        self.settings = context.settings
        self.name = name or self.settings.worker_name
        self.labels = sorted(set(self.settings.worker_labels if labels is None else labels))
        self.hardware = worker_hardware()
        # What a long experiment's runs must all run on (lab.queue.long_experiments).
        self.identity = machine_identity()
        self.services = context.service_manager(worker=self.name, owner_pid=os.getpid())
        self.dispatch = open_dispatch(
            engine=self.engine,
            settings=self.settings,
            worker_name=self.name,
            labels=self.labels,
            hardware=self.hardware,
            pid=os.getpid(),
        )
        # Final states of runs the database could not record: written before the next claim.
        self.pending_final_states = PendingFinalStates()
        self._stop = threading.Event()
        # The SQLite file this worker's connections use (the engine has just opened it).
        self._database = sqlite_file_identity(self.settings.resolved_database_url)
        self._heartbeat_stop = threading.Event()
        self._current_run_id: int | None = None
        self._previous_heartbeat_at: datetime | None = None
        # The idle stop's clock, and when a run last used each backend (lab.queue.idle_stop).
        self.clock: Callable[[], float] = time.monotonic
        self._backend_used_s: dict[str, float] = {}

    # -- on the queue ---------------------------------------------------------------------
    def register(self) -> None:
        """Take this worker's name on the queue. Raises WorkerBusyError while a live worker
        elsewhere holds it (its heartbeat younger than the lease)."""
        host = socket.gethostname()
        with Session(self.engine) as session:
            record = worker_store.get_worker(session=session, name=self.name)
            # A run this name left active ended, at the latest, at the last heartbeat before now.
            self._previous_heartbeat_at = record.heartbeat_at if record is not None else None
            age_s = worker_store.heartbeat_age_s(session=session, record=record) if record is not None else None
            if (
                record is not None
                and record.state == "running"
                and age_s is not None
                and age_s < self.settings.worker_lease_s
            ):
                # Same host and its process gone: this is a restart, not a second worker.
                restarted = record.host == host and (
                    record.pid == os.getpid() or not psutil.pid_exists(record.pid or 0)
                )
                if not restarted:
                    raise WorkerBusyError(
                        f"a worker named {self.name!r} is alive on {record.host} (pid {record.pid}, heartbeat "
                        f"{age_s:.0f} s ago): give this one another --name"
                    )
        worker_store.register_worker(
            engine=self.engine, name=self.name, host=host, pid=os.getpid(), labels=self.labels, hardware=self.hardware
        )

    def recover(self) -> None:
        """After a crash: mark this worker's runs left active as interrupted and stop its stale services.

        Called while holding the worker lock and the name, so no other process runs them.
        Other workers' runs are left to their lease (``reap_lost_workers``). Final states kept
        in the run folders during a database outage are written first: they hold the figures.
        """
        self.pending_final_states.load(self.settings.runs_dir)
        if written := self.pending_final_states.save(self.engine):
            log.warning(
                "wrote the final states of runs %s, kept in their folders while the database was unreachable", written
            )
        interrupted = store.mark_orphaned_runs_interrupted(
            engine=self.engine, worker_name=self.name, stopped_at=self._previous_heartbeat_at
        )
        stale = self.services.stop_stale()
        k6_pids = self._stop_orphaned_k6(interrupted)
        if interrupted or stale or k6_pids:
            log.warning(
                "recovered: runs interrupted %s, stale services stopped %s, orphaned k6 stopped %s",
                interrupted,
                stale,
                k6_pids,
            )

    def _stop_orphaned_k6(self, run_ids: list[int]) -> list[int]:
        """Stop the k6 processes a killed worker left loading (found by their run folder in argv)."""
        if not run_ids:
            return []
        folders = [f"{self.settings.runs_dir / str(run_id)}{os.sep}" for run_id in run_ids]
        stopped = []
        for process in psutil.process_iter(["cmdline"]):
            try:
                argv = process.info["cmdline"] or []
                if argv and Path(argv[0]).name == "k6" and any(folder in arg for arg in argv for folder in folders):
                    stop_process_tree(process.pid, grace_s=ORPHANED_K6_GRACE_S)
                    stopped.append(process.pid)
            except psutil.Error:
                continue
        return stopped

    def interrupt_lost_runs(self) -> list[int]:
        """Interrupt the active runs of workers the dispatch finds lost."""
        interrupted = self.dispatch.interrupt_lost_runs()
        if interrupted:
            log.warning("interrupted runs %s of workers that stopped renewing their heartbeat", interrupted)
        return interrupted

    def heartbeat(self) -> None:
        """Say this worker is alive (and what it runs), then interrupt lost workers' runs."""
        self.dispatch.beat(current_run_id=self._current_run_id)
        self.interrupt_lost_runs()

    def _heartbeat_loop(self) -> None:
        # Its own thread: a worker busy with a long run still says it is alive.
        failing = False
        while not self._heartbeat_stop.wait(self.settings.worker_heartbeat_interval_s):
            try:
                self.heartbeat()
                failing = False
            except Exception as error:  # a database outage: one line, not one traceback every beat
                if not failing:
                    cause = error.__cause__ or error
                    log.warning("heartbeat failed (%s); retrying", write_failure_message(error) or cause)
                failing = True

    @contextmanager
    def serving(self) -> Iterator[Worker]:
        """Registered, recovered and heart-beating for the duration of the block."""
        self.register()
        self.dispatch.open()
        self.recover()
        self.interrupt_lost_runs()
        self._heartbeat_stop.clear()
        thread = threading.Thread(target=self._heartbeat_loop, name="worker-heartbeat", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._heartbeat_stop.set()
            thread.join(timeout=HEARTBEAT_JOIN_TIMEOUT_S)
            try:
                self.dispatch.close()
            except Exception:
                log.exception("worker %s could not leave the queue", self.name)
            try:
                worker_store.mark_worker_stopped(engine=self.engine, name=self.name)
            except Exception:
                log.exception("could not mark worker %s stopped", self.name)

    # -- runs -----------------------------------------------------------------------------
    def run_one(self) -> int | None:
        """Execute the next queued run this worker may take, if any; returns its id. Final
        states the database could not record are written first (the database is back)."""
        if len(self.pending_final_states) and (written := self.pending_final_states.save(self.engine)):
            log.warning("the database answers again: wrote the final states of runs %s", written)
        self.advance_long_experiments()
        claim: Claim | None = self.dispatch.claim(
            excluded_experiment_ids=long_gate.closed_experiments(
                self.engine,
                worker_name=self.name,
                labels=self.labels,
                identity=self.identity,
                commit=self.hardware.get("lab_version"),
            )
        )
        if claim is None:
            return None
        run_id = self._current_run_id = claim.run_id
        try:
            RunExecutor(
                engine=self.engine,
                settings=self.settings,
                services=self.services,
                run_id=run_id,
                pending_final_states=self.pending_final_states,
                check_settings=lambda claimed: long_gate.check_backend_settings(self.engine, claimed, self.name),
                fencing_token=claim.fencing_token,
            ).execute()
        finally:
            self._current_run_id = None
            self._finish(claim)
            self._note_backend_used(run_id)
        self._record_wall_time_ratio(run_id)
        self.advance_long_experiments()
        return run_id

    def advance_long_experiments(self) -> None:
        """Queue what each running long experiment needs next (lab.queue.long_experiments), and
        write the report of one that just ended. Never fails the worker: a plan left as it is
        advances at the next call."""
        for long_id in long_experiments.running_ids(self.engine):
            try:
                advanced = long_experiments.advance(
                    self.engine, long_id, priority=self.settings.long_experiment_priority
                )
            except Exception as error:
                log.warning("long experiment #%s could not advance: %s", long_id, write_failure_message(error) or error)
                continue
            if advanced is None:
                continue
            log.info("%s", advanced.line)
            if advanced.ended:
                self._write_long_report(long_id)

    def _finish(self, claim: Claim) -> None:
        # The job's end is the dispatch's record only: the run's state is already written.
        try:
            self.dispatch.finish(claim)
        except Exception as error:
            log.warning("run %s ended but its job could not be ended: %s", claim.run_id, error.__cause__ or error)

    def _write_long_report(self, long_id: int) -> None:
        from lab.queue.long_status import write_report

        try:
            if written := write_report(settings=self.settings, long_id=long_id):
                log.info("long experiment #%s ended: report written to %s", long_id, written)
        except Exception:
            log.exception("long experiment #%s ended but its report could not be written", long_id)

    def _note_backend_used(self, run_id: int) -> None:
        """Remember that a run just used its backend (its idle time starts now)."""
        try:
            with Session(self.engine) as session:
                run = store.get_run(session=session, run_id=run_id)
                backend = str((run.spec or {}).get("backend") or "") if run is not None else ""
        except SQLAlchemyError:
            return  # the idle stop then counts from the backend's start: it only stops later
        if backend:
            self._backend_used_s[backend.removesuffix(CACHE_SUFFIX)] = self.clock()

    def stop_idle_backends(self) -> list[str]:
        """Between runs: stop the backends this worker started that no run used for
        ``backend_idle_stop_s`` and no queued run needs (lab.queue.idle_stop). Returns their names."""
        idle_stop_s = self.settings.backend_idle_stop_s
        if idle_stop_s <= 0:
            return []
        managed = set(managed_backend_names())
        with Session(self.engine) as session:
            records = [
                record
                for record in worker_store.list_service_records(session=session, worker=self.name)
                if record.name in managed and record.state in ("running", "starting", "unhealthy")
            ]
            queued = {
                str((run.spec or {}).get("backend") or "").removesuffix(CACHE_SUFFIX)
                for run in store.list_runs(session=session, statuses=["queued"])
            }
        now_s = self.clock()
        in_use = [
            BackendInUse(
                name=record.name,
                started_by_worker=record.owner_pid is not None and record.owner_pid == self.services.owner_pid,
                # Not used by a run of this worker yet: idle from when the worker first sees it.
                last_used_s=self._backend_used_s.setdefault(record.name, now_s),
            )
            for record in records
        ]
        stopped = idle_backends_to_stop(in_use, queued_backends=queued, now_s=now_s, idle_stop_s=idle_stop_s)
        for name in stopped:
            log.info("stopping %s: no run used it for %g s and none queued needs it", name, idle_stop_s)
            self.services.stop(name)
            self._backend_used_s.pop(name, None)
        return stopped

    def _record_wall_time_ratio(self, run_id: int) -> None:
        """Update the run's experiment's wall-time ratio (the lab's overhead so far)."""
        try:
            with Session(self.engine) as session:
                run = store.get_run(session=session, run_id=run_id)
                experiments.record_wall_time_ratio(session=session, experiment_id=run.experiment_id if run else None)
        except SQLAlchemyError as error:  # a figure about the lab itself: never worth failing the worker
            log.warning("could not store the wall-time ratio: %s", write_failure_message(error))

    def run_forever(self) -> None:
        """Execute queued runs until stopped. Raises WorkerBusyError if another worker runs
        on this data folder, or a live one elsewhere has this worker's name."""
        with WorkerLock(self.settings.data_dir), self.serving():
            claim_problem: str | None = None
            while not self._stop.is_set():
                self._check_database_file()
                try:
                    ran = self.run_one()
                    claim_problem = None
                except Exception as error:
                    if problem := write_failure_message(error):
                        if problem != claim_problem:  # once, not every poll, while the disk stays full
                            log.error("the worker could not claim a run: %s; going on", problem)
                        claim_problem = problem
                    else:
                        log.exception("the worker hit an error between runs; going on")
                    ran = None
                if ran is None:
                    self._stop_idle_backends_quietly()
                    self._stop.wait(self.settings.worker_poll_interval_s)

    def _stop_idle_backends_quietly(self) -> None:
        # A backend left up is memory, never a reason to stop serving the queue.
        try:
            self.stop_idle_backends()
        except Exception as error:
            log.warning("the idle stop could not run: %s", write_failure_message(error) or error)

    def _check_database_file(self) -> None:
        """Raise DatabaseReplacedError when the SQLite file was removed or replaced: the open
        connections would go on with the removed file while the CLI and the pages use a new
        one, so nothing queued there would ever run."""
        url = self.settings.resolved_database_url
        if self._database and sqlite_file_identity(url) != self._database:
            raise DatabaseReplacedError(
                f"the database file {sqlite_path(url)} was removed or replaced while the worker ran; "
                "start the lab again"
            )

    def stop(self) -> None:
        self._stop.set()


def stop_own_services(manager: ServiceManager) -> None:
    """Stop every service this process started, each on its own: one whose record cannot be
    written (a full disk) must not leave the next one running. One line per failure."""
    try:
        with Session(manager.engine) as session:
            names = [
                record.name
                for record in worker_store.list_service_records(session=session)
                if record.owner_pid == manager.owner_pid
            ]
    except SQLAlchemyError as error:
        print(
            f"error: cannot read the services' records ({str(getattr(error, 'orig', error)).splitlines()[0]})",
            file=sys.stderr,
        )
        return
    for name in sorted(names, key=stop_rank):  # dependants first
        try:
            manager.stop(name)
        except (SQLAlchemyError, OSError) as error:
            detail = str(getattr(error, "orig", None) or error).splitlines()[0]
            print(f"error: {name} was stopped but its record could not be written ({detail})", file=sys.stderr)
