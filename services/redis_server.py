"""Launcher for a private ``redis-server`` on a loopback port.

The cache proxy's store: no persistence (``--save ""``, no AOF), bound to 127.0.0.1 only,
protected mode on, and a memory cap with LRU eviction so a long run cannot eat the host's
memory. Readiness is a RESP ``PING`` answered by ``+PONG`` (Redis speaks no HTTP).
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

from services.processes import LOOPBACK_HOST
from services.supervisor import ManagedService

DEFAULT_REDIS_BINARY = "/usr/bin/redis-server"
DEFAULT_MAXMEMORY = "256mb"


def redis_binary() -> str:
    """Path of the ``redis-server`` binary (Debian's, else the first on PATH)."""
    if Path(DEFAULT_REDIS_BINARY).exists():
        return DEFAULT_REDIS_BINARY
    return shutil.which("redis-server") or DEFAULT_REDIS_BINARY


def redis_server_argv(
    port: int | str = "{port}", *, maxmemory: str = DEFAULT_MAXMEMORY, binary: str | None = None
) -> list[str]:
    """argv for a private, memory-only redis-server on ``127.0.0.1:port``.

    ``port`` defaults to the supervisor's ``{port}`` placeholder.
    """
    return [
        binary or redis_binary(),
        "--port",
        str(port),
        "--bind",
        LOOPBACK_HOST,
        "--save",
        "",
        "--appendonly",
        "no",
        "--maxmemory",
        maxmemory,
        "--maxmemory-policy",
        "allkeys-lru",
        "--protected-mode",
        "yes",
        "--daemonize",
        "no",
    ]


def redis_ping(host: str, port: int, *, timeout_s: float = 0.5) -> bool:
    """True when a Redis server at ``host:port`` answers ``PING`` with ``+PONG``."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def redis_ping_probe(service: ManagedService) -> bool:
    """Readiness probe for :class:`ManagedService`: the server answers PING."""
    return service.port is not None and redis_ping(service.host, service.port)


def redis_url_of(service: ManagedService, db: int = 0) -> str:
    """The ``redis://`` URL of a started redis service."""
    return f"redis://{service.host}:{service.port}/{db}"


def make_redis_service(
    *,
    log_path: Path,
    port: int | None = None,
    name: str = "redis",
    maxmemory: str = DEFAULT_MAXMEMORY,
    readiness_timeout_s: float = 15.0,
) -> ManagedService:
    """A :class:`ManagedService` for a private redis-server (not started yet)."""
    return ManagedService(
        name=name,
        argv=redis_server_argv(maxmemory=maxmemory),
        log_path=log_path,
        port=port,
        readiness_timeout_s=readiness_timeout_s,
        readiness_probe=redis_ping_probe,
    )
