"""The proxy's trace recorder: requests noted on the request path, written as Mooncake lines
in batches.

On the request path the proxy only takes a ticket when a request arrives (its place in the
arrival order and the time) and hands the finished request back (:meth:`TraceRecorder.observe`,
one ``deque.append``). The writer wakes every ``interval_s``, turns what finished into lines
(:class:`~services.traces.lines.TraceLines`: parsing, tokenizing, hashing happen there) and
writes them in arrival order, so a long answer that finishes late still lands at its arrival,
and the file's timestamps never go backwards. The proxy runs the writer as a timer on its own
event loop: a thread of its own cost the hit path more (the GIL handed back and forth) than
the writing itself (docs/records/2026-12-03-trace-recording-cost.md).

Files rotate by size: ``day.jsonl``, then ``day.1.jsonl``, ``day.2.jsonl`` ...; each is a trace
of its own (its clock from its first request, its hash ids from 0). A write that fails (a full
disk, a removed folder) stops the recording with one log line; the proxy goes on serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

from services.traces.blocks import ChatTemplateTokens
from services.traces.lines import Observation, TraceLines

LOG = logging.getLogger(__name__)
# Finished requests waiting for the writer beyond this are dropped (counted): a bound on memory
# when the writer falls behind (a slow disk, a tokenizer slower than the traffic).
MAX_WAITING = 200_000
Ticket = tuple[int, float]
Opener = Callable[[Path], BinaryIO]


class RecordingError(ValueError):
    """A recording that cannot start; the message is one line."""


def rotated_path(path: Path, index: int) -> Path:
    """The ``index``-th file of a recording: ``path`` itself, then ``stem.1.suffix``, ..."""
    return path if index == 0 else path.with_name(f"{path.stem}.{index}{path.suffix}")


def check_recording(path: str, *, rotate_mb: float | None, block_tokens: int, tokenizer: str | None) -> None:
    """Refuse, in one line, a recording that cannot be made: a path that cannot be written (or
    already holds a recording), a rotation size of zero or less, a block size under 1, a
    tokenizer folder that is not there. Creates the (empty) file when it passes."""
    if rotate_mb is not None and not rotate_mb > 0:
        raise RecordingError(f"--record-rotate-mb must be more than 0 (MB a file holds), not {rotate_mb:g}")
    if block_tokens < 1:
        raise RecordingError(f"--record-block-tokens must be at least 1, not {block_tokens}")
    if tokenizer is not None:
        if not (Path(tokenizer) / "tokenizer_config.json").is_file():
            raise RecordingError(f"--record-tokenizer {tokenizer}: not a tokenizer folder (no tokenizer_config.json)")
        try:
            ChatTemplateTokens(tokenizer).load()
        except (ValueError, OSError) as error:
            raise RecordingError(f"--record-tokenizer {error}") from None
    target = Path(path)
    if target.is_dir():
        raise RecordingError(f"cannot record the trace to {path}: it is a folder")
    if target.exists() and target.stat().st_size > 0:
        raise RecordingError(f"cannot record the trace to {path}: it already holds one (choose another name)")
    try:
        with open(target, "ab"):
            pass
    except OSError as error:
        raise RecordingError(f"cannot record the trace to {path}: {error.strerror or error}") from None


def open_for_writing(path: Path) -> BinaryIO:
    return open(path, "wb")


class TraceRecorder:
    """Records what the proxy sees into ``path`` (see the module docstring)."""

    def __init__(
        self,
        path: Path,
        lines: TraceLines,
        *,
        rotate_bytes: int | None = None,
        opener: Opener = open_for_writing,
        interval_s: float = 0.1,
        max_waiting: int = MAX_WAITING,
    ) -> None:
        self.path = path
        self.lines = lines
        self.rotate_bytes = rotate_bytes
        self.opener = opener
        self.interval_s = interval_s
        self.max_waiting = max_waiting
        self.stopped = False
        self.recorded = self.dropped = self.unrecordable = 0
        self.files: list[Path] = []
        self._arrivals = itertools.count()
        self._finished: deque[
            tuple[int, tuple[float, str, bytes, Sequence[tuple[bytes, bytes]], bytes | None] | None]
        ] = deque()
        self._ready: dict[int, Observation | None] = {}
        self._next = 0
        self._handle: BinaryIO | None = None
        self._file_bytes = 0
        self._closing = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None

    # -- the request path -----------------------------------------------------------------

    def arrive(self, now_s: float) -> Ticket:
        """A request arrived at ``now_s`` (monotonic): its ticket, handed back to :meth:`observe`."""
        return next(self._arrivals), now_s

    def observe(
        self, ticket: Ticket, path: str, raw_body: bytes, headers: Sequence[tuple[bytes, bytes]], answer: bytes | None
    ) -> None:
        """The request of ``ticket`` finished with ``answer`` (the bytes the client got). Every
        ticket must come back once, or the lines after it wait (see :meth:`write_pending`)."""
        if self.stopped:
            return
        if len(self._finished) >= self.max_waiting:
            self._finished.append((ticket[0], None))  # keeps its place in the order, counted as dropped
            return
        # A plain tuple: the Observation is made by the writer, off the request path.
        self._finished.append((ticket[0], (ticket[1], path, raw_body, headers, answer)))

    # -- the writer -----------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> TraceRecorder:
        """Open the first file and run the writer as a timer on ``loop`` (the proxy's own event
        loop) every ``interval_s``."""
        self._open_next()
        self._loop = loop
        self._timer = loop.call_later(self.interval_s, self._tick)
        return self

    def close(self) -> None:
        """Write what is left and close the file (the writer stops)."""
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.write_pending()
        self._close_file()

    def _tick(self) -> None:
        try:
            self.write_pending()
        except Exception:  # a bug here must stop the recording, never the proxy's loop
            LOG.exception("trace recording stopped: the writer failed; the proxy goes on without it")
            self.stopped = True
            self._finished.clear()
            return
        if not self._closing and self._loop is not None:
            self._timer = self._loop.call_later(self.interval_s, self._tick)

    def write_pending(self) -> None:
        """Write the finished requests whose turn has come (every earlier arrival finished)."""
        chunk: list[bytes] = []
        while self._finished:
            sequence, fields = self._finished.popleft()
            observation = None if fields is None else Observation(*fields)
            if sequence == self._next and not self._ready:
                self._take(observation, chunk)  # in arrival order, as most are: no reordering
            else:
                self._ready[sequence] = observation
        if len(self._ready) > self.max_waiting:  # a ticket never came back: skip past it
            self._next = min(self._ready)
        while self._next in self._ready:
            self._take(self._ready.pop(self._next), chunk)
        self._write(chunk)

    def _take(self, observation: Observation | None, chunk: list[bytes]) -> None:
        """The next request in arrival order into ``chunk`` (None: dropped, counted)."""
        self._next += 1
        if self.stopped:
            return
        if observation is None:
            self.dropped += 1
            return
        try:
            encoded = self._encoded(observation, chunk)
        except OSError as error:
            self._stop(error)
            return
        if encoded is not None:
            chunk.append(encoded)
            self._file_bytes += len(encoded)

    def _encoded(self, observation: Observation, chunk: list[bytes]) -> bytes | None:
        """The line of ``observation``, in the file it goes to (rotating first when it would
        not fit in this one); None for a request without a prompt."""
        encoded = self.lines.encoded(observation)
        if encoded is None:
            self.unrecordable += 1
            return None
        limit = self.rotate_bytes
        if limit is not None and self._file_bytes > 0 and self._file_bytes + len(encoded) > limit:
            self._write(chunk)
            chunk.clear()
            if self.stopped:
                return None
            self._open_next()
            self.lines.restart()
            return self._encoded(observation, chunk)
        return encoded

    def _write(self, chunk: list[bytes]) -> None:
        if not chunk or self.stopped or self._handle is None:
            return
        try:
            self._handle.write(b"".join(chunk))
            self._handle.flush()
        except OSError as error:
            self._stop(error)
            return
        self.recorded += len(chunk)

    def _open_next(self) -> None:
        self._close_file()
        path = rotated_path(self.path, len(self.files))
        self._handle = self.opener(path)
        self._file_bytes = 0
        self.files.append(path)

    def _close_file(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            try:
                handle.close()
            except OSError as error:
                self._stop(error)

    def _stop(self, error: OSError) -> None:
        """Stop recording for good, in one log line; the proxy is not told (it goes on)."""
        if self.stopped:
            return
        self.stopped = True
        self._finished.clear()
        reason = os.strerror(error.errno) if error.errno else str(error)
        LOG.error(
            "trace recording stopped: writing %s failed (%s); %d requests recorded, the proxy goes on without it",
            self.files[-1] if self.files else self.path,
            reason,
            self.recorded,
        )
        handle, self._handle = self._handle, None
        if handle is not None:
            with contextlib.suppress(OSError):  # already stopped: the one line above said why
                handle.close()
