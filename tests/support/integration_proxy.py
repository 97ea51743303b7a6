"""Helpers for the cache-proxy tests: a proxy process of its own, chat bodies, the stub
upstream's call count, raw Redis commands, and a redis-server to kill and restart."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from services.processes import find_free_port
from services.redis_server import redis_ping, redis_server_argv
from services.supervisor import ManagedService

REPO_ROOT = Path(__file__).resolve().parents[2]
CHAT_PATH = "/v1/chat/completions"


def start_proxy(upstream_url: str, redis_url: str, log_dir: Path, *extra_args: str) -> ManagedService:
    """Start one proxy process with its own namespace (so tests never share entries)."""
    namespace = f"test-{uuid.uuid4().hex[:8]}"
    service = ManagedService(
        name=f"cache-proxy-{namespace}",
        argv=[
            sys.executable,
            "-m",
            "services.cache_proxy",
            "--upstream",
            upstream_url,
            "--redis-url",
            redis_url,
            "--port",
            "{port}",
            "--namespace",
            namespace,
            *extra_args,
        ],
        log_path=log_dir / f"cache-proxy-{namespace}.log",
        # The semantic tier loads torch and its embedding model before it answers (seconds on a busy CI).
        readiness_timeout_s=120.0 if "semantic" in extra_args else 30.0,
        cwd=REPO_ROOT,
    )
    return service.start()


def chat(content: str, **fields: object) -> dict:
    return {"model": "stub-model", "messages": [{"role": "user", "content": content}], "max_tokens": 16, **fields}


def stub_calls(stub: ManagedService) -> int:
    return httpx.get(f"{stub.url}/stub/calls").json()["completions"]


def redis_command(host: str, port: int, *parts: bytes) -> bytes:
    """Send one command to Redis on a raw socket; its raw RESP reply."""
    import socket

    from services.cache_proxy.resp import encode_command

    with socket.create_connection((host, port), timeout=2) as sock:
        sock.sendall(encode_command(*parts))
        return sock.recv(4096)


class KillableRedis:
    """A redis-server of our own on a fixed port, to kill, pause and restart."""

    def __init__(self, log_path: Path) -> None:
        self.port = find_free_port()
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(redis_server_argv(self.port), stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while not redis_ping("127.0.0.1", self.port):
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)

    def kill(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None


def stub_upstream_service(log_dir: Path, name: str, *extra_args: str) -> ManagedService:
    """The stub upstream (tests/stub_upstream.py) as its own process, not yet started."""
    return ManagedService(
        name=name,
        argv=[sys.executable, "-m", "tests.stub_upstream", "--port", "{port}", *extra_args],
        log_path=log_dir / f"{name}.log",
        readiness_timeout_s=30.0,
        cwd=REPO_ROOT,
    )


@contextmanager
def running_proxy(
    upstream: ManagedService, redis_url: str, log_dir: Path, *extra_args: str
) -> Iterator[ManagedService]:
    """A proxy in front of ``upstream`` for the ``with`` block; stopped afterwards."""
    service = start_proxy(upstream.url, redis_url, log_dir, *extra_args)
    try:
        yield service
    finally:
        service.stop()
