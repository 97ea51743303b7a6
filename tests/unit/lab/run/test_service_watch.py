"""The run's service watch without processes: a service whose process is gone ends the
phase with its name, the phase and its last log line; Redis is noted and the run goes on;
a blocking call is abandoned within about a second when the watch raises."""

from __future__ import annotations

import os
import threading
import time

import pytest

from lab.run import service_watch
from lab.run.decisions import RunFailed
from lab.run.service_watch import ServiceWatch, wait_watching


class FakeServices:
    """pid_of and log_tail as the ServiceManager answers them."""

    def __init__(self, pids: dict[str, int | None], logs: dict[str, str]) -> None:
        self.pids, self.logs = pids, logs

    def pid_of(self, name: str) -> int | None:
        return self.pids.get(name)

    def log_tail(self, name: str, max_lines: int = 40) -> str:
        return self.logs.get(name, "")


def test_a_dead_service_is_named_with_the_phase_and_its_last_log_line() -> None:
    services = FakeServices(
        {"naive": os.getpid(), "cache-proxy": os.getpid(), "redis": os.getpid()},
        {"naive": "loading\nINFO POST /v1/chat/completions 200\n\n"},
    )
    lost: list[str] = []
    watch = ServiceWatch(services=services, names=["naive", "redis", "cache-proxy"], run_id=1, lost=lost)  # type: ignore[arg-type]  # a fake manager
    assert watch.failure("cache fill") is None  # all alive (this process)
    watch.watched["naive"] = (os.getpid(), 1.0)  # the pid now belongs to another process: the service is gone
    watch.watched["redis"] = None
    failure = watch.failure("cache fill")
    assert isinstance(failure, RunFailed)
    assert str(failure) == (
        "the naive service died during the cache fill; its last log line: "
        "INFO POST /v1/chat/completions 200 (see its log below)"
    )
    assert lost == ["redis"]  # fail-open: noted once, the run goes on
    with pytest.raises(RunFailed, match="died during the drain"):
        watch.check("drain")
    assert lost == ["redis"]


def test_a_blocking_call_is_abandoned_when_the_watch_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    # The watch's second, shortened: the test is about abandoning the call, not the interval.
    monkeypatch.setattr(service_watch, "WATCH_INTERVAL_S", 0.05)
    checks: list[float] = []
    released = threading.Event()

    def every_second() -> None:
        checks.append(time.monotonic())
        if len(checks) == 2:
            raise RunFailed("the naive service died during the warm-up")

    began = time.monotonic()
    try:
        with pytest.raises(RunFailed, match="warm-up"):
            wait_watching(lambda: released.wait(30), every_second=every_second)
        assert time.monotonic() - began < 1.0  # two watches of 0.05 s, not the call's 30 s
    finally:
        released.set()  # the abandoned call's thread ends with the test, not 30 s later


def test_a_failed_call_is_explained_by_a_dead_service_first() -> None:
    def call() -> None:
        raise ConnectionError("connection refused")

    def every_second() -> None:
        raise RunFailed("the naive service died during the warm-up")

    with pytest.raises(RunFailed):
        wait_watching(call, every_second=every_second)
    with pytest.raises(ConnectionError):
        wait_watching(call, every_second=lambda: None)
    assert wait_watching(lambda: 42, every_second=lambda: None) == 42
