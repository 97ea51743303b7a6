"""Fixtures for the page tests: a temporary lab data folder, empty or with a seeded database
(what it holds: tests/support/seeded_lab.py); and the one web lab the browser tests share."""

from __future__ import annotations

import dataclasses
import functools
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from db.engine import get_engine, sqlite_path
from lab.measurement import environment, hardware, machine_speed, reference_kernel
from lab.run import k6_driver
from lab.settings import get_settings
from tests.support.browser import SCREENSHOTS, BrowserLab, check_prerequisites, running_lab
from tests.support.isolation import browser_absent, isolate, machine_probes_absent, needs_isolation
from tests.support.seeded_lab import PROJECT_ROOT, SeededLab, seed_database


@pytest.fixture(scope="session", autouse=True)
def _component_scan_once() -> Iterator[None]:
    """Streamlit's AppTest scans every installed distribution for v2 component manifests on
    each run (about a second here, where vLLM brings hundreds of packages); the answer cannot
    change within a test session, so each process scans once."""
    from streamlit.components.v2 import manifest_scanner

    scan = manifest_scanner.scan_component_manifests
    manifest_scanner.scan_component_manifests = functools.cache(scan)
    yield
    manifest_scanner.scan_component_manifests = scan


@pytest.fixture(scope="session")
def browser_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserLab]:
    """``python -m lab start`` (Streamlit and a worker) on a free port with its own data folder,
    one for every browser test that needs the lab as a user starts it: its xdist group keeps
    them on one worker (tests/conftest.py), so Streamlit, the worker and the naive server their
    runs start come up once per test run. Tests that share it pick their own runs by experiment
    name; the one marked ``empty_browser_lab`` runs first and sees it empty."""
    check_prerequisites()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    data_dir = tmp_path_factory.mktemp("browser-lab") / "lab-data"
    try:
        with running_lab(data_dir, PROJECT_ROOT / "test-artifacts" / "browser-lab.log") as url:
            yield BrowserLab(url=url, data_dir=data_dir)
    except RuntimeError as error:
        pytest.fail(str(error))


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


@pytest.fixture(scope="session")
def _seeded_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SeededLab]:
    """The seeded database, written once per process; each ``seed_lab`` gets a copy of the file."""
    template = tmp_path_factory.mktemp("seeded-template") / "lab.db"
    engine = get_engine(f"sqlite:///{template}")
    seeded = seed_database(engine)
    engine.dispose()  # the last connection closed: the WAL is checkpointed into the file
    return template, seeded


@pytest.fixture
def seed_lab(lab_data_dir: Path, _seeded_template: tuple[Path, SeededLab]) -> SeededLab:
    """A lab whose database holds a finished quick seed-exp1 and a few other runs."""
    template, seeded = _seeded_template
    database_url = get_settings().resolved_database_url
    database_file = sqlite_path(database_url)
    assert database_file is not None  # lab_data_dir leaves the lab on SQLite
    shutil.copyfile(template, database_file)
    return dataclasses.replace(seeded, data_dir=lab_data_dir, engine=get_engine(database_url))


@pytest.fixture(autouse=True)
def _no_process_no_network(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A page test not marked integration or browser may not start a process or open a socket.
    The lab's machine probes answer "not available" instead (tests/support/isolation.py)."""
    if needs_isolation(request.node):
        isolate(monkeypatch)
        machine_probes_absent(monkeypatch, environment, machine_speed, reference_kernel, hardware, k6_driver)
        browser_absent(monkeypatch)
