"""Process supervision for the lab's managed services.

A :class:`ManagedService` starts one child (an argv list, never a shell) on a free
loopback port in its own process group, sends its output to its own log file, waits
until its readiness probe (``GET /health`` by default) answers within a deadline long
enough for model loading, fails fast with the last log lines when the child exits early,
and stops the whole process group with TERM, a wait, then KILL
(:func:`services.processes.stop_process_tree`).

Shaped after vLLM's test launcher ``RemoteOpenAIServer`` (in vLLM's own test utilities).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from services.processes import LOOPBACK_HOST, find_free_port, is_port_free, read_log_tail, stop_process_tree


class ServiceStartError(RuntimeError):
    """A managed service did not become ready; the message holds the log's tail."""


class PortInUseError(ServiceStartError):
    """The port asked for is already taken by another process."""


class ServiceStartAborted(ServiceStartError):
    """Starting was abandoned because ``abort()`` said so (a cancelled run); the child is stopped."""


def http_health_probe(path: str = "/health", timeout_s: float = 2.0) -> Callable[[ManagedService], bool]:
    """A readiness probe that is true when ``GET path`` answers 200."""

    def probe(service: ManagedService) -> bool:
        try:
            response = httpx.get(f"{service.url}{path}", timeout=timeout_s)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    return probe


@dataclass
class ManagedService:
    """One supervised child process serving on a loopback port.

    ``argv`` may hold ``{port}`` and ``{host}`` placeholders, filled at start.
    """

    name: str
    argv: Sequence[str]
    log_path: Path
    env: Mapping[str, str] | None = None
    port: int | None = None
    health_path: str = "/health"
    readiness_timeout_s: float = 60.0
    readiness_probe: Callable[[ManagedService], bool] | None = None
    host: str = LOOPBACK_HOST
    cwd: Path | None = None
    # Called with the child's pid right after it is spawned, before the readiness wait.
    on_spawn: Callable[[int], None] | None = None
    # Polled during the readiness wait; True abandons the start (the child is stopped).
    abort: Callable[[], bool] | None = None

    def __post_init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self.started_at: float | None = None

    @property
    def url(self) -> str:
        """Base URL of the service, ``http://127.0.0.1:PORT``."""
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The child's pid, or None before start."""
        return self._process.pid if self._process else None

    def is_running(self) -> bool:
        """True while the child process has not exited."""
        return self._process is not None and self._process.poll() is None

    def resolved_argv(self) -> list[str]:
        """The argv with ``{port}`` and ``{host}`` filled in."""
        return [str(arg).replace("{port}", str(self.port)).replace("{host}", self.host) for arg in self.argv]

    def start(self) -> ManagedService:
        """Start the child and block until ready.

        Raises :class:`PortInUseError` when the asked port is taken and
        :class:`ServiceStartError` (with the log's tail) when the child exits early or
        is not ready before ``readiness_timeout_s``.
        """
        if self.is_running():
            return self
        if self.port is None:
            self.port = find_free_port(self.host)
        elif not is_port_free(self.port, self.host):
            raise PortInUseError(
                f"{self.name}: port {self.port} on {self.host} is already in use; "
                "stop whatever listens there or choose another port"
            )
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        child_env = dict(os.environ)
        if self.env:
            child_env.update(self.env)
        child_env.setdefault("PYTHONUNBUFFERED", "1")
        log_handle = open(self.log_path, "ab")  # noqa: SIM115 - closed by stop() once the child exits
        try:
            self._process = subprocess.Popen(
                self.resolved_argv(),
                stdout=log_handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=child_env,
                cwd=self.cwd,
                start_new_session=True,
            )
        except FileNotFoundError as error:
            raise ServiceStartError(f"{self.name}: cannot start {self.resolved_argv()[0]!r}: {error}") from error
        finally:
            log_handle.close()
        self.started_at = time.time()
        if self.on_spawn is not None:
            self.on_spawn(self._process.pid)
        self._wait_until_ready()
        return self

    def _wait_until_ready(self) -> None:
        probe = self.readiness_probe or http_health_probe(self.health_path)
        deadline = time.monotonic() + self.readiness_timeout_s
        while time.monotonic() < deadline:
            if self.abort is not None and self.abort():
                self.stop()
                raise ServiceStartAborted(f"{self.name}: start abandoned (cancelled)")
            if self._process is not None and self._process.poll() is not None:
                exit_code = self._process.returncode
                # Whatever the child left in its group (an engine process) goes with it.
                stop_process_tree(self._process.pid, grace_s=5.0)
                self._process = None
                raise ServiceStartError(
                    f"{self.name} exited with code {exit_code} before it was ready. "
                    f"Last lines of {self.log_path}:\n{read_log_tail(self.log_path)}"
                )
            if probe(self):
                return
            time.sleep(0.25)
        tail = read_log_tail(self.log_path)
        self.stop()
        raise ServiceStartError(
            f"{self.name} was not ready within {self.readiness_timeout_s:.0f} s. Last lines of {self.log_path}:\n{tail}"
        )

    def is_healthy(self) -> bool:
        """Liveness: the process runs and its probe answers now."""
        probe = self.readiness_probe or http_health_probe(self.health_path)
        return self.is_running() and probe(self)

    def stop(self, grace_s: float = 10.0) -> None:
        """Stop the child's whole process group: TERM, wait, KILL. Idempotent."""
        if self._process is None:
            return
        stop_process_tree(self._process.pid, grace_s=grace_s)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=5)
        self._process = None

    def __enter__(self) -> ManagedService:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
