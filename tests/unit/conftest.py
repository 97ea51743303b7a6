"""Fixtures shared by the unit tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from db import migrations
from db.engine import make_engine
from tests.support.isolation import isolate, needs_isolation


@pytest.fixture()
def engine(tmp_path: Path) -> Engine:
    """A fresh SQLite database of the test's own, at the latest schema."""
    engine = make_engine(f"sqlite:///{tmp_path / 'lab.db'}")
    migrations.upgrade(engine)
    return engine


@pytest.fixture(autouse=True)
def _no_process_no_network(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A unit test not marked integration may not start a process or open a socket (tests/support/isolation.py)."""
    if needs_isolation(request.node):
        isolate(monkeypatch)
