"""The fast tier's isolation guard: a test not marked ``integration`` may not start a process,
open a network connection or listen on a port (the fast loop runs neither, see the README).

``isolate`` patches the lowest common doors: ``subprocess.Popen._execute_child`` (``run``,
``check_output`` and asyncio's subprocesses all go through it), ``os.fork``, and
``socket.socket.connect``/``connect_ex``/``bind`` for internet sockets (HTTP clients, servers,
Redis and PostgreSQL drivers all end there). Unix socket pairs, which asyncio's event loop opens
for itself, stay allowed."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from typing import Any, NoReturn, Protocol

import pytest

INTERNET_FAMILIES = (socket.AF_INET, socket.AF_INET6)

# platform.processor() runs `uname -p` once and caches the answer: asked here, before any guard,
# so the lab's environment capture reads the cache whichever test comes first.
platform.processor()


class IsolationError(AssertionError):
    """A fast-tier test reached for a process or the network."""


class _Marked(Protocol):
    def get_closest_marker(self, name: str) -> object | None: ...


def needs_isolation(node: _Marked) -> bool:
    """Only tests marked ``integration`` (or ``browser``) may start processes or open sockets."""
    return node.get_closest_marker("integration") is None and node.get_closest_marker("browser") is None


def _refuse(what: str) -> NoReturn:
    raise IsolationError(f"{what} in a fast-tier test: mark it integration (tests/integration/) or inject a fake")


def isolate(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make processes and internet sockets raise ``IsolationError`` until ``monkeypatch`` undoes it."""

    def execute_child(self: subprocess.Popen[Any], args: object, *rest: object, **kwargs: object) -> NoReturn:
        _refuse(f"a process started ({args!r})")

    def fork() -> NoReturn:
        _refuse("os.fork")

    def guarded(name: str) -> Any:
        original = getattr(socket.socket, name)

        def method(self: socket.socket, *args: Any, **kwargs: Any) -> Any:
            if self.family in INTERNET_FAMILIES:
                _refuse(f"socket.{name}{args!r}")
            return original(self, *args, **kwargs)

        return method

    monkeypatch.setattr(subprocess.Popen, "_execute_child", execute_child)
    monkeypatch.setattr(os, "fork", fork)
    for name in ("connect", "connect_ex", "bind"):
        monkeypatch.setattr(socket.socket, name, guarded(name))


class _ToolsAbsent:
    """A module's ``subprocess`` as seen on a machine without git, nvidia-smi, k6 or a second Python:
    ``run`` raises FileNotFoundError (which the lab's probes catch); the rest is the real module."""

    def run(self, args: object, *rest: object, **kwargs: object) -> NoReturn:
        raise FileNotFoundError(f"{args!r}: tools are not run in the fast tier (tests/support/isolation.py)")

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)


def machine_probes_absent(monkeypatch: pytest.MonkeyPatch, *modules: object) -> None:
    """The lab's machine probes (GPU, git commit, k6 version, machine-speed kernel) in ``modules``
    answer "not available" without starting a process; tests of the probes themselves run them for
    real under the integration marker or fake ``subprocess.run`` on top of this."""
    for module in modules:
        monkeypatch.setattr(module, "subprocess", _ToolsAbsent())


def browser_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    """The report's PNG copies answer "not written" as on a machine without Chromium: kaleido
    would start Chromium, and once the guard refuses that, its reader threads (not daemons) are
    left waiting and the test process never exits."""
    from lab.report import build, charts

    def no_browser(chart_figures: dict[str, Any], folder: object) -> tuple[dict[str, Any], str | None]:
        return {}, "no browser in the fast tier" if chart_figures else None

    monkeypatch.setattr(charts, "write_pngs", no_browser)
    monkeypatch.setattr(build, "write_pngs", no_browser)
