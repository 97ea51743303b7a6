"""Fixtures for the page tests: a temporary lab data folder, empty or with a seeded database
(what it holds: tests/support/seeded_lab.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from db.engine import get_engine
from lab.measurement import environment, hardware, machine_speed, reference_kernel
from lab.run import k6_driver
from lab.settings import get_settings
from tests.support.isolation import browser_absent, isolate, machine_probes_absent, needs_isolation
from tests.support.seeded_lab import PROJECT_ROOT, SeededLab, seed_database


@pytest.fixture
def lab_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty lab data folder; the settings (and so the pages) point at it."""
    monkeypatch.setenv("LAB_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("LAB_DATABASE_URL", raising=False)
    monkeypatch.chdir(PROJECT_ROOT)
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


@pytest.fixture
def empty_lab(lab_data_dir: Path) -> Engine:
    """A lab with an empty database."""
    return get_engine(get_settings().resolved_database_url)


@pytest.fixture
def seed_lab(lab_data_dir: Path) -> SeededLab:
    """A lab whose database holds a finished quick seed-exp1 and a few other runs."""
    seeded = seed_database(get_engine(get_settings().resolved_database_url))
    seeded.data_dir = lab_data_dir
    return seeded


@pytest.fixture(autouse=True)
def _no_process_no_network(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A page test not marked integration or browser may not start a process or open a socket.
    The lab's machine probes answer "not available" instead (tests/support/isolation.py)."""
    if needs_isolation(request.node):
        isolate(monkeypatch)
        machine_probes_absent(monkeypatch, environment, machine_speed, reference_kernel, hardware, k6_driver)
        browser_absent(monkeypatch)
