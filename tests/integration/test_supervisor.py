"""ManagedService against tiny real child processes (python's http.server, sleepers)."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import psutil
import pytest

from services.processes import find_free_port, is_port_free, read_log_tail
from services.supervisor import ManagedService, PortInUseError, ServiceStartError

pytestmark = pytest.mark.integration  # tiny real child processes

HTTP_SERVER = [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "{port}"]


def test_starts_serves_and_stops(tmp_path: Path) -> None:
    service = ManagedService(name="http", argv=HTTP_SERVER, log_path=tmp_path / "http.log", health_path="/")
    with service:
        assert service.is_running()
        assert service.url == f"http://127.0.0.1:{service.port}"
        assert service.is_healthy()
        pid = service.pid
    assert pid is not None and service.port is not None
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert is_port_free(service.port)


def test_child_exiting_early_fails_fast_with_log_tail(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import sys; print('model folder not found: /nope'); sys.exit(3)"]
    service = ManagedService(name="broken", argv=argv, log_path=tmp_path / "b.log", readiness_timeout_s=60)
    started = time.monotonic()
    with pytest.raises(ServiceStartError) as error:
        service.start()
    assert time.monotonic() - started < 10
    assert "exited with code 3" in str(error.value)
    assert "model folder not found: /nope" in str(error.value)


def test_readiness_deadline_stops_the_child(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import time; time.sleep(60)"]
    service = ManagedService(name="silent", argv=argv, log_path=tmp_path / "s.log", readiness_timeout_s=1.5)
    with pytest.raises(ServiceStartError, match="not ready within"):
        service.start()
    assert not service.is_running()


def test_port_already_taken_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        service = ManagedService(name="http", argv=HTTP_SERVER, log_path=tmp_path / "h.log", port=port)
        with pytest.raises(PortInUseError, match=f"port {port} .* already in use"):
            service.start()


def test_stop_kills_the_whole_process_group(tmp_path: Path) -> None:
    # The child starts a grandchild that ignores SIGTERM; stop() must still leave nothing.
    script = (
        "import subprocess, sys, http.server, socketserver\n"
        "subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)'])\n"
        "http.server.test(HandlerClass=http.server.SimpleHTTPRequestHandler, port=int(sys.argv[1]), bind='127.0.0.1')\n"
    )
    service = ManagedService(
        name="tree", argv=[sys.executable, "-c", script, "{port}"], log_path=tmp_path / "t.log", health_path="/"
    )
    service.start()
    root = psutil.Process(service.pid)
    deadline = time.monotonic() + 10
    while not root.children() and time.monotonic() < deadline:
        time.sleep(0.1)
    family = [root, *root.children(recursive=True)]
    assert len(family) >= 2
    service.stop(grace_s=1.0)
    _gone, alive = psutil.wait_procs(family, timeout=5)
    assert not alive


def test_helpers(tmp_path: Path) -> None:
    port = find_free_port()
    assert is_port_free(port)
    log = tmp_path / "x.log"
    log.write_text("\n".join(f"line {i}" for i in range(100)))
    assert read_log_tail(log, 3) == "line 97\nline 98\nline 99"
    assert read_log_tail(tmp_path / "missing.log") == ""


def test_abort_during_the_readiness_wait_stops_the_child(tmp_path: Path) -> None:
    from services.supervisor import ServiceStartAborted

    calls = {"n": 0}

    def abort() -> bool:
        calls["n"] += 1
        return calls["n"] > 3  # the user cancels after about a second

    argv = [sys.executable, "-c", "import time; time.sleep(60)"]
    service = ManagedService(name="slow", argv=argv, log_path=tmp_path / "s.log", readiness_timeout_s=60, abort=abort)
    started = time.monotonic()
    with pytest.raises(ServiceStartAborted, match="cancelled"):
        service.start()
    assert time.monotonic() - started < 10
    assert not service.is_running()


def test_leftovers_in_the_group_are_stopped_after_the_leader_died(tmp_path: Path) -> None:
    from services.processes import stop_process_tree

    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        "print(child.pid, flush=True)\n"
    )
    import subprocess

    leader = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert leader.stdout is not None
    orphan_pid = int(leader.stdout.readline())
    leader.wait(timeout=10)  # the leader is gone, its child lives on in the group
    orphan = psutil.Process(orphan_pid)
    stop_process_tree(leader.pid, grace_s=1.0)
    _, alive = psutil.wait_procs([orphan], timeout=5)
    assert not alive
