"""Every file the lab reads from a user (request files, datasets, uploads, spec files, other
tools' result files to import): regular files only, under a size limit, read with a bound.

A FIFO would block the worker in ``starting`` for good and ``/dev/zero`` would fill its
memory in seconds, so the file is opened without blocking (``O_NONBLOCK``: a FIFO opens at
once), checked on the open descriptor (no race with a path swapped after a check), and read
through a reader that stops at the limit (``LAB_INPUT_FILE_MAX_BYTES``) whatever the file
claims its size is (``/proc`` files say 0). Every refusal is one line naming the path and
the rule. Spec validation calls :func:`check_input_path` (a missing file is left to the
run, which says so); the workloads, ``--spec`` (:mod:`lab.specs.spec_files`) and ``lab import``
(:mod:`lab.imports`) read through :func:`open_input_binary` / :func:`open_input_text`, each
with its own limit.
"""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path
from typing import Any, TextIO


class DatasetError(ValueError):
    """A dataset or request file cannot be used; the message says why, for the user
    (defined here, the lowest module, and re-exported by :mod:`lab.workloads.datasets`)."""


# What a file that is not a regular one is, in words, by the test on its mode.
SPECIAL_FILE_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
RULE = "the lab reads requests, datasets, spec files and imports only from regular files"


class InputFileError(DatasetError):
    """A path a spec names that the lab will not read (the message names the path and the rule)."""


def input_file_max_bytes() -> int:
    """The size limit in force (``LAB_INPUT_FILE_MAX_BYTES``)."""
    from lab.settings import get_settings

    return get_settings().input_file_max_bytes


def human_bytes(size_bytes: int) -> str:
    """A byte count for people: ``512 bytes``, ``1.5 KiB``, ``256.0 MiB``, ``3.2 GiB``."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size_bytes >= scale:
            return f"{size_bytes / scale:,.1f} {unit}"
    return f"{size_bytes} bytes"


# What a limit is named by when the caller names none: the runs' files and their setting.
RUN_FILES_LIMIT = "the limit for request and dataset files (LAB_INPUT_FILE_MAX_BYTES)"


def file_problem(
    path: Path | str, mode: int, size_bytes: int, *, max_bytes: int, limit_name: str = RUN_FILES_LIMIT
) -> str | None:
    """Why the file at ``path`` (its ``st_mode`` and ``st_size``) is refused, in one line; None when it may be read."""
    for is_kind, kind in SPECIAL_FILE_KINDS:
        if is_kind(mode):
            return f"{path} is {kind}, not a regular file: {RULE}"
    if not stat.S_ISREG(mode):
        return f"{path} is not a regular file: {RULE}"
    if size_bytes > max_bytes:
        return too_large(path, max_bytes, limit_name)
    return None


def too_large(path: Path | str, max_bytes: int, limit_name: str = RUN_FILES_LIMIT) -> str:
    return f"{path} is larger than {human_bytes(max_bytes)}, {limit_name}"


def check_input_path(path: Path | str, *, max_bytes: int | None = None) -> None:
    """Raise :class:`InputFileError` when ``path`` exists and is not a regular file within the
    limit (a missing file passes: the run says so when it reads it)."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as error:
        raise InputFileError(f"{path} cannot be read ({error.strerror or error})") from error
    problem = file_problem(path, status.st_mode, status.st_size, max_bytes=max_bytes or input_file_max_bytes())
    if problem:
        raise InputFileError(problem)


class _BoundedReader(io.RawIOBase):
    """Reads a descriptor and raises :class:`InputFileError` past ``max_bytes``."""

    def __init__(self, descriptor: int, path: Path, max_bytes: int, limit_name: str) -> None:
        super().__init__()
        self._descriptor, self._path, self._max_bytes, self._read = descriptor, path, max_bytes, 0
        self._limit_name = limit_name

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        # One byte past the limit is enough to know the file is too large (never more).
        count = os.readv(self._descriptor, [view[: self._max_bytes + 1 - self._read]])
        self._read += count
        if self._read > self._max_bytes:
            raise InputFileError(too_large(self._path, self._max_bytes, self._limit_name))
        return count

    def close(self) -> None:
        if not self.closed:
            os.close(self._descriptor)
        super().close()


def open_input_binary(
    path: Path | str, *, what: str, max_bytes: int | None = None, limit_name: str = RUN_FILES_LIMIT
) -> io.BufferedReader:
    """Open a file a user gave for reading: a regular file within the limit, else
    :class:`InputFileError` (``what`` says which file, e.g. "request file"; ``limit_name`` what
    the limit is, for the message)."""
    file_path, limit = Path(path), max_bytes or input_file_max_bytes()
    try:
        descriptor = os.open(file_path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError as error:
        raise InputFileError(f"{what} not found: {file_path}") from error
    except OSError as error:  # a socket cannot be opened at all: say what it is
        check_input_path(file_path, max_bytes=limit)
        raise InputFileError(f"{what} {file_path} cannot be read ({error.strerror or error})") from error
    try:
        status = os.fstat(descriptor)
        if problem := file_problem(file_path, status.st_mode, status.st_size, max_bytes=limit, limit_name=limit_name):
            raise InputFileError(problem)
        os.set_blocking(descriptor, True)
    except BaseException:
        os.close(descriptor)
        raise
    return io.BufferedReader(_BoundedReader(descriptor, file_path, limit, limit_name))


def open_input_text(path: Path | str, *, what: str, max_bytes: int | None = None, newline: str | None = None) -> TextIO:
    """:func:`open_input_binary` decoded as strict UTF-8."""
    return io.TextIOWrapper(
        open_input_binary(path, what=what, max_bytes=max_bytes), encoding="utf-8", errors="strict", newline=newline
    )


def read_input_text(
    path: Path | str, *, what: str, max_bytes: int | None = None, limit_name: str = RUN_FILES_LIMIT
) -> str:
    """The whole text of a file a user gave, read with the bound."""
    return read_input_bytes(path, what=what, max_bytes=max_bytes, limit_name=limit_name).decode("utf-8")


def read_input_bytes(
    path: Path | str, *, what: str, max_bytes: int | None = None, limit_name: str = RUN_FILES_LIMIT
) -> bytes:
    """The whole content of a file a user gave, read with the bound."""
    with open_input_binary(path, what=what, max_bytes=max_bytes, limit_name=limit_name) as handle:
        return handle.read()
