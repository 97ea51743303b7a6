"""Fixtures shared by the unit tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from db import migrations
from db.engine import make_engine


@pytest.fixture()
def engine(tmp_path: Path) -> Engine:
    """A fresh SQLite database of the test's own, at the latest schema."""
    engine = make_engine(f"sqlite:///{tmp_path / 'lab.db'}")
    migrations.upgrade(engine)
    return engine
