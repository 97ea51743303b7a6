"""Many lab processes opening one database at the same instant (issue 25, item 1): on SQLite
and on PostgreSQL, empty or written by the first release, every process succeeds and finds
today's schema. Each process is a real ``python`` started from this checkout; they wait for
one common instant, then open the database (``db.engine.get_engine``: create or upgrade
under the schema lock) and read the runs with every column of today's model.

The "before" figures in RELIABILITY.md are this test run against the previous commit's
checkout: ``LAB_SCHEMA_TEST_CHECKOUT=/path/to/old/checkout``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from db import migrations
from db.engine import make_engine
from services.processes import PROJECT_ROOT
from tests.support.old_schema import version_1_database

pytestmark = pytest.mark.integration

PROCESSES = 8
CHECKOUT = Path(os.environ.get("LAB_SCHEMA_TEST_CHECKOUT") or PROJECT_ROOT)
# Imports first, then a sleep to the common instant, then the open: the opens coincide.
OPEN_AT = """
import sys, time
from sqlalchemy.orm import Session
from db import store
from db.engine import get_engine
url, start_at = sys.argv[1], float(sys.argv[2])
time.sleep(max(0.0, start_at - time.time()))
with Session(get_engine(url)) as session:
    print(len(store.list_runs(session=session)))
"""


def open_at_once(url: str) -> list[str]:
    """Start ``PROCESSES`` processes that open ``url`` at one instant; the errors of those that failed."""
    start_at = time.time() + 6.0  # enough for every process to have imported the lab (2 busy cores)
    children = [
        subprocess.Popen(
            [sys.executable, "-c", OPEN_AT, url, str(start_at)],
            cwd=CHECKOUT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(PROCESSES)
    ]
    failures = []
    for child in children:
        _out, err = child.communicate(timeout=120)
        if child.returncode != 0:
            failures.append((err.strip().splitlines() or ["?"])[-1][:200])
    return failures


def check_schema(url: str, runs: int) -> None:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            assert migrations.current_version(connection) == migrations.LATEST_VERSION
            assert connection.execute(text("SELECT count(*) FROM runs")).scalar() == runs
    finally:
        engine.dispose()


@pytest.mark.parametrize("first_release", [False, True], ids=["empty", "first-release"])
def test_many_processes_open_one_sqlite_file_at_once(tmp_path: Path, first_release: bool) -> None:
    url = f"sqlite:///{tmp_path / 'lab.db'}"
    if first_release:
        version_1_database(make_engine(url))
    failures = open_at_once(url)
    assert failures == [], f"{len(failures)} of {PROCESSES} failed: {failures}"
    check_schema(url, runs=1 if first_release else 0)


@pytest.mark.parametrize("first_release", [False, True], ids=["empty", "first-release"])
def test_many_processes_open_one_postgresql_database_at_once(postgres_database_url: str, first_release: bool) -> None:
    if first_release:
        engine = make_engine(postgres_database_url)
        version_1_database(engine)
        engine.dispose()
    failures = open_at_once(postgres_database_url)
    assert failures == [], f"{len(failures)} of {PROCESSES} failed: {failures}"
    check_schema(postgres_database_url, runs=1 if first_release else 0)


def test_many_lab_cli_processes_on_a_first_release_sqlite_file(tmp_path: Path) -> None:
    """The command people type, ``python -m lab runs list``, started together (not synchronised
    beyond that: the probe's own case)."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    version_1_database(make_engine(f"sqlite:///{data_dir / 'lab.db'}"))
    env = {**os.environ, "LAB_DATA_DIR": str(data_dir)}
    env.pop("LAB_DATABASE_URL", None)
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "lab", "runs", "list"],
            cwd=CHECKOUT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(PROCESSES)
    ]
    failures = [
        err.strip()[-200:] for child in children for _, err in [child.communicate(timeout=120)] if child.returncode != 0
    ]
    assert failures == [], f"{len(failures)} of {PROCESSES} failed: {failures}"
    check_schema(f"sqlite:///{data_dir / 'lab.db'}", runs=1)
