"""Database engine: SQLite (WAL, busy timeout) by default, any SQLAlchemy URL otherwise;
and which file a SQLite URL names (to notice it removed or replaced under a running process)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, cast
from urllib.parse import unquote, urlsplit

from sqlalchemy import CursorResult, Engine, Executable, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

SQLITE_BUSY_TIMEOUT_MS = 30_000

_engines: dict[str, Engine] = {}
_engines_lock = threading.Lock()


def _configure_sqlite(dbapi_connection: Any, _connection_record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # WAL lets the Streamlit readers poll while the worker writes; the busy timeout
    # makes a writer wait for another instead of failing with "database is locked".
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def make_engine(database_url: str) -> Engine:
    """Create an engine for ``database_url``; for SQLite, create its folder and set pragmas."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        if (path := sqlite_path(database_url)) is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, "check_same_thread": False})
        event.listen(engine, "connect", _configure_sqlite)
        return engine
    return create_engine(url, pool_pre_ping=True)


def get_engine(database_url: str) -> Engine:
    """The process-wide engine for ``database_url`` (one per URL), schema upgraded."""
    with _engines_lock:
        engine = _engines.get(database_url)
        if engine is None:
            from db.migrations import upgrade

            engine = make_engine(database_url)
            upgrade(engine)
            _engines[database_url] = engine
        return engine


def sqlite_path(database_url: str) -> Path | None:
    """The file of a SQLite database URL; None for another database or an in-memory one."""
    url = make_url(database_url)
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    if url.query.get("uri") == "true" and url.database.startswith("file:"):
        # SQLite's URI filename (``file:PATH?mode=ro``): the file is PATH, not a folder "file:".
        path = urlsplit(url.database).path
        return None if path in ("", ":memory:") or url.query.get("mode") == "memory" else Path(unquote(path))
    return Path(url.database)


def sqlite_file_identity(database_url: str) -> tuple[int, int] | None:
    """(device, inode) of a SQLite database file, or None (not SQLite, or the file is gone).

    A long-lived process compares it with the one it saw at start: a file removed or
    replaced under its open connections is a database the other processes no longer use."""
    path = sqlite_path(database_url)
    if path is None:
        return None
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


def rows_changed(session: Session, statement: Executable) -> int:
    """Execute an UPDATE or DELETE and return how many rows it changed. SQLAlchemy runs them into
    a ``CursorResult`` (which has ``rowcount``) but types ``Session.execute``'s answer as the
    general ``Result``, so the cast says what it is."""
    return cast("CursorResult[Any]", session.execute(statement)).rowcount
