"""Schema creation and upgrade under the schema lock (real SQLite, threads with their own
engines): many openers at once, on an empty database and on one from the first release,
all succeed and the schema is migrated once. The real-process version, on SQLite and
PostgreSQL, is tests/integration/test_many_processes_one_database.py."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.orm import Session

from db import migrations, store
from db.engine import make_engine
from tests.support.old_schema import version_1_database

OPENERS = 8


def open_at_once(url: str) -> tuple[list[int], list[str]]:
    """``OPENERS`` engines upgrading ``url`` at the same instant: (versions found, errors)."""
    barrier = threading.Barrier(OPENERS)
    started_at: list[int] = []
    errors: list[str] = []

    def open_one() -> None:
        engine = make_engine(url)
        barrier.wait()
        try:
            started_at.append(migrations.upgrade(engine))
            with Session(engine) as session:
                store.list_runs(session=session)  # every column of today's model is there
        except Exception as error:
            errors.append(f"{type(error).__name__}: {error}".splitlines()[0])
        finally:
            engine.dispose()

    threads = [threading.Thread(target=open_one) for _ in range(OPENERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return started_at, errors


def test_many_openers_of_an_empty_database_create_it_once(tmp_path: Path) -> None:
    started_at, errors = open_at_once(f"sqlite:///{tmp_path / 'lab.db'}")
    assert errors == []
    # One created it; every other one waited and found it ready.
    assert sorted(started_at) == [0] + [migrations.LATEST_VERSION] * (OPENERS - 1)


def test_many_openers_of_a_first_release_database_upgrade_it_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    version_1_database(make_engine(url))
    started_at, errors = open_at_once(url)
    assert errors == []
    assert sorted(started_at) == [1] + [migrations.LATEST_VERSION] * (OPENERS - 1)
    engine = make_engine(url)
    with engine.connect() as connection:
        assert migrations.current_version(connection) == migrations.LATEST_VERSION
        assert connection.execute(text("SELECT req_per_s FROM runs")).scalars().all() == [2.5]


def test_a_failed_upgrade_leaves_the_database_as_it_was(tmp_path: Path, monkeypatch) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = make_engine(url)
    version_1_database(engine)

    def broken(connection) -> None:
        raise RuntimeError("a migration that fails half-way")

    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS[:2], broken, *migrations.MIGRATIONS[3:]])
    with contextlib.suppress(RuntimeError):
        migrations.upgrade(engine)
    with engine.connect() as connection:
        # The DDL of migration 1 -> 2 ran inside the same transaction: rolled back with it.
        assert migrations.current_version(connection) == 1
        columns = {row[1] for row in connection.execute(text("PRAGMA table_info(runs)"))}
        assert "worker_name" not in columns
