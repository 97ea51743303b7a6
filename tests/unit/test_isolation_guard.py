"""The fast tier's guard (tests/support/isolation.py): a unit test that starts a process or opens
an internet socket fails with a message saying what to do; integration tests are let through."""

from __future__ import annotations

import asyncio
import socket
import subprocess

import pytest

from tests.support.isolation import IsolationError, needs_isolation


def test_starting_a_process_fails() -> None:
    with pytest.raises(IsolationError, match=r"a process started.*mark it integration"):
        subprocess.run(["true"], check=False)


def test_an_asyncio_subprocess_fails() -> None:
    async def start() -> None:
        await asyncio.create_subprocess_exec("true")

    with pytest.raises(IsolationError):
        asyncio.run(start())


@pytest.mark.parametrize("method", ["connect", "connect_ex", "bind"])
def test_an_internet_socket_cannot_connect_or_listen(method: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock, pytest.raises(IsolationError, match=method):
        getattr(sock, method)(("127.0.0.1", 9))


def test_a_unix_socket_pair_still_works() -> None:
    left, right = socket.socketpair()
    with left, right:
        left.sendall(b"x")
        assert right.recv(1) == b"x"


class _Node:
    def __init__(self, *markers: str) -> None:
        self.markers = markers

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.markers else None


def test_only_integration_and_browser_tests_are_let_through() -> None:
    assert needs_isolation(_Node())
    assert needs_isolation(_Node("vllm"))
    assert not needs_isolation(_Node("integration"))
    assert not needs_isolation(_Node("browser"))
