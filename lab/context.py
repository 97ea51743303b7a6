"""The lab context: what every entry point shares, built once from the settings.

The CLI commands, the queue worker and the pages all need the same three things: the
settings, the database engine and a service manager for this worker's machine. They take
a :class:`LabContext` instead of building each of them on their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from sqlalchemy import Engine

from db.engine import get_engine
from lab.settings import Settings, get_settings
from services.manager import ServiceManager


class StorageError(RuntimeError):
    """The data directory or the database cannot be used (the message says why)."""


@dataclass
class LabContext:
    """Settings, engine and service manager of one lab process (the engine opens lazily)."""

    settings: Settings = field(default_factory=get_settings)

    @cached_property
    def engine(self) -> Engine:
        """The configured database's engine, schema created or upgraded; StorageError when
        the data folder or the database cannot be used."""
        try:
            return get_engine(self.settings.resolved_database_url)
        except OSError as error:  # the data folder is a file, read-only, or cannot be created
            raise StorageError(str(error)) from error

    @property
    def data_dir(self) -> Path:
        return self.settings.data_dir

    def service_manager(self, *, worker: str | None = None, owner_pid: int | None = None) -> ServiceManager:
        """A service manager for this machine's services (this worker's records only).

        ``owner_pid`` marks services the caller started as its own (a worker stops them on
        exit); pages and CLI lookups leave it unset."""
        return ServiceManager(
            engine=self.engine,
            logs_dir=self.settings.logs_dir,
            owner_pid=owner_pid,
            worker=worker or self.settings.worker_name,
        )
