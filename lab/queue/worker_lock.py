"""The worker lock: one worker per data directory (its run folders and service logs), so
never two k6 at once there. Workers with their own folders share a queue."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

LOCK_FILE_NAME = "worker.lock"


class WorkerBusyError(RuntimeError):
    """Another worker already executes this lab's queue."""


class WorkerLock:
    """An exclusive lock file in the data directory, holding the holder's pid."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_FILE_NAME
        self._handle: IO[str] | None = None

    def acquire(self) -> None:
        """Take the lock, or raise WorkerBusyError when another process holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")  # noqa: SIM115 - held open while the lock is held
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as error:
            handle.close()
            raise WorkerBusyError(f"another lab worker holds {self.path}") from error
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self._handle = handle

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def __enter__(self) -> WorkerLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def lock_holder_pid(data_dir: Path) -> int | None:
    """The pid the data directory's lock file names (its holder, or its last one); None if unreadable."""
    try:
        return int((data_dir / LOCK_FILE_NAME).read_text().strip())
    except (OSError, ValueError):
        return None
