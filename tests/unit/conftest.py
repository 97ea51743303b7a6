"""Fixtures shared by the unit tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from db import migrations
from db.engine import make_engine
from lab.measurement import environment, hardware, machine_speed, reference_kernel
from lab.run import k6_driver
from tests.support.isolation import browser_absent, isolate, machine_probes_absent, needs_isolation


@pytest.fixture()
def engine(tmp_path: Path) -> Engine:
    """A fresh SQLite database of the test's own, at the latest schema."""
    engine = make_engine(f"sqlite:///{tmp_path / 'lab.db'}")
    migrations.upgrade(engine)
    return engine


@pytest.fixture(autouse=True)
def _no_process_no_network(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A unit test not marked integration may not start a process or open a socket (tests/support/isolation.py).
    The lab's machine probes answer "not available" instead (tests/support/isolation.py)."""
    if needs_isolation(request.node):
        isolate(monkeypatch)
        machine_probes_absent(monkeypatch, environment, machine_speed, reference_kernel, hardware, k6_driver)
        browser_absent(monkeypatch)
