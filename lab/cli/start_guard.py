"""``python -m lab start``'s children must not outlive it.

Three guards, because a SIGKILL of the start process runs none of its own clean-up:
- each child asks Linux for SIGTERM when its parent dies (``PR_SET_PDEATHSIG``, set in
  the child before it runs anything);
- the worker also watches its parent's pid (``watch_parent``), for systems or sandboxes
  where the death signal is not delivered;
- a pid file in the data folder names the start process and its children, so the next
  start stops what a killed one left (``clear_stale``) before it takes the port.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from services.processes import stop_processes

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
PARENT_PID_ENV = "LAB_PARENT_PID"
PID_FILE_NAME = "lab-start.json"


def die_with_parent(parent_pid: int) -> Callable[[], None]:
    """A ``preexec_fn`` for ``subprocess.Popen``: SIGTERM this child when ``parent_pid`` dies."""

    def preexec() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError):  # not Linux: watch_parent still applies to the worker
            return
        if os.getppid() != parent_pid:  # the parent died before the signal was asked for
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def watch_parent(parent_pid: int, *, interval_s: float = 1.0) -> threading.Thread:
    """Send this process SIGTERM (its clean stop) once ``parent_pid`` is no longer its parent."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            threading.Event().wait(interval_s)
        os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=watch, name="watch-parent", daemon=True)
    thread.start()
    return thread


@dataclass(frozen=True)
class ProcessId:
    """A pid with its creation time, so a reused pid is never taken for the process."""

    pid: int
    created_at_epoch_s: float

    @classmethod
    def of(cls, pid: int) -> ProcessId:
        return cls(pid, psutil.Process(pid).create_time())

    def process(self) -> psutil.Process | None:
        """The live process, or None if it is gone (or the pid now belongs to another one)."""
        try:
            process = psutil.Process(self.pid)
            if abs(process.create_time() - self.created_at_epoch_s) > 0.01:
                return None
            return process if process.status() != psutil.STATUS_ZOMBIE else None
        except psutil.Error:
            return None


class LabPidFile:
    """``data_dir/lab-start.json``: the running start process and its children."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / PID_FILE_NAME

    def read(self) -> tuple[ProcessId | None, list[ProcessId]]:
        try:
            document = json.loads(self.path.read_text())
            owner = ProcessId(**document["owner"])
            children = [ProcessId(**child) for child in document["children"]]
        except (OSError, ValueError, TypeError, KeyError):
            return None, []
        return owner, children

    def running_owner(self) -> int | None:
        """The pid of another start process that is still running, if any."""
        owner, _ = self.read()
        process = owner.process() if owner else None
        if owner is None or process is None:
            return None
        return owner.pid if owner.pid != os.getpid() else None

    def clear_stale(self, *, grace_s: float = 20.0) -> list[int]:
        """Stop the children a killed start left running (its owner gone). Returns their pids."""
        owner, children = self.read()
        if owner is None or owner.process() is not None:
            return []
        alive = [process for child in children if (process := child.process()) is not None]
        stop_processes(alive, grace_s=grace_s)  # the worker stops its services on SIGTERM
        self.remove()
        return [process.pid for process in alive]

    def write(self, children: list[int]) -> None:
        alive = []
        for pid in children:
            try:
                alive.append(ProcessId.of(pid).__dict__)
            except psutil.Error:  # a child that already exited has nothing to clear
                continue
        document = {"owner": ProcessId.of(os.getpid()).__dict__, "children": alive}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(document))

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
