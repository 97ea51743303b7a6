"""Request bodies under hostile clients: read under a size limit and a deadline, and keyed
off the event loop when large.

- **Size**: a ``Content-Length`` over the limit is refused before a byte of the body is
  read; a body without one (chunked) is counted as it arrives and refused once it passes
  the limit. Either way the client gets 413 (:func:`send_too_large`), and what it still
  sends is read and thrown away for a bounded time, so a client that writes its whole body
  before reading (httpx, requests) sees the 413 rather than a reset connection.
- **Time**: the whole body must arrive within a deadline (a client sending one byte a
  second holds nothing for long): 408 and the connection closed (:class:`BodyDeadlines`).
- **Keying**: parsing and hashing a body of megabytes holds the interpreter (``json.loads``
  and ``json.dumps`` run in C without releasing the GIL, so a thread would not help): bodies
  from :data:`OFF_LOOP_KEY_MIN_BYTES` up are keyed in a worker process
  (:class:`OffLoopKeyer`), which sends back only the small :class:`KeyedRequest`.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from functools import partial
from typing import Any

from services.cache_proxy.keys import KeyedRequest, UnkeyableBody, key_request
from services.cache_proxy.responses import Message, Receive, Send, error_body

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
DEFAULT_BODY_TIMEOUT_S = 10.0
# Below this a body is keyed on the loop (a 64 KiB chat body takes about a millisecond);
# from it up, in the worker process (a round trip of about a millisecond).
OFF_LOOP_KEY_MIN_BYTES = 64 * 1024
# After a 413, what the client still sends is read and dropped for at most this long.
DRAIN_AFTER_REFUSAL_S = 5.0


class BodyTooLarge(Exception):
    """The body (or its declared length) is over the limit."""


class BodyReadTimeout(Exception):
    """The body did not arrive within the deadline."""


class ClientGone(Exception):
    """The client left before its request was read."""


def declared_body_bytes(headers: Iterable[tuple[bytes, bytes]]) -> int | None:
    """The request's ``Content-Length``, or None without one (or when it is not a number:
    the server has refused such a request before the app sees it)."""
    for name, value in headers:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class BodyDeadlines:
    """Ends body reads that have taken longer than ``timeout_s``.

    One timer checks every read in progress a few times per deadline, so a read costs a
    dict entry, not a timer of its own (the hit path reads a body on every request). A
    read is cancelled between ``timeout_s`` and ``1.25 * timeout_s`` after it started.
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.check_interval_s = min(1.0, timeout_s / 4)
        # What a read's deadline cancels: the reading task, or a future it races against.
        self._started_at: dict[asyncio.Future[Any], float] = {}
        self._expired: set[asyncio.Future[Any]] = set()
        self._timer: asyncio.TimerHandle | None = None

    def start(self, read: asyncio.Future[Any], started_at: float | None = None) -> None:
        """A read began (at ``started_at``, loop time, default now): at its deadline a task
        is cancelled, a future is given its result (None)."""
        loop = asyncio.get_running_loop()
        self._started_at[read] = loop.time() if started_at is None else started_at
        if self._timer is None:
            self._timer = loop.call_later(self.check_interval_s, self._check)

    def finish(self, read: asyncio.Future[Any]) -> None:
        self._started_at.pop(read, None)
        self._expired.discard(read)

    def expired(self, read: asyncio.Future[Any]) -> bool:
        """True when this deadline cancelled ``read``."""
        return read in self._expired

    def _check(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        for read, started_at in list(self._started_at.items()):
            if now - started_at >= self.timeout_s:
                del self._started_at[read]
                self._expired.add(read)
                if isinstance(read, asyncio.Task):
                    read.cancel()
                elif not read.done():
                    read.set_result(None)
        self._timer = loop.call_later(self.check_interval_s, self._check) if self._started_at else None


async def read_limited_body(
    receive: Receive, headers: Iterable[tuple[bytes, bytes]], *, max_body_bytes: int, deadlines: BodyDeadlines
) -> bytes:
    """The whole request body; raise :class:`BodyTooLarge` (before reading when the
    declared length is over ``max_body_bytes``), :class:`BodyReadTimeout` when it took
    longer than ``deadlines`` allow, or :class:`ClientGone`."""
    declared = declared_body_bytes(headers)
    if declared is not None and declared > max_body_bytes:
        raise BodyTooLarge(f"the body declares {declared} bytes")
    task = asyncio.current_task()
    if type(task) is not asyncio.Task:
        # Not a task cancel() can interrupt (granian steps the app with its own scheduler,
        # whose tasks ignore cancel): each receive is raced against the deadline instead.
        started_at = asyncio.get_running_loop().time()
        try:
            return await _read_all(
                partial(_receive_in_time, receive, deadlines, started_at), max_body_bytes=max_body_bytes
            )
        except BodyReadTimeout:
            raise BodyReadTimeout(f"the body did not arrive within {deadlines.timeout_s:g} s") from None
    deadlines.start(task)
    try:
        return await _read_all(receive, max_body_bytes=max_body_bytes)
    except asyncio.CancelledError:
        if deadlines.expired(task):
            task.uncancel()
            raise BodyReadTimeout(f"the body did not arrive within {deadlines.timeout_s:g} s") from None
        raise
    finally:
        deadlines.finish(task)


async def _read_all(receive: Receive, *, max_body_bytes: int) -> bytes:
    message = await receive()
    if message["type"] == "http.disconnect":
        raise ClientGone
    body: bytes = message.get("body", b"")
    if not message.get("more_body", False):  # the common case: the whole body at once
        if len(body) > max_body_bytes:
            raise BodyTooLarge(f"the body holds more than {max_body_bytes} bytes")
        return body
    chunks = [body]
    received_bytes = len(body)
    more_body = True
    while more_body:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        received_bytes += len(chunk)
        if received_bytes > max_body_bytes:
            raise BodyTooLarge(f"the body holds more than {max_body_bytes} bytes")
        chunks.append(chunk)
        more_body = message.get("more_body", False)
    return b"".join(chunks)


async def _receive_in_time(receive: Receive, deadlines: BodyDeadlines, started_at: float) -> Message:
    """The next message, unless the read that began at ``started_at`` runs out of time
    first: then :class:`BodyReadTimeout`. Nothing here is cancelled or raised through a
    future, so it works under a scheduler that cannot resume a coroutine after that."""
    pending = asyncio.ensure_future(receive())  # granian's receive already returns a future
    woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    pending.add_done_callback(partial(_wake, woken))
    deadlines.start(woken, started_at)
    try:
        await woken
    finally:
        deadlines.finish(woken)
    if not pending.done():
        raise BodyReadTimeout("the body did not arrive in time")
    return pending.result()


def _wake(woken: asyncio.Future[None], _: object) -> None:
    if not woken.done():
        woken.set_result(None)


async def send_too_large(send: Send, receive: Receive, *, max_body_bytes: int) -> None:
    """Answer 413 and close; meanwhile read and drop what the client still sends (for
    :data:`DRAIN_AFTER_REFUSAL_S` at most), so it sees the answer, not a reset."""
    body = error_body(f"the request body is over the proxy's limit of {max_body_bytes} bytes", "request_too_large")
    await send({"type": "http.response.start", "status": 413, "headers": _closing_headers(body)})
    await send({"type": "http.response.body", "body": body, "more_body": True})
    drain = BodyDeadlines(DRAIN_AFTER_REFUSAL_S)
    started_at = asyncio.get_running_loop().time()
    try:
        while True:
            message = await _receive_in_time(receive, drain, started_at)
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
    except BodyReadTimeout:
        pass
    await send({"type": "http.response.body", "body": b""})


async def send_read_timeout(send: Send, message: str) -> None:
    """Answer 408 and close the connection."""
    body = error_body(message, "request_timeout")
    await send({"type": "http.response.start", "status": 408, "headers": _closing_headers(body)})
    await send({"type": "http.response.body", "body": body})


def _closing_headers(body: bytes) -> list[tuple[bytes, bytes]]:
    return [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body)), (b"connection", b"close")]


class OffLoopKeyer:
    """Keys large bodies in one worker process (started on first use, replaced if it dies)."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None

    async def key(
        self, raw_body: bytes, *, upstream_identity: str, path: str, namespace: str, requester: str | None
    ) -> KeyedRequest:
        """:func:`~services.cache_proxy.keys.key_request` in the worker; raise
        :class:`UnkeyableBody` (also when the worker died on this body)."""
        if self._pool is None:
            # spawn: a fresh interpreter, never a fork of a process holding server threads.
            self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        pool = self._pool
        try:
            future = asyncio.wrap_future(
                pool.submit(
                    key_request,
                    raw_body,
                    upstream_identity=upstream_identity,
                    path=path,
                    namespace=namespace,
                    requester=requester,
                )
            )
            # Waited for, then read: its exception is raised here, not thrown in by the server's
            # scheduler (granian cannot resume a coroutine after that; see resp.py).
            await asyncio.wait((future,))
            return future.result()
        except BrokenProcessPool as error:
            if self._pool is pool:
                self._pool = None
            pool.shutdown(wait=False, cancel_futures=True)
            raise UnkeyableBody(f"the body could not be keyed: {error}") from error

    def close(self) -> None:
        """Stop the worker process."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
