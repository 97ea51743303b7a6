"""The managed services of one run, watched in every phase that waits on them.

Start-up, warm-up, the cache fill, the load and its drain each ask :meth:`ServiceWatch.failure`
about once a second: a service whose process is gone (or was replaced under a reused pid)
ends the run within seconds, with a reason naming it, the phase and its last log line
(``run_decisions.lost_service_failure``); a fail-open service (Redis) is noted and the run
goes on. :func:`wait_watching` runs one blocking call (a warm-up request) in a thread and
watches while it waits.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import psutil

from lab.run import decisions
from lab.run.decisions import RunFailed
from services.manager import ServiceManager, process_matches

log = logging.getLogger(__name__)

# A service's process as first seen (pid, creation time): a reused pid is not the service.
ProcessIdentity = tuple[int, float]
# How often a waiting phase looks at its services (and at a cancel).
WATCH_INTERVAL_S = 1.0
# Lines of a dead service's log read to find its last non-empty line.
LOG_LINES_READ = 20

T = TypeVar("T")


def process_identity(pid: int | None) -> ProcessIdentity | None:
    try:
        return (pid, psutil.Process(pid).create_time()) if pid else None
    except psutil.NoSuchProcess:
        return None


class ServiceWatch:
    """The processes of a run's managed services, as they were when the services were up."""

    def __init__(self, *, services: ServiceManager, names: list[str], run_id: int, lost: list[str]) -> None:
        self.services = services
        self.run_id = run_id
        # Looked up once: every check looks at these processes, not at the database.
        self.watched = {name: process_identity(services.pid_of(name)) for name in names}
        self.lost = lost  # fail-open services that died (the run goes on and says so)

    def failure(self, phase: str) -> RunFailed | None:
        """The failure a dead service means in ``phase``; a dead fail-open service is noted."""
        failure: RunFailed | None = None
        for name, identity in self.watched.items():
            if name in self.lost or (identity is not None and process_matches(*identity)):
                continue
            reason = decisions.lost_service_failure(name, phase=phase, last_log_line=self.last_log_line(name))
            if reason is None:
                log.warning("run %s: %s stopped during the %s; the cache proxy fails open", self.run_id, name, phase)
                self.lost.append(name)
            elif failure is None:
                failure = RunFailed(reason)
        return failure

    def check(self, phase: str) -> None:
        """Raise RunFailed when a service the run needs died."""
        if (failure := self.failure(phase)) is not None:
            raise failure

    def last_log_line(self, name: str) -> str | None:
        """The service's last non-empty log line (None when it cannot be read)."""
        try:
            tail = self.services.log_tail(name, LOG_LINES_READ)
        except Exception:
            return None
        lines = [line for line in tail.splitlines() if line.strip()]
        return lines[-1] if lines else None


def wait_watching(call: Callable[[], T], *, every_second: Callable[[], None]) -> T:
    """Run ``call`` in a thread; ``every_second`` (a cancel check, a service check) runs about
    once a second while it waits and ends the wait by raising. A dead service ends the wait
    within a second even when ``call`` would wait much longer."""
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="run-wait")
    future: Future[T] = executor.submit(call)
    try:
        while True:
            try:
                return future.result(timeout=WATCH_INTERVAL_S)
            except TimeoutError:
                every_second()
                if future.done():  # finished meanwhile, or raised a TimeoutError of its own
                    return future.result()
            except Exception:
                every_second()  # a dead service explains a failed call better than the call's error
                raise
    finally:
        executor.shutdown(wait=False, cancel_futures=True)
