"""Process helpers shared by the service supervisor, the k6 driver and the lab's CLI: the
checkout's root, free loopback ports, a log file's tail, starting a detached command and
stopping processes (TERM, wait, KILL).

Nothing here knows about services or k6: it is the neutral ground both stand on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from collections.abc import Sequence
from pathlib import Path

import psutil

# The checkout's root: child processes (``python -m services...``, ``python -m lab ...``)
# start there so that their modules import, and the lab's default paths hang from it.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
LOOPBACK_HOST = "127.0.0.1"


def find_free_port(host: str = LOOPBACK_HOST) -> int:
    """Return a TCP port on ``host`` that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def is_port_free(port: int, host: str = LOOPBACK_HOST) -> bool:
    """True when nothing listens on ``host:port`` and it can be bound."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As servers do: connections in TIME_WAIT do not make a port busy, a listener does.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def read_log_tail(log_path: Path, max_lines: int = 40) -> str:
    """Return the last ``max_lines`` lines of a log file ('' when there is none)."""
    try:
        with open(log_path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64_000))
            data = handle.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(data.splitlines()[-max_lines:])


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def _signal_group(process_group_id: int | None, signal_number: int) -> None:
    if process_group_id is None or process_group_id == os.getpgid(0):
        return  # never signal the lab's own group
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process_group_id, signal_number)


def stop_process_tree(pid: int, *, grace_s: float = 10.0, process_group_id: int | None = None) -> None:
    """Stop ``pid``'s process group and tree: TERM, wait ``grace_s``, then KILL.

    Safe to call for a pid that is already gone: the lab starts every service in a new
    session (``start_new_session``), so its group id is its pid, and whatever is left in
    that group is still stopped. Pass ``process_group_id`` when it differs from ``pid``.
    """
    group = process_group_id if process_group_id is not None else pid
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
        with contextlib.suppress(ProcessLookupError):
            group = os.getpgid(pid)
    except psutil.NoSuchProcess:
        processes = []
    if not processes:
        # The leader is gone: what is left of its group is found by group id, so the
        # grace period below still applies to it.
        processes = [p for p in psutil.process_iter() if _group_of(p.pid) == group]
    stop_processes(processes, grace_s=grace_s, process_group_id=group)


def stop_processes(processes: Sequence[psutil.Process], *, grace_s: float, process_group_id: int | None = None) -> None:
    """TERM ``processes`` (and their group, if given), wait up to ``grace_s`` for them to
    exit, then KILL the ones left. Processes already gone are skipped."""
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    _signal_group(process_group_id, signal.SIGTERM)
    _, alive = psutil.wait_procs(processes, timeout=grace_s)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    _signal_group(process_group_id, signal.SIGKILL)
    psutil.wait_procs(alive, timeout=5)


def start_detached(argv: Sequence[str], *, cwd: Path = PROJECT_ROOT) -> int:
    """Start ``argv`` in its own session, detached from our terminal and output, so it
    outlives its starter (a Streamlit rerun); returns its pid. Nobody waits for it."""
    process = subprocess.Popen(
        list(argv),
        cwd=cwd,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return process.pid
