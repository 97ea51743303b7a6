"""Versioned schema changes: a documented, dependency-free equivalent of Alembic.

``schema_version`` holds one integer. ``MIGRATIONS[n]`` moves a database from version
``n`` to ``n + 1`` in one transaction and never drops data; ``upgrade`` applies the
missing ones in order. An empty database is created from the ORM models, which already
have every column, and stamped with the latest version: migrations only ever run on
databases made before them, so they need no "does the column exist" guard.
To change the schema: add a column to the model AND append a migration that adds it
with ``ALTER TABLE``, then bump nothing else.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Connection, Engine, inspect, text

from db.models import Base


def _create_schema(connection: Connection) -> None:
    Base.metadata.create_all(connection)


MIGRATIONS: list[Callable[[Connection], None]] = [
    _create_schema,  # 0 -> 1
]

LATEST_VERSION = len(MIGRATIONS)


def current_version(connection: Connection) -> int:
    """The schema version of the connected database (0 for an empty one)."""
    if not inspect(connection).has_table("schema_version"):
        return 0
    row = connection.execute(text("SELECT version FROM schema_version WHERE id = 1")).first()
    return int(row[0]) if row else 0


def upgrade(engine: Engine) -> int:
    """Bring the database to ``LATEST_VERSION``; returns the version it started at."""
    with engine.begin() as connection:
        start = current_version(connection)
        if start == 0:
            _create_schema(connection)  # every column of the models: no migration to replay
        else:
            for version in range(start, LATEST_VERSION):
                MIGRATIONS[version](connection)
        if start == 0:
            connection.execute(text("INSERT INTO schema_version (id, version) VALUES (1, :v)"), {"v": LATEST_VERSION})
        elif start < LATEST_VERSION:
            connection.execute(text("UPDATE schema_version SET version = :v WHERE id = 1"), {"v": LATEST_VERSION})
    return start
