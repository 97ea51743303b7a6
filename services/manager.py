"""The lab's service manager: start, reuse, check and stop managed services by name.

The database is the source of truth (``services`` table): each record holds the pid,
its creation time, port, URL and config hash. So ``python -m lab services up`` in one
process and ``services down`` in another agree, and a lab restarted after a crash finds
and stops the children it left behind. Records are kept per worker (``worker`` column):
each worker manages the services on its own machine, under its own name.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psutil
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from db import worker_store
from services.catalog import ServiceConfig, ServiceKind, build_service, stop_rank
from services.processes import read_log_tail, stop_process_tree
from services.redis_server import redis_ping
from services.supervisor import ManagedService


@dataclass
class ServiceStatus:
    """What ``services status`` reports for one service."""

    name: str
    kind: str
    state: str  # running | stopped | dead | unhealthy
    url: str | None
    pid: int | None
    started_at: str | None
    config: dict[str, Any] | None
    log_path: str | None
    message: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def process_matches(pid: int | None, created_at_epoch_s: float | None) -> bool:
    """True when ``pid`` is alive and is the very process we started (not a reused pid)."""
    if not pid:
        return False
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return not (created_at_epoch_s is not None and abs(process.create_time() - created_at_epoch_s) > 1.0)
    except psutil.NoSuchProcess:
        return False


def main_process_gone(pid: int, created_at_epoch_s: float | None) -> bool:
    """True when the process we started as ``pid`` has ended (exited, or a zombie)."""
    try:
        process = psutil.Process(pid)
        if created_at_epoch_s is not None and abs(process.create_time() - created_at_epoch_s) > 1.0:
            return False  # the pid was reused by an unrelated process
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def probe_url(kind: str, url: str | None, timeout_s: float = 2.0, *, health_path: str = "/health") -> bool:
    """Health of a service at ``url``: PING for Redis, ``GET health_path`` for the others."""
    if not url:
        return False
    if kind == ServiceKind.REDIS:
        host_port = url.split("://", 1)[-1].split("/", 1)[0]
        host, port = host_port.rsplit(":", 1)
        return redis_ping(host, int(port), timeout_s=timeout_s)
    try:
        return httpx.get(f"{url}{health_path}", timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


def _health_path(config: dict[str, Any] | None) -> str:
    """The readiness path a recorded config names (``command`` services), else ``/health``."""
    return str(((config or {}).get("params") or {}).get("health_path") or "/health")


class ServiceManager:
    """Starts and stops the lab's services; one instance of each name at a time."""

    def __init__(
        self, *, engine: Engine, logs_dir: Path, owner_pid: int | None = None, worker: str | None = None
    ) -> None:
        self.engine = engine
        self.logs_dir = Path(logs_dir)
        self.owner_pid = owner_pid
        # Services run on the worker's own machine: this manager sees only that worker's records.
        self.worker = worker or socket.gethostname()  # the default worker name is the host's

    def _service_url(self, service: ManagedService, kind: str) -> str:
        return f"redis://{service.host}:{service.port}/0" if kind == ServiceKind.REDIS else service.url

    def _reusable_url(self, name: str, config: ServiceConfig) -> str | None:
        """The URL of ``name`` when it already runs with ``config``: the very process recorded
        (not a reused pid) and healthy; None when it must be (re)started."""
        with Session(self.engine) as session:
            record = worker_store.get_service_record(session=session, name=name, worker=self.worker)
            if (
                record is not None
                and record.config_hash == config.config_hash
                and process_matches(record.pid, record.process_created_at_epoch_s)
                and probe_url(record.kind, record.url, health_path=_health_path(record.config))
            ):
                return str(record.url)
        return None

    def ensure(self, name: str, config: ServiceConfig, *, abort: Callable[[], bool] | None = None) -> str:
        """Make ``name`` run with ``config``; reuse a healthy one with the same config.

        Returns its URL (``redis://...`` for Redis). Raises ServiceStartError, or
        ServiceStartAborted when ``abort()`` turns true while it starts.
        """
        if (url := self._reusable_url(name, config)) is not None:
            return url
        self.stop(name)
        log_path = self.logs_dir / f"{name}.log"
        service = build_service(name, config, log_path=log_path)
        worker_store.upsert_service_record(
            engine=self.engine,
            worker=self.worker,
            name=name,
            kind=config.kind,
            state="starting",
            config=config.to_dict(),
            config_hash=config.config_hash,
            log_path=str(log_path),
            owner_pid=self.owner_pid,
            pid=None,
            url=None,
            port=None,
            message=None,
        )

        def record_spawn(pid: int) -> None:
            # Record the pid as soon as the child exists, so a crash during the
            # (long) readiness wait still leaves a trace to clean up.
            worker_store.upsert_service_record(
                engine=self.engine,
                worker=self.worker,
                name=name,
                pid=pid,
                port=service.port,
                process_created_at_epoch_s=psutil.Process(pid).create_time(),
            )

        service.on_spawn = record_spawn
        service.abort = abort
        try:
            service.start()
        except Exception as error:
            worker_store.upsert_service_record(
                engine=self.engine, worker=self.worker, name=name, state="failed", message=str(error)[-4000:]
            )
            raise
        url = self._service_url(service, config.kind)
        worker_store.upsert_service_record(
            engine=self.engine,
            worker=self.worker,
            name=name,
            state="running",
            url=url,
            started_at=datetime.fromtimestamp(service.started_at or time.time(), UTC),
        )
        return url

    def stop(self, name: str) -> bool:
        """Stop ``name`` if the lab started it and it still runs. True if something was stopped."""
        with Session(self.engine) as session:
            record = worker_store.get_service_record(session=session, name=name, worker=self.worker)
            if record is None:
                return False
            pid, created = record.pid, record.process_created_at_epoch_s
        stopped = False
        if pid and process_matches(pid, created):  # a pid recorded and still the very process we started
            stop_process_tree(pid, grace_s=15.0)
            stopped = True
        elif pid and main_process_gone(pid, created):
            # The service's main process died (gone, or a zombie not yet reaped); anything
            # it left in its process group (the group id is its pid, and Linux never reuses
            # a pid still in use as a group id) is stopped too. A live pid with another
            # creation time belongs to someone else and is left alone.
            stop_process_tree(int(pid), grace_s=5.0)
        worker_store.upsert_service_record(engine=self.engine, worker=self.worker, name=name, state="stopped", pid=None)
        return stopped

    def stop_all(self, names: list[str] | None = None, *, only_own: bool = False) -> list[str]:
        """Stop every recorded service (or those named; or, with ``only_own``, those this
        manager's owner started). Returns the names stopped."""
        with Session(self.engine) as session:
            records = worker_store.list_service_records(session=session, worker=self.worker)
        if only_own:
            records = [record for record in records if record.owner_pid == self.owner_pid]
        stopped = []
        for record in sorted(records, key=lambda r: stop_rank(r.kind)):  # dependants first
            if names and record.name not in names:
                continue
            if self.stop(record.name):
                stopped.append(record.name)
        return stopped

    def stop_stale(self) -> list[str]:
        """Stop services whose owning lab process is gone (left by a killed lab)."""
        with Session(self.engine) as session:
            records = worker_store.list_service_records(session=session, worker=self.worker)
        stale = []
        for record in records:
            owner_gone = record.owner_pid is not None and not psutil.pid_exists(record.owner_pid)
            if owner_gone and record.owner_pid != os.getpid() and self.stop(record.name):
                stale.append(record.name)
        return stale

    def status(self) -> list[ServiceStatus]:
        """State of every recorded service, checked now."""
        with Session(self.engine) as session:
            records = worker_store.list_service_records(session=session, worker=self.worker)
        result = []
        for record in records:
            alive = process_matches(record.pid, record.process_created_at_epoch_s)
            if record.state in ("running", "starting") and not alive:
                state = "dead"
            elif alive:
                healthy = probe_url(record.kind, record.url, health_path=_health_path(record.config))
                # A model still loading is "starting", not "unhealthy".
                state = "running" if healthy else "starting" if record.state == "starting" else "unhealthy"
            else:
                state = record.state
            result.append(
                ServiceStatus(
                    name=record.name,
                    kind=record.kind,
                    state=state,
                    url=record.url if alive else None,
                    pid=record.pid if alive else None,
                    started_at=record.started_at.isoformat() if record.started_at and alive else None,
                    config=record.config,
                    log_path=record.log_path,
                    message=record.message,
                )
            )
        return result

    def log_tail(self, name: str, max_lines: int = 40) -> str:
        with Session(self.engine) as session:
            record = worker_store.get_service_record(session=session, name=name, worker=self.worker)
        if record is None or not record.log_path:
            return ""
        return read_log_tail(Path(record.log_path), max_lines)

    def pid_of(self, name: str) -> int | None:
        with Session(self.engine) as session:
            record = worker_store.get_service_record(session=session, name=name, worker=self.worker)
            if record and process_matches(record.pid, record.process_created_at_epoch_s):
                return record.pid
        return None
