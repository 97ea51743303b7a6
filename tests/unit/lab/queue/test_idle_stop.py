"""The idle stop (issue 39): a backend a run started and nobody used for LAB_BACKEND_IDLE_STOP_S
is stopped between runs; never one a queued run needs, never one started by hand, never at 0."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from db import store, worker_store
from db.models import RunStatus
from lab.context import LabContext
from lab.queue.idle_stop import BackendInUse, idle_backends_to_stop, idle_stop_text
from lab.queue.worker import Worker
from lab.settings import Settings
from services.manager import ServiceManager
from tests.support.queue import enqueue


def test_only_an_unused_backend_the_worker_started_and_no_queued_run_needs_is_stopped() -> None:
    backends = [
        BackendInUse("naive", started_by_worker=True, last_used_s=0.0),
        BackendInUse("vllm", started_by_worker=True, last_used_s=0.0),
        BackendInUse("llamacpp", started_by_worker=False, last_used_s=0.0),  # lab services up
        BackendInUse("other", started_by_worker=True, last_used_s=250.0),  # used 50 s ago
    ]
    stop = idle_backends_to_stop(backends, queued_backends={"vllm"}, now_s=300.0, idle_stop_s=300.0)
    assert stop == ["naive"]
    assert idle_backends_to_stop(backends, queued_backends=set(), now_s=299.0, idle_stop_s=300.0) == []
    assert idle_backends_to_stop(backends, queued_backends=set(), now_s=1e9, idle_stop_s=0) == []


def test_the_rule_is_said_in_words() -> None:
    assert "after 300 s without a run using it" in idle_stop_text(300)
    assert "LAB_BACKEND_IDLE_STOP_S=0" in idle_stop_text(0)


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def test_the_worker_stops_its_idle_backend_between_runs_after_the_queue_empties(
    engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(data_dir=tmp_path, database_url=str(engine.url), worker_name="box-a", backend_idle_stop_s=300)
    worker = Worker(context=LabContext(settings=settings))
    stopped: list[str] = []

    def fake_stop(self: ServiceManager, name: str) -> bool:
        stopped.append(name)
        return True

    monkeypatch.setattr(ServiceManager, "stop", fake_stop)
    worker.clock = clock = FakeClock()
    for name, owner in (("naive", os.getpid()), ("vllm", None)):  # vllm: started by hand
        worker_store.upsert_service_record(engine=engine, worker="box-a", name=name, state="running", owner_pid=owner)
    [queued] = enqueue(engine)  # a queued naive run needs it
    assert worker.stop_idle_backends() == []
    clock.now_s += 301
    assert worker.stop_idle_backends() == []
    store.set_run_status(engine=engine, run_id=queued, status=RunStatus.CANCELLED)
    assert worker.stop_idle_backends() == ["naive"] and stopped == ["naive"]
