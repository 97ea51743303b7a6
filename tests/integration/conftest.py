"""Integration fixtures: one PostgreSQL cluster for the whole test run, a fresh database per test;
private labs, the OpenAI stub, and worker processes on a shared queue.

PostgreSQL: ``LAB_TEST_POSTGRES_URL`` when set; otherwise a private cluster from Debian's
binaries (on a free loopback port, as the ``postgres`` user), started once per run. The tests
that take the database away (an outage) stop and start that same cluster; every test that
needs PostgreSQL is in one xdist group (tests/conftest.py), so none of them runs while another
has it stopped. Tests that need it are skipped with the reason when no cluster can be made.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from db.engine import make_engine
from db.migrations import upgrade
from services.processes import find_free_port
from services.supervisor import ManagedService
from tests.stub_openai import StubServer
from tests.support.integration_lab import Lab, openai_stub_service
from tests.support.integration_postgres import PostgresCluster
from tests.support.integration_workers import WorkerProcess, registered, wait_until


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """The run's private PostgreSQL cluster (one per run); a test that stops it starts it again."""
    cluster = PostgresCluster()
    try:
        yield cluster
    finally:
        cluster.remove()


@pytest.fixture(scope="session")
def postgres_server_url(request: pytest.FixtureRequest) -> str:
    """A PostgreSQL server URL for the whole run: ``LAB_TEST_POSTGRES_URL`` or the private cluster."""
    url = os.environ.get("LAB_TEST_POSTGRES_URL")
    if url:
        return url
    cluster: PostgresCluster = request.getfixturevalue("postgres_cluster")
    return cluster.url


@contextmanager
def fresh_database(server_url: str) -> Iterator[str]:
    """A new, empty database on ``server_url`` (its URL); dropped afterwards."""
    name = f"lab_test_{uuid.uuid4().hex[:12]}"
    # No pool: a test may stop the server in between, which kills pooled connections.
    admin = create_engine(server_url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    with admin.connect() as connection:
        connection.execute(text(f"CREATE DATABASE {name}"))
    try:
        yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()


@pytest.fixture()
def postgres_database_url(postgres_server_url: str) -> Iterator[str]:
    """A fresh, empty database on the run's server; dropped afterwards."""
    with fresh_database(postgres_server_url) as url:
        yield url


@pytest.fixture()
def outage_database_url(postgres_cluster: PostgresCluster) -> Iterator[str]:
    """A fresh database on the private cluster, for a test that stops the cluster mid-test;
    the cluster is running again afterwards (whatever the test left)."""
    try:
        with fresh_database(postgres_cluster.url) as url:
            yield url
    finally:
        postgres_cluster.start()  # a no-op answer (non-zero) when it is already running


@pytest.fixture()
def lab(tmp_path: Path) -> Iterator[Lab]:
    """A private lab (data folder, SQLite file, settings, worker); its services stopped afterwards."""
    instance = Lab(tmp_path / "lab-data")
    try:
        yield instance
    finally:
        instance.close()


@pytest.fixture()
def stub(tmp_path: Path) -> Iterator[ManagedService]:
    """The OpenAI stub (0.2 s per completion) as its own process on a free loopback port."""
    with openai_stub_service(tmp_path / "stub.log") as service:
        yield service


@pytest.fixture()
def stub_server() -> Iterator[StubServer]:
    """The OpenAI stub in this process (0.05 s per completion) on a free loopback port."""
    server = StubServer(port=find_free_port(), delay_s=0.05).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture()
def shared_engine(postgres_database_url: str) -> Iterator[Engine]:
    """An engine on a fresh PostgreSQL database with the lab's schema (the shared queue)."""
    engine = make_engine(postgres_database_url)
    upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture()
def start_workers(
    postgres_database_url: str, shared_engine: Engine, tmp_path: Path
) -> Iterator[Callable[..., list[WorkerProcess]]]:
    """Starts ``python -m lab worker`` processes (name, labels) on the shared queue; stopped afterwards."""
    started: list[WorkerProcess] = []

    def start(*name_labels: tuple[str, str]) -> list[WorkerProcess]:
        # Started back to back, before either has registered: they race for the same queue.
        workers = [
            WorkerProcess(name=name, labels=labels, database_url=postgres_database_url, data_dir=tmp_path / name)
            for name, labels in name_labels
        ]
        started.extend(workers)
        wait_until(lambda: all(registered(shared_engine, w.name) for w in workers), 60, "workers to register", workers)
        return workers

    yield start
    for worker in started:
        worker.stop()
