"""A minimal pipelined Redis client (RESP2) for the proxy's hot path.

One shared connection; concurrent commands are pipelined and their replies matched in
order, so no pool checkout per call and Redis answers many GETs per read. A timed-out call
leaves its reply slot in the queue, so replies stay matched. With a :class:`LocalTier`
it turns on client tracking and feeds Redis's invalidations to the tier.

A failed command's future holds its exception as its *result*, raised by the caller once
awake: granian's scheduler, which steps the app's coroutine itself, cannot resume a
coroutine after throwing a future's exception into it (the coroutine would hang).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any, cast
from urllib.parse import urlsplit

from services.cache_proxy.local_tier import LocalTier


class RedisUnavailable(Exception):
    """Redis could not answer in time (refused, closed, timed out or error reply)."""


class RedisWrongType(Exception):
    """Redis answered, but the key holds another type (a list, a hash...) than the command
    reads: the entry is bad, Redis is fine (not a :class:`RedisUnavailable`)."""


def _error_reply(message: str) -> Exception:
    """The exception an error reply stands for: WRONGTYPE is about the key, not Redis."""
    if message.startswith("WRONGTYPE"):
        return RedisWrongType(message)
    return RedisUnavailable(message)


class _Incomplete(Exception):
    pass


def _parse_resp(buffer: bytes | bytearray, position: int) -> tuple[Any, int]:
    """Parse one RESP2 reply at ``position``; raise :class:`_Incomplete` when more bytes
    are needed. Error replies come back as exception instances (:func:`_error_reply`)."""
    line_end = buffer.find(b"\r\n", position)
    if line_end < 0:
        raise _Incomplete
    kind = buffer[position]
    header = bytes(buffer[position + 1 : line_end])
    after = line_end + 2
    if kind == 0x24:  # $ bulk string
        length = int(header)
        if length < 0:
            return None, after
        end = after + length
        if len(buffer) < end + 2:
            raise _Incomplete
        return bytes(buffer[after:end]), end + 2
    if kind == 0x2B:  # + simple string
        return header, after
    if kind == 0x3A:  # : integer
        return int(header), after
    if kind == 0x2D:  # - error
        return _error_reply(header.decode("utf-8", "replace")), after
    if kind == 0x2A:  # * array
        count = int(header)
        if count < 0:
            return None, after
        items = []
        for _ in range(count):
            item, after = _parse_resp(buffer, after)
            items.append(item)
        return items, after
    raise RedisUnavailable(f"unexpected RESP type byte {kind!r}")


def encode_command(*parts: bytes | str | int) -> bytes:
    """Encode a Redis command as a RESP array of bulk strings."""
    chunks = [b"*%d\r\n" % len(parts)]
    for part in parts:
        data = part if isinstance(part, bytes) else str(part).encode("utf-8")
        chunks.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(chunks)


class _RespProtocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.pending: deque[asyncio.Future[Any]] = deque()
        self.buffer = bytearray()
        self.closed = False
        # Set on a subscribed connection: called with each pub/sub message's payload.
        self.on_message: Callable[[Any], None] | None = None
        self.on_lost: Callable[[], None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream connection's transport is an asyncio.Transport (typeshed types the hook for any protocol).
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        position = 0
        buffer = self.buffer
        while position < len(buffer) and (self.pending or self.on_message is not None):
            try:
                reply, position_after = _parse_resp(buffer, position)
            except _Incomplete:
                break
            except (ValueError, RedisUnavailable) as error:
                self._fail_all(RedisUnavailable(f"bad reply from Redis: {error}"))
                if self.transport is not None:
                    self.transport.close()
                return
            position = position_after
            if self.on_message is not None and isinstance(reply, list) and reply and reply[0] == b"message":
                self.on_message(reply[2])
                continue
            if not self.pending:
                continue
            future = self.pending.popleft()
            if not future.done():  # a timed-out caller left; keep FIFO order anyway
                future.set_result(reply)  # an error reply is an exception instance (module docstring)
        if position:
            del buffer[:position]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail_all(RedisUnavailable(f"connection to Redis lost: {exc}"))
        if self.on_lost is not None:
            self.on_lost()

    def _fail_all(self, error: Exception) -> None:
        while self.pending:
            future = self.pending.popleft()
            if not future.done():
                future.set_result(error)


def _timeout_future(future: asyncio.Future[Any], timeout_s: float) -> None:
    if not future.done():
        future.set_result(RedisUnavailable(f"Redis did not answer within {timeout_s * 1000:.0f} ms"))


def _timeout_futures(futures: list[asyncio.Future[Any]], timeout_s: float) -> None:
    for future in futures:
        _timeout_future(future, timeout_s)


class PipelinedRedis:
    """One shared Redis connection; concurrent commands are pipelined and their replies
    matched in order. Every command has a deadline; nothing is retried.

    Enough of Redis for the proxy: GET, SET [EX], PING, SCAN, UNLINK.
    """

    def __init__(self, redis_url: str, *, timeout_s: float = 0.05, local_tier: LocalTier | None = None):
        parts = urlsplit(redis_url)
        if parts.scheme not in ("redis", ""):
            raise ValueError(f"only redis:// URLs are supported, not {redis_url!r}")
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 6379
        self.password = parts.password
        self.db = int(parts.path.strip("/") or 0)
        self.timeout_s = timeout_s
        self.local_tier = local_tier
        self._protocol: _RespProtocol | None = None
        self._invalidations: _RespProtocol | None = None
        self._connecting: asyncio.Future[_RespProtocol | RedisUnavailable] | None = None

    async def _open_connection(self) -> _RespProtocol:
        loop = asyncio.get_running_loop()
        try:
            _, protocol = await asyncio.wait_for(
                loop.create_connection(_RespProtocol, self.host, self.port), timeout=max(self.timeout_s, 0.2)
            )
        except (TimeoutError, OSError) as error:
            raise RedisUnavailable(f"cannot connect to Redis at {self.host}:{self.port}: {error!r}") from error
        return protocol

    async def _command_on(self, protocol: _RespProtocol, *parts: bytes | str | int) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        protocol.pending.append(future)
        assert protocol.transport is not None
        protocol.transport.write(encode_command(*parts))
        try:
            reply = await asyncio.wait_for(future, timeout=max(self.timeout_s, 1.0))
        except TimeoutError as error:
            raise RedisUnavailable(f"Redis did not answer {parts[0]!r} in time") from error
        if isinstance(reply, Exception):
            raise reply
        return reply

    async def _connect(self) -> _RespProtocol:
        protocol = await self._open_connection()
        if self.local_tier is not None:
            protocol.on_lost = self.local_tier.disable
        setup: list[tuple[bytes | str | int, ...]] = []
        if self.password:
            setup.append(("AUTH", self.password))
        if self.db:
            setup.append(("SELECT", self.db))
        for command in setup:
            await self._command_on(protocol, *command)
        if self.local_tier is not None:
            await self._start_tracking(protocol)
        self._protocol = protocol
        return protocol

    async def _start_tracking(self, protocol: _RespProtocol) -> None:
        """Open the invalidation connection and turn tracking on for ``protocol``; the
        local tier serves only once both are confirmed. A failure leaves it off."""
        tier = self.local_tier
        assert tier is not None
        tier.disable()
        if self._invalidations is not None and self._invalidations.transport is not None:
            self._invalidations.on_lost = None  # its end must not switch off the new tier
            self._invalidations.transport.close()
        listener: _RespProtocol | None = None
        try:
            listener = await self._open_connection()
            if self.password:
                await self._command_on(listener, "AUTH", self.password)
            client_id = await self._command_on(listener, "CLIENT", "ID")
            await self._command_on(listener, "SUBSCRIBE", "__redis__:invalidate")
            listener.on_message = tier.invalidate
            await self._command_on(protocol, "CLIENT", "TRACKING", "ON", "REDIRECT", client_id)
        except RedisUnavailable:
            if listener is not None and listener.transport is not None:
                listener.transport.close()
            return
        # Without the listener invalidations are lost: drop the tier and the tracked
        # connection, so the next command reconnects both.
        listener.on_lost = lambda: self._invalidations_lost(protocol)
        self._invalidations = listener
        if not protocol.closed and not listener.closed:
            tier.enable()

    def _invalidations_lost(self, protocol: _RespProtocol) -> None:
        assert self.local_tier is not None
        self.local_tier.disable()
        if protocol.transport is not None:
            protocol.transport.close()

    async def _get_protocol(self) -> _RespProtocol:
        protocol = self._protocol
        if protocol is not None and not protocol.closed:
            return protocol
        # One connect at a time; concurrent callers wait for it.
        if self._connecting is None or self._connecting.done():
            self._connecting = asyncio.ensure_future(self._connect_or_failure())
        connected = await asyncio.shield(self._connecting)
        if isinstance(connected, RedisUnavailable):
            raise connected
        return connected

    async def _connect_or_failure(self) -> _RespProtocol | RedisUnavailable:
        try:
            return await self._connect()
        except RedisUnavailable as error:
            return error

    async def execute(self, *parts: bytes | str | int, timeout_s: float | None = None) -> Any:
        """Send one command and return its reply; raise :class:`RedisUnavailable`."""
        protocol = self._protocol
        if protocol is None or protocol.closed:
            protocol = await self._get_protocol()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        protocol.pending.append(future)
        assert protocol.transport is not None
        protocol.transport.write(encode_command(*parts))
        deadline_s = self.timeout_s if timeout_s is None else timeout_s
        timer = loop.call_later(deadline_s, _timeout_future, future, deadline_s)
        try:
            reply = await future
        finally:
            timer.cancel()
        if isinstance(reply, Exception):
            raise reply
        return reply

    async def execute_pipeline(self, *commands: tuple[bytes | str | int, ...]) -> list[Any]:
        """Send several commands in one write; return their replies in order (one
        deadline for all); raise :class:`RedisUnavailable`."""
        protocol = self._protocol
        if protocol is None or protocol.closed:
            protocol = await self._get_protocol()
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[Any]] = [loop.create_future() for _ in commands]
        protocol.pending.extend(futures)
        assert protocol.transport is not None
        protocol.transport.write(b"".join(encode_command(*parts) for parts in commands))
        timer = loop.call_later(self.timeout_s, _timeout_futures, futures, self.timeout_s)
        try:
            replies = [await future for future in futures]
        finally:
            timer.cancel()
            for future in futures:
                if not future.done():
                    future.cancel()  # its reply slot stays queued, so replies keep their order
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies

    async def get_and_fill(self, key: str) -> bytes | None:
        """GET key, and keep the value in the local tier (with its remaining TTL) unless
        Redis invalidates the key before the reply is in."""
        tier = self.local_tier
        token = tier.begin_fill(key) if tier is not None else None
        if token is None:
            found: bytes | None = await self.execute(b"GET", key)
            return found
        assert tier is not None
        try:
            value, ttl_ms = await self.execute_pipeline((b"GET", key), (b"PTTL", key))
        except BaseException:
            tier.abandon_fill(key, token)
            raise
        tier.finish_fill(key, token, value, int(ttl_ms))
        stored: bytes | None = value
        return stored

    async def unlink(self, key: str) -> None:
        """UNLINK key (whatever its type)."""
        await self.execute(b"UNLINK", key)

    async def set(self, key: str, value: bytes, *, ttl_s: int | None = None) -> None:
        """SET key value [EX ttl_s]."""
        if ttl_s:
            await self.execute(b"SET", key, value, b"EX", ttl_s)
        else:
            await self.execute(b"SET", key, value)

    async def ping(self, *, timeout_s: float | None = None) -> bool:
        """PING; True when answered PONG."""
        answer: Any = await self.execute(b"PING", timeout_s=timeout_s)
        return bool(answer == b"PONG")

    async def flush_prefix(self, prefix: str, *, timeout_s: float = 5.0, batch: int = 1000) -> int:
        """Delete every key starting with ``prefix`` (SCAN + UNLINK); return how many."""
        deleted = 0
        cursor = b"0"
        pattern = prefix.replace("\\", "\\\\").replace("*", "\\*").replace("?", "\\?").replace("[", "\\[") + "*"
        while True:
            cursor, keys = await self.execute(b"SCAN", cursor, b"MATCH", pattern, b"COUNT", batch, timeout_s=timeout_s)
            if keys:
                deleted += int(await self.execute(b"UNLINK", *keys, timeout_s=timeout_s))
            if cursor == b"0":
                return deleted

    async def close(self) -> None:
        """Close the connections (pending commands fail)."""
        if self.local_tier is not None:
            self.local_tier.disable()
        for protocol in (self._invalidations, self._protocol):
            if protocol is not None and protocol.transport is not None:
                protocol.on_lost = None
                protocol.transport.close()
        self._protocol = None
        self._invalidations = None
