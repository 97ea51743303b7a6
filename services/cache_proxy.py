"""Redis response cache in front of any OpenAI-compatible upstream.

The seed's experiment 2 put a FastAPI proxy keyed on ``sha256(raw body)`` in front of
vLLM. This is that proxy made correct and fast:

- **Key**: :func:`services.cache_key.cache_key` (canonical JSON of upstream, path and every
  answer-changing field), so key-order and whitespace variants share an entry and
  different models or upstreams never do.
- **Policy**: ``all`` caches every successful answer (the seed's behaviour, used by the
  seed-reproduction presets); ``deterministic`` only temperature-0 or seeded, ``n == 1``
  requests (a missing temperature is 1.0 on vLLM and the naive server: not cached). Per
  request ``Cache-Control: no-cache`` refreshes, ``no-store`` bypasses (every
  ``Cache-Control`` line is read). Every proxied response carries
  ``X-Cache: HIT|MISS|BYPASS|ERROR``.
- **Credentials** (``--credentials``): a request carrying credentials (Authorization,
  cookies, api-key headers, a query string; :func:`services.cache_key.is_credential_header`)
  bypasses the cache by default, or is cached per credential: an HMAC of its credentials
  with a per-proxy secret joins the key and so the single-flight group. One credential's
  answer is never served to another (RFC 9111, section 3.5).
- **Never cached**: non-2xx answers, answers without choices, streams cut off by the
  client or the upstream, answers the upstream marked ``Cache-Control: no-store`` or
  ``private`` or that set a cookie, and bodies that cannot be keyed
  (not a JSON object, NaN, overflowing numbers, lone surrogates, repeated keys, deep
  nesting: passed through as BYPASS). A ``length`` finish is complete and cached.
- **Streaming**: a miss is passed through as it arrives and stored (raw SSE bytes) only
  once ``data: [DONE]`` arrived; a hit replays those bytes as ``text/event-stream``.
- **Single-flight** (switchable): concurrent identical misses make one upstream call; only
  a successful, storable answer is shared, followers of a failed leader ask the upstream.
- **Fail-open**: Redis calls have a short timeout and no retries; a circuit breaker
  stops asking a failing Redis for a few seconds, then lets one trial through. Meanwhile
  requests go straight upstream with ``X-Cache: ERROR``; the cache never causes a 5xx.
- ``GET /metrics`` (own prometheus registry), ``GET /health`` (upstream and Redis
  reachability), ``POST /cache/flush`` (SCAN + UNLINK of this namespace only); every other
  path is passed through uncached.

- **Local tier** (:class:`LocalTier`, on by default, bounded in entries and bytes): hits
  are answered from process memory, kept coherent by Redis's client tracking (an entry
  is dropped when Redis says its key was overwritten, deleted, expired, evicted or
  flushed) and by the TTL read with each value. Off while that is not guaranteed.

Speed: it is a raw ASGI app (no framework routing or middleware) and talks to Redis over
one shared, pipelined RESP connection (:class:`PipelinedRedis`): on a hit the request body
is parsed once, hashed once, one ``GET`` is written and the stored bytes are sent as they
came from Redis. A pipelined connection needs no pool checkout per call and lets Redis
answer many concurrent GETs per read; a timed-out call leaves its reply slot in the queue,
so replies stay matched in order. Repeated request bodies are memoised (bounded) by their
bytes, so a repeated hit neither parses nor hashes again. One shared
``httpx.AsyncClient`` serves all upstream calls.
Both are opened in the ASGI lifespan (or lazily on the first request when the host skips
the lifespan, as ``httpx.ASGITransport`` does).

Standalone::

    python -m services.cache_proxy --upstream URL --redis-url URL --port N \\
        [--policy all|deterministic] [--credentials bypass|per-credential] [--ttl-s N] \\
        [--no-single-flight] [--namespace NAME]
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import enum
import json
import os
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

from services.cache_key import (
    UnkeyableBody,
    cache_key,
    is_deterministic_request,
    key_prefix,
    normalize_upstream_identity,
    parse_keyable_body,
    requester_fingerprint,
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

POLICIES = ("all", "deterministic")
# What happens to a request carrying credentials (see CREDENTIAL_MODES_HELP).
CREDENTIAL_MODES = ("bypass", "per-credential")
CREDENTIAL_MODES_HELP = (
    "requests carrying credentials (Authorization, Proxy-Authorization, Cookie, api-key, x-api-key, any header "
    "whose name holds auth/key/token/secret/cookie/session, or a query string): 'bypass' (default) sends them "
    "upstream uncached, so the upstream checks every credential every time; 'per-credential' caches them in a "
    "separate entry per credential, keyed by an HMAC of the credential with this proxy's secret (a revoked "
    "credential keeps getting its own cached answers until they expire). Requests without credentials, such "
    "as the lab's own load, are cached either way."
)
CACHED_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})
# Memo of parsed request bodies (see CacheProxy._parse_request): at most this many
# entries of at most this many bytes each, i.e. a few tens of MB at worst.
PARSED_REQUEST_MEMO_ENTRIES = 4096
PARSED_REQUEST_MEMO_MAX_BODY_BYTES = 8192

# Request headers not forwarded upstream: hop-by-hop, recomputed, or ones that would let
# the upstream compress (we pass bytes through and store them as sent).
_REQUEST_HEADERS_NOT_FORWARDED = frozenset(
    {
        b"host", b"content-length", b"connection", b"keep-alive", b"transfer-encoding", b"te",
        b"upgrade", b"proxy-connection", b"accept-encoding", b"cache-control",
    }
)
_RESPONSE_HEADERS_NOT_FORWARDED = frozenset(
    {"content-length", "connection", "keep-alive", "transfer-encoding", "content-encoding", "date", "server"}
)

_JSON = b"application/json"
_SSE = b"text/event-stream"
# Stored value layout: one tag byte for the content type, then the body as sent upstream.
_TAG_BY_CONTENT_TYPE = {_JSON: b"j", _SSE: b"s"}
_CONTENT_TYPE_BY_TAG = {ord("j"): _JSON, ord("s"): _SSE}


class CacheMode(enum.Enum):
    """What the proxy does with a cacheable-path request."""

    LOOKUP = "lookup"  # read the cache, on a miss call upstream and store
    REFRESH = "refresh"  # Cache-Control: no-cache: skip the read, call upstream, store
    BYPASS = "bypass"  # no-store, or the policy says no: neither read nor store


class XCache(bytes, enum.Enum):
    """Values of the ``X-Cache`` response header."""

    HIT = b"HIT"
    MISS = b"MISS"
    BYPASS = b"BYPASS"
    ERROR = b"ERROR"


# ---------------------------------------------------------------------------------------
# Pure decisions (unit-tested without any network)
# ---------------------------------------------------------------------------------------


def parse_cache_control(value: str | bytes | None) -> frozenset[str]:
    """Directive names of a ``Cache-Control`` header, lower-case (``"no-cache, max-age=0"``
    -> ``{"no-cache", "max-age"}``)."""
    if not value:
        return frozenset()
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    return frozenset(part.split("=", 1)[0].strip().lower() for part in value.split(",") if part.strip())


def request_cache_control(headers: Iterable[tuple[bytes, bytes]]) -> bytes:
    """Every ``Cache-Control`` request header line, joined as one comma list."""
    lines = [value for name, value in headers if name == b"cache-control"]
    return lines[0] if len(lines) == 1 else b",".join(lines)


# Response directives that forbid a shared cache to store the answer (RFC 9111 5.2.2).
# Not "no-cache": SSE servers send it to stop intermediaries buffering a stream (the lab's
# naive server does), and honouring it would leave every stream uncached.
_RESPONSE_DIRECTIVES_NOT_STORED = frozenset({"no-store", "private"})


def response_allows_storing(headers: Iterable[tuple[str, str]]) -> bool:
    """False when the upstream's answer says it must not sit in a shared cache:
    ``Cache-Control`` no-store or private (any line), or a ``Set-Cookie`` (a per-user
    answer)."""
    for name, value in headers:
        lowered = name.lower()
        if lowered == "set-cookie":
            return False
        if lowered == "cache-control" and parse_cache_control(value) & _RESPONSE_DIRECTIVES_NOT_STORED:
            return False
    return True


def decide_cache_mode(*, body: Mapping[str, Any], cache_control: str | bytes | None, policy: str) -> CacheMode:
    """Decide whether a request is looked up, refreshed or bypassed.

    ``no-store`` bypasses; the ``deterministic`` policy bypasses requests that may differ
    between calls; ``no-cache`` refreshes; everything else is looked up.
    """
    directives = parse_cache_control(cache_control)
    if "no-store" in directives:
        return CacheMode.BYPASS
    if policy == "deterministic" and not is_deterministic_request(body):
        return CacheMode.BYPASS
    if "no-cache" in directives:
        return CacheMode.REFRESH
    return CacheMode.LOOKUP


def is_cacheable_json_answer(status_code: int, body: bytes) -> bool:
    """True for a 2xx JSON answer holding a non-empty ``choices`` list."""
    if not 200 <= status_code < 300:
        return False
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(document, dict) and isinstance(document.get("choices"), list) and bool(document["choices"])


@dataclass
class SseSummary:
    """What a chat/completions SSE stream said, assembled."""

    text: str = ""
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    chunk_count: int = 0
    saw_choices: bool = False
    saw_error: bool = False
    done: bool = False

    @property
    def is_complete(self) -> bool:
        """True when the stream ended with ``[DONE]``, carried choices and no error."""
        return self.done and self.saw_choices and not self.saw_error


def summarize_sse(raw: bytes) -> SseSummary:
    """Assemble an OpenAI-style SSE stream: text, finish reason, usage, completeness.

    Works for chat (``delta.content``) and completions (``text``) chunks.
    """
    summary = SseSummary()
    for line in raw.split(b"\n"):
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            summary.done = True
            continue
        try:
            chunk = json.loads(payload)
        except (ValueError, UnicodeDecodeError):
            summary.saw_error = True
            continue
        if not isinstance(chunk, dict):
            continue
        summary.chunk_count += 1
        if "error" in chunk:
            summary.saw_error = True
        if chunk.get("usage"):
            summary.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            summary.saw_choices = True
            delta = choice.get("delta") or {}
            piece = delta.get("content") if isinstance(delta, dict) else None
            if piece is None:
                piece = choice.get("text")
            if isinstance(piece, str):
                summary.text += piece
            if choice.get("finish_reason"):
                summary.finish_reason = choice["finish_reason"]
    return summary


class CircuitBreaker:
    """Stops calling a failing dependency for a while.

    Closed: every call allowed. After ``failure_threshold`` consecutive failures it opens:
    no call for ``open_s`` seconds. Then half-open: one trial call is allowed (another one
    only if the trial has not reported within ``open_s``); its success closes the breaker,
    its failure opens it again.
    """

    def __init__(self, *, failure_threshold: int = 3, open_s: float = 2.0, clock: Callable[[], float] = time.monotonic):
        self.failure_threshold = failure_threshold
        self.open_s = open_s
        self._clock = clock
        self._consecutive_failures = 0
        self._opened_at: float | None = None
        self._trial_started_at: float | None = None

    @property
    def state(self) -> str:
        """``closed``, ``open`` or ``half-open``."""
        if self._opened_at is None:
            return "closed"
        if self._clock() - self._opened_at < self.open_s:
            return "open"
        return "half-open"

    def allow(self) -> bool:
        """May the caller use the dependency now?"""
        if self._opened_at is None:
            return True
        now = self._clock()
        if now - self._opened_at < self.open_s:
            return False
        if self._trial_started_at is not None and now - self._trial_started_at < self.open_s:
            return False
        self._trial_started_at = now
        return True

    def record_success(self) -> None:
        """A call succeeded: close."""
        self._consecutive_failures = 0
        self._opened_at = None
        self._trial_started_at = None

    def record_failure(self) -> None:
        """A call failed: count it; open when the threshold is reached (or the trial failed)."""
        self._consecutive_failures += 1
        if self._opened_at is not None or self._consecutive_failures >= self.failure_threshold:
            self._opened_at = self._clock()
            self._trial_started_at = None


# ---------------------------------------------------------------------------------------
# A minimal pipelined Redis client (RESP2) for the hot path
# ---------------------------------------------------------------------------------------


class RedisUnavailable(Exception):
    """Redis could not answer in time (refused, closed, timed out or error reply)."""


class _Incomplete(Exception):
    pass


def _parse_resp(buffer: bytes | bytearray, position: int) -> tuple[Any, int]:
    """Parse one RESP2 reply at ``position``; raise :class:`_Incomplete` when more bytes
    are needed. Error replies come back as :class:`RedisUnavailable` instances."""
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
        return RedisUnavailable(header.decode("utf-8", "replace")), after
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
        self.transport = transport  # type: ignore[assignment]

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
                if isinstance(reply, RedisUnavailable):
                    future.set_exception(reply)
                else:
                    future.set_result(reply)
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
                future.set_exception(error)


def _timeout_future(future: asyncio.Future[Any], timeout_s: float) -> None:
    if not future.done():
        future.set_exception(RedisUnavailable(f"Redis did not answer within {timeout_s * 1000:.0f} ms"))


def _timeout_futures(futures: list[asyncio.Future[Any]], timeout_s: float) -> None:
    for future in futures:
        _timeout_future(future, timeout_s)


class LocalTier:
    """An in-process LRU of stored answers, kept coherent by Redis itself.

    Redis's client tracking (``CLIENT TRACKING ON REDIRECT``) remembers every key the
    proxy's connection read and pushes an invalidation message on a second connection
    when that key is overwritten, deleted, expired, evicted or flushed;
    :meth:`invalidate` drops it here. Entries also carry the key's remaining TTL (read
    with the value), so an expiry is honoured even before Redis gets round to it.

    Races: a value is filled only by the read that began :meth:`begin_fill`; an
    invalidation (or a lost connection) between the read being sent and its reply
    cancels the fill. While tracking is not confirmed (:attr:`coherent` False) nothing is
    filled or served. Bounded by ``max_entries`` and ``max_bytes`` (values over
    ``max_bytes // 16`` are never kept).
    """

    def __init__(
        self, *, max_entries: int, max_bytes: int, clock: Callable[[], float] = time.monotonic,
        prepare: Callable[[bytes], Any] = bytes,
    ):
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_value_bytes = max_bytes // 16
        self._clock = clock
        # What get() returns for a stored value, computed once per fill (the proxy keeps
        # the answer's headers ready, so a local hit formats nothing).
        self._prepare = prepare
        # key -> (prepared value, its size in bytes, deadline or None)
        self._entries: OrderedDict[str, tuple[Any, int, float | None]] = OrderedDict()
        self._fills: dict[str, object] = {}
        self.bytes_used = 0
        self.coherent = False
        self.epoch = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> Any:
        """The prepared stored value, or None (absent, expired, or the tier is not coherent)."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        value, _, deadline = entry
        if deadline is not None and self._clock() >= deadline:
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        return value

    def begin_fill(self, key: str) -> object | None:
        """Call before reading ``key`` from Redis; None when the tier cannot be filled now."""
        if not self.coherent:
            return None
        token = (self.epoch, object())
        self._fills[key] = token
        return token

    def finish_fill(self, key: str, token: object, value: bytes | None, ttl_ms: int) -> None:
        """Keep ``value`` read for ``key`` unless an invalidation came in between."""
        if self._fills.get(key) is not token:
            return
        del self._fills[key]
        if value is None or not self.coherent or len(value) > self.max_value_bytes or ttl_ms == -2:
            return
        deadline = self._clock() + ttl_ms / 1000 if ttl_ms >= 0 else None
        self._drop(key)
        self._entries[key] = (self._prepare(value), len(value), deadline)
        self.bytes_used += len(value)
        while len(self._entries) > self.max_entries or self.bytes_used > self.max_bytes:
            _, (_, evicted_bytes, _) = self._entries.popitem(last=False)
            self.bytes_used -= evicted_bytes

    def abandon_fill(self, key: str, token: object) -> None:
        """The read failed: forget the fill."""
        if self._fills.get(key) is token:
            del self._fills[key]

    def invalidate(self, keys: Iterable[bytes | str] | None) -> None:
        """Redis said these keys changed (None: everything, after a FLUSHDB/FLUSHALL)."""
        if keys is None:
            self.clear()
            return
        for key in keys:
            name = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
            self._fills.pop(name, None)
            self._drop(name)

    def clear(self) -> None:
        """Drop every entry and cancel every fill in progress."""
        self._entries.clear()
        self._fills.clear()
        self.bytes_used = 0

    def enable(self) -> None:
        """Tracking is confirmed on the current connection: start a new epoch."""
        self.clear()
        self.epoch += 1
        self.coherent = True

    def disable(self) -> None:
        """Invalidations may be lost from now on: serve and fill nothing."""
        self.coherent = False
        self.epoch += 1
        self.clear()

    def _drop(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.bytes_used -= entry[1]


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
        self._connecting: asyncio.Future[_RespProtocol] | None = None

    async def _open_connection(self) -> _RespProtocol:
        loop = asyncio.get_running_loop()
        try:
            _, protocol = await asyncio.wait_for(
                loop.create_connection(_RespProtocol, self.host, self.port), timeout=max(self.timeout_s, 0.2)
            )
        except (OSError, asyncio.TimeoutError) as error:
            raise RedisUnavailable(f"cannot connect to Redis at {self.host}:{self.port}: {error!r}") from error
        return protocol

    async def _command_on(self, protocol: _RespProtocol, *parts: bytes | str | int) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        protocol.pending.append(future)
        assert protocol.transport is not None
        protocol.transport.write(encode_command(*parts))
        try:
            reply = await asyncio.wait_for(future, timeout=max(self.timeout_s, 1.0))
        except asyncio.TimeoutError as error:
            raise RedisUnavailable(f"Redis did not answer {parts[0]!r} in time") from error
        if isinstance(reply, RedisUnavailable):
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
            self._connecting = asyncio.ensure_future(self._connect())
        return await asyncio.shield(self._connecting)

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
            return await future
        finally:
            timer.cancel()

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
            return [await future for future in futures]
        finally:
            timer.cancel()
            for future in futures:
                if not future.done():
                    future.cancel()  # its reply slot stays queued, so replies keep their order
                elif not future.cancelled():
                    future.exception()  # retrieved: no "never retrieved" warning for the rest

    async def get(self, key: str) -> bytes | None:
        """GET key."""
        return await self.execute(b"GET", key)

    async def get_and_fill(self, key: str) -> bytes | None:
        """GET key, and keep the value in the local tier (with its remaining TTL) unless
        Redis invalidates the key before the reply is in."""
        tier = self.local_tier
        token = tier.begin_fill(key) if tier is not None else None
        if token is None:
            return await self.execute(b"GET", key)
        assert tier is not None
        try:
            value, ttl_ms = await self.execute_pipeline((b"GET", key), (b"PTTL", key))
        except BaseException:
            tier.abandon_fill(key, token)
            raise
        tier.finish_fill(key, token, value, int(ttl_ms))
        return value

    async def set(self, key: str, value: bytes, *, ttl_s: int | None = None) -> None:
        """SET key value [EX ttl_s]."""
        if ttl_s:
            await self.execute(b"SET", key, value, b"EX", ttl_s)
        else:
            await self.execute(b"SET", key, value)

    async def ping(self, *, timeout_s: float | None = None) -> bool:
        """PING; True when answered PONG."""
        return await self.execute(b"PING", timeout_s=timeout_s) == b"PONG"

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


# ---------------------------------------------------------------------------------------
# The proxy
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProxyConfig:
    """Settings of one proxy instance (see :func:`build_app`)."""

    upstream_url: str
    redis_url: str
    policy: str = "all"
    credentials: str = "bypass"
    credential_secret: bytes | None = None
    ttl_s: int | None = None
    namespace: str = "lab"
    single_flight: bool = True
    redis_timeout_s: float = 0.05
    upstream_timeout_s: float = 600.0
    breaker_failure_threshold: int = 3
    breaker_open_s: float = 2.0
    upstream_identity: str | None = None
    local_tier_entries: int = 4096
    local_tier_max_bytes: int = 64 * 1024 * 1024


@dataclass
class UpstreamAnswer:
    """A whole, successful, storable upstream answer, shared with single-flight followers."""

    status_code: int
    content_type: bytes
    body: bytes


def _prepared_hit(stored: bytes) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """The headers and body of a hit on a stored value (tag byte + body)."""
    content_type = _CONTENT_TYPE_BY_TAG.get(stored[0], _JSON)
    payload = stored[1:]
    return [(b"content-type", content_type), (b"content-length", b"%d" % len(payload)), (b"x-cache", b"HIT")], payload


class _HitPathCounter:
    """A counter for the hit path: a plain integer (the proxy is one event loop, so no
    lock), read by :class:`_HitPathCollector` at scrape time. prometheus_client's own
    counters and histogram took about a quarter of a local hit's time in the proxy."""

    __slots__ = ("name", "documentation", "value")

    def __init__(self, name: str, documentation: str) -> None:
        self.name, self.documentation, self.value = name, documentation, 0

    def inc(self) -> None:
        self.value += 1


class _HitPathHistogram:
    """A histogram for the hit path (see :class:`_HitPathCounter`)."""

    def __init__(self, name: str, documentation: str, buckets: tuple[float, ...]) -> None:
        self.name, self.documentation = name, documentation
        self.upper_bounds = list(buckets)
        self.counts = [0] * (len(buckets) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.upper_bounds, value)] += 1
        self.sum += value


class _HitPathCollector:
    def __init__(self, counters: list[_HitPathCounter], histograms: list[_HitPathHistogram]) -> None:
        self.counters, self.histograms = counters, histograms

    def collect(self) -> Iterable[Any]:
        for counter in self.counters:
            yield CounterMetricFamily(counter.name, counter.documentation, value=counter.value)
        for histogram in self.histograms:
            cumulative, buckets = 0, []
            for upper_bound, count in zip([*map(str, histogram.upper_bounds), "+Inf"], histogram.counts):
                cumulative += count
                buckets.append((upper_bound, cumulative))
            yield HistogramMetricFamily(histogram.name, histogram.documentation, buckets=buckets,
                                        sum_value=histogram.sum)


class ProxyMetrics:
    """The proxy's prometheus metrics, in their own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.hits = _HitPathCounter("lab_cache_hits", "Requests answered from the cache.")
        self.misses = Counter("lab_cache_misses", "Cacheable requests sent upstream.", registry=self.registry)
        self.bypasses = Counter(
            "lab_cache_bypasses", "Requests not looked up (no-store, policy, not JSON).", registry=self.registry
        )
        self.errors = Counter(
            "lab_cache_errors", "Requests served upstream because Redis failed or the breaker is open.",
            registry=self.registry,
        )
        self.credential_bypasses = Counter(
            "lab_cache_credential_bypasses", "Requests with credentials passed through uncached (--credentials bypass).",
            registry=self.registry,
        )
        self.unkeyable_bodies = Counter(
            "lab_cache_unkeyable_bodies", "Requests passed through because their body cannot be keyed.",
            registry=self.registry,
        )
        self.store_errors = Counter("lab_cache_store_errors", "Answers that could not be stored.", registry=self.registry)
        self.stores = Counter("lab_cache_stores", "Answers stored in the cache.", registry=self.registry)
        self.single_flight_shared = Counter(
            "lab_cache_single_flight_shared", "Misses answered by another identical in-flight request.",
            registry=self.registry,
        )
        self.local_hits = _HitPathCounter(
            "lab_cache_local_hits", "Hits answered from the in-process tier (no Redis round trip)."
        )
        self.circuit_open = Gauge("lab_cache_circuit_open", "1 while the Redis circuit breaker is open.", registry=self.registry)
        self.hit_latency = _HitPathHistogram(
            "lab_cache_hit_latency_seconds", "Time from request body read to hit answer sent.",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0),
        )
        self.registry.register(_HitPathCollector([self.hits, self.local_hits], [self.hit_latency]))  # type: ignore[arg-type]
        self.upstream_latency = Histogram(
            "lab_cache_upstream_latency_seconds", "Upstream answer time on misses and bypasses (to last byte).",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
            registry=self.registry,
        )


async def _read_body(receive: Receive) -> bytes:
    message = await receive()
    body = message.get("body", b"")
    if not message.get("more_body", False):
        return body
    chunks = [body]
    while message.get("more_body", False):
        message = await receive()
        chunks.append(message.get("body", b""))
    return b"".join(chunks)


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return value
    return None


async def _send_upstream_error(send: Send, error: httpx.HTTPError, x_cache: XCache) -> None:
    """Answer 400 (the client's request cannot be forwarded as sent), 504 (upstream timed
    out) or 502 (unreachable) in OpenAI's error shape."""
    if isinstance(error, (httpx.LocalProtocolError, httpx.UnsupportedProtocol)):
        status, body = 400, _error_body(f"the request cannot be forwarded as sent: {error}", "invalid_request")
    elif isinstance(error, httpx.TimeoutException):
        status, body = 504, _error_body(f"upstream timed out: {error!r}", "upstream_timeout")
    else:
        status, body = 502, _error_body(f"upstream unreachable: {error!r}", "upstream_unreachable")
    await _send_whole(send, status, _json_headers(body, x_cache), body)


async def _send_bad_request(send: Send, message: str) -> None:
    body = _error_body(message, "invalid_request")
    await _send_whole(send, 400, _json_headers(body), body)


class BadRequestTarget(ValueError):
    """The request target cannot be forwarded (``*``, an absolute or malformed URL)."""


def _forwarded_response_headers(response: httpx.Response, x_cache: XCache) -> list[tuple[bytes, bytes]]:
    """The upstream's response headers (Retry-After included) minus hop-by-hop and
    recomputed ones, plus our ``X-Cache``."""
    headers = [
        (name.lower(), value)
        for name, value in response.headers.raw
        if name.lower().decode("latin-1") not in _RESPONSE_HEADERS_NOT_FORWARDED and name.lower() != b"x-cache"
    ]
    headers.append((b"x-cache", x_cache.value))
    return headers


async def _send_whole(send: Send, status_code: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    await send({"type": "http.response.start", "status": status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _json_headers(body: bytes, x_cache: XCache | None = None, content_type: bytes = _JSON) -> list[tuple[bytes, bytes]]:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    if x_cache is not None:
        headers.append((b"x-cache", x_cache.value))
    return headers


def _error_body(message: str, kind: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": kind}}).encode()


class UpstreamStreamBroken(RuntimeError):
    """The upstream broke a stream after the response had started; the client connection
    is closed so the client sees the break too."""


class CacheProxy:
    """The ASGI application. Build it with :func:`build_app`."""

    def __init__(self, config: ProxyConfig):
        if config.policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, not {config.policy!r}")
        self.config = config
        self.upstream_url = config.upstream_url.rstrip("/")
        self.upstream_identity = config.upstream_identity or normalize_upstream_identity(config.upstream_url)
        self.metrics = ProxyMetrics()
        self.breaker = CircuitBreaker(failure_threshold=config.breaker_failure_threshold, open_s=config.breaker_open_s)
        self.redis: PipelinedRedis | None = None
        self.http: httpx.AsyncClient | None = None
        if config.credentials not in CREDENTIAL_MODES:
            raise ValueError(f"credentials must be one of {CREDENTIAL_MODES}, not {config.credentials!r}")
        # Per-proxy secret of the credential HMAC: random unless given (proxies sharing one
        # Redis share per-credential entries only when they share the secret).
        self._credential_secret = config.credential_secret or os.urandom(32)
        self.local_tier = (
            LocalTier(max_entries=config.local_tier_entries, max_bytes=config.local_tier_max_bytes,
                      prepare=_prepared_hit)
            if config.local_tier_entries > 0 and config.local_tier_max_bytes > 0 else None
        )
        self._inflight: dict[str, asyncio.Future[UpstreamAnswer | None]] = {}
        self._parsed_requests: dict[tuple[str, str | None, bytes], tuple[dict[str, Any], bool, str]] = {}

    # -- lifecycle ------------------------------------------------------------------------

    async def open(self) -> None:
        """Open the shared Redis connection and httpx client (idempotent)."""
        if self.http is None:
            self.http = httpx.AsyncClient(
                timeout=httpx.Timeout(self.config.upstream_timeout_s, connect=5.0),
                limits=httpx.Limits(max_connections=512, max_keepalive_connections=128),
                trust_env=False,
            )
        if self.redis is None:
            self.redis = PipelinedRedis(self.config.redis_url, timeout_s=self.config.redis_timeout_s,
                                        local_tier=self.local_tier)

    async def close(self) -> None:
        """Close the shared clients."""
        if self.http is not None:
            await self.http.aclose()
            self.http = None
        if self.redis is not None:
            await self.redis.close()
            self.redis = None

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.open()
                except Exception as error:  # pragma: no cover - reported to the server
                    await send({"type": "lifespan.startup.failed", "message": repr(error)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    # -- routing --------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope_type = scope["type"]
        if scope_type == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope_type != "http":
            return
        if self.http is None:
            await self.open()
        path = scope["path"]
        method = scope["method"]
        if not path.startswith("/"):
            # "*" (OPTIONS *), an absolute URL: nothing upstream to forward it to.
            await _send_bad_request(send, f"the request target {path[:100]!r} is not a path starting with '/'")
            return
        try:
            if method == "POST" and path in CACHED_PATHS:
                await self._cacheable(scope, receive, send)
            elif path == "/health" and method == "GET":
                await self._health(send)
            elif path == "/metrics" and method == "GET":
                body = generate_latest(self.metrics.registry)
                await _send_whole(send, 200, _json_headers(body, content_type=CONTENT_TYPE_LATEST.encode()), body)
            elif path == "/cache/flush" and method == "POST":
                await self._flush(send)
            else:
                body = await _read_body(receive)
                await self._forward_streaming(scope, receive, send, body, XCache.BYPASS, record=False)
        except BadRequestTarget as error:
            # Raised before any response started (see _upstream_request).
            await _send_bad_request(send, str(error))

    # -- the cache ------------------------------------------------------------------------

    async def _cacheable(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw_body = await _read_body(receive)
        started_at = time.perf_counter()
        requester = requester_fingerprint(scope["headers"], scope.get("query_string") or b"",
                                          secret=self._credential_secret)
        if requester is not None and self.config.credentials == "bypass":
            self.metrics.bypasses.inc()
            self.metrics.credential_bypasses.inc()
            await self._forward_streaming(scope, receive, send, raw_body, XCache.BYPASS, record=False)
            return
        path = scope["path"]
        parsed = self._parsed_requests.get((path, requester, raw_body))
        if parsed is None:
            try:
                parsed = self._parse_request(path, requester, raw_body)
            except UnkeyableBody:
                # Passed through untouched: the upstream judges the body, the cache stays out.
                self.metrics.bypasses.inc()
                self.metrics.unkeyable_bodies.inc()
                await self._forward_streaming(scope, receive, send, raw_body, XCache.BYPASS, record=False)
                return
        body, streaming, key = parsed
        mode = decide_cache_mode(body=body, cache_control=request_cache_control(scope["headers"]),
                                 policy=self.config.policy)
        if mode is CacheMode.BYPASS:
            self.metrics.bypasses.inc()
            await self._upstream(scope, receive, send, raw_body, streaming, XCache.BYPASS, store_key=None)
            return
        redis = self.redis
        assert redis is not None
        if mode is CacheMode.LOOKUP and self.local_tier is not None:
            prepared = self.local_tier.get(key)
            if prepared is not None:
                headers, payload = prepared
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                await send({"type": "http.response.body", "body": payload})
                self.metrics.hits.inc()
                self.metrics.local_hits.inc()
                self.metrics.hit_latency.observe(time.perf_counter() - started_at)
                return
        if not self.breaker.allow():
            self.metrics.errors.inc()
            await self._upstream(scope, receive, send, raw_body, streaming, XCache.ERROR, store_key=None)
            return
        if mode is CacheMode.LOOKUP:
            try:
                stored = await redis.get_and_fill(key)
            except RedisUnavailable:
                self._redis_failed()
                self.metrics.errors.inc()
                await self._upstream(scope, receive, send, raw_body, streaming, XCache.ERROR, store_key=None)
                return
            self._redis_ok()
            if stored is not None and len(stored) > 1:
                await self._send_hit(send, stored, started_at)
                return
        self.metrics.misses.inc()
        if not self.config.single_flight:
            await self._upstream(scope, receive, send, raw_body, streaming, XCache.MISS, store_key=key)
            return
        # The key holds the requester's HMAC, so a group never spans two credentials.
        leader = self._inflight.get(key)
        if leader is not None:
            try:
                answer = await asyncio.shield(leader)
            except Exception:
                answer = None
            if answer is not None:
                self.metrics.single_flight_shared.inc()
                await _send_whole(send, answer.status_code, _json_headers(answer.body, XCache.MISS, answer.content_type),
                                  answer.body)
                return
            # The leader got no shareable answer (an error, a broken stream, no-store):
            # ask the upstream ourselves.
            await self._upstream(scope, receive, send, raw_body, streaming, XCache.MISS, store_key=key)
            return
        future: asyncio.Future[UpstreamAnswer | None] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        answer = None
        try:
            answer = await self._upstream(scope, receive, send, raw_body, streaming, XCache.MISS, store_key=key)
        finally:
            del self._inflight[key]
            future.set_result(answer)

    async def _send_hit(self, send: Send, stored: bytes, started_at: float) -> None:
        headers, payload = _prepared_hit(stored)
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": payload})
        self.metrics.hits.inc()
        self.metrics.hit_latency.observe(time.perf_counter() - started_at)

    def _parse_request(self, path: str, requester: str | None, raw_body: bytes) -> tuple[dict[str, Any], bool, str]:
        """Parse a body once and compute its key; raise :class:`UnkeyableBody` when it
        cannot be keyed.

        Small bodies are remembered by their exact bytes (and requester), so a repeated
        request (the common case on hits) is neither parsed nor hashed again. The memo is
        bounded in entries and body size, and cleared when full.
        """
        body = parse_keyable_body(raw_body)
        key = cache_key(upstream_identity=self.upstream_identity, path=path, body=body,
                        namespace=self.config.namespace, requester=requester)
        parsed = (body, body.get("stream") is True, key)
        if len(raw_body) <= PARSED_REQUEST_MEMO_MAX_BODY_BYTES:
            if len(self._parsed_requests) >= PARSED_REQUEST_MEMO_ENTRIES:
                self._parsed_requests.clear()
            self._parsed_requests[(path, requester, raw_body)] = parsed
        return parsed

    def _redis_ok(self) -> None:
        if self.breaker._opened_at is not None:
            self.metrics.circuit_open.set(0)
        self.breaker.record_success()

    def _redis_failed(self) -> None:
        self.breaker.record_failure()
        if self.breaker.state != "closed":
            self.metrics.circuit_open.set(1)

    async def _store(self, key: str, content_type: bytes, body: bytes) -> bool:
        if not self.breaker.allow():
            self.metrics.store_errors.inc()
            return False
        assert self.redis is not None
        try:
            await self.redis.set(key, _TAG_BY_CONTENT_TYPE.get(content_type, b"j") + body, ttl_s=self.config.ttl_s)
        except RedisUnavailable:
            self._redis_failed()
            self.metrics.store_errors.inc()
            return False
        self._redis_ok()
        self.metrics.stores.inc()
        return True

    # -- upstream -------------------------------------------------------------------------

    def _upstream_request(self, scope: Scope, raw_body: bytes) -> httpx.Request:
        """The upstream request for ``scope``: same method, raw path and query, body, and
        the headers minus hop-by-hop ones. Raises :class:`BadRequestTarget` when the target
        is no URL httpx can send."""
        assert self.http is not None
        # The raw path, not the decoded one: "/a%3Fb" must not become a query upstream.
        raw_path = scope.get("raw_path") or scope["path"].encode("utf-8")
        query = scope.get("query_string") or b""
        target = self.upstream_url + raw_path.decode("latin-1") + (("?" + query.decode("latin-1")) if query else "")
        headers = [(name, value) for name, value in scope["headers"] if name not in _REQUEST_HEADERS_NOT_FORWARDED]
        try:
            return self.http.build_request(scope["method"], target, content=raw_body, headers=headers)
        except (httpx.InvalidURL, httpx.UnsupportedProtocol, ValueError, UnicodeError) as error:
            raise BadRequestTarget(f"the request cannot be forwarded: {error}") from error

    async def _upstream(
        self, scope: Scope, receive: Receive, send: Send, raw_body: bytes, streaming: bool,
        x_cache: XCache, *, store_key: str | None,
    ) -> UpstreamAnswer | None:
        """Call upstream for a cacheable path, answer the client, store when allowed.

        Returns the answer when single-flight followers may share it: a 2xx, complete,
        storable answer (None for errors, broken streams and answers the upstream marked
        no-store, private or with a cookie).
        """
        if streaming:
            return await self._forward_streaming(scope, receive, send, raw_body, x_cache, record=True, store_key=store_key)
        assert self.http is not None
        request = self._upstream_request(scope, raw_body)
        started_at = time.perf_counter()
        try:
            response = await self.http.send(request)
        except httpx.HTTPError as error:
            await _send_upstream_error(send, error, x_cache)
            return None
        self.metrics.upstream_latency.observe(time.perf_counter() - started_at)
        body = response.content
        content_type = response.headers.get("content-type", "application/json").encode("latin-1")
        shareable = is_cacheable_json_answer(response.status_code, body) and response_allows_storing(
            response.headers.multi_items()
        )
        if store_key is not None and shareable:
            if not await self._store(store_key, _JSON if content_type.startswith(_JSON) else content_type, body):
                x_cache = XCache.ERROR
        headers = _forwarded_response_headers(response, x_cache)
        headers.append((b"content-length", b"%d" % len(body)))
        await _send_whole(send, response.status_code, headers, body)
        return UpstreamAnswer(response.status_code, content_type, body) if shareable else None

    async def _forward_streaming(
        self, scope: Scope, receive: Receive, send: Send, raw_body: bytes, x_cache: XCache,
        *, record: bool, store_key: str | None = None,
    ) -> UpstreamAnswer | None:
        """Pass an upstream answer through as it arrives; optionally record it and, once
        it completed (an SSE stream ending with ``[DONE]``, or a cacheable JSON answer),
        store it and return it for single-flight followers."""
        assert self.http is not None
        request = self._upstream_request(scope, raw_body)
        started_at = time.perf_counter()
        try:
            response = await self.http.send(request, stream=True)
        except httpx.HTTPError as error:
            await _send_upstream_error(send, error, x_cache)
            return None
        headers = _forwarded_response_headers(response, x_cache)
        content_type = response.headers.get("content-type", "").encode("latin-1")
        is_sse = content_type.startswith(_SSE)
        chunks: list[bytes] = []
        # uvicorn drops writes after a client disconnect silently: watch for it.
        disconnect_watch = asyncio.ensure_future(receive())
        upstream_complete = False
        # The headers leave with the first chunk: an upstream that sends its headers before
        # its first token (vLLM, llama.cpp) would otherwise hide its TTFT from the client.
        start: dict[str, Any] | None = {"type": "http.response.start", "status": response.status_code, "headers": headers}
        try:
            try:
                async for chunk in response.aiter_bytes():
                    if record:
                        chunks.append(chunk)
                    if start is not None:
                        await send(start)
                        start = None
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    if disconnect_watch.done():
                        break
                else:
                    upstream_complete = True
            except httpx.HTTPError as error:
                if start is not None:  # nothing sent yet: the client gets a clean 502/504
                    await _send_upstream_error(send, error, x_cache)
                    return None
                raise UpstreamStreamBroken(f"upstream stream broke: {error!r}") from error
            finally:
                await response.aclose()
                self.metrics.upstream_latency.observe(time.perf_counter() - started_at)
            client_gone = disconnect_watch.done() and disconnect_watch.result().get("type") == "http.disconnect"
            shareable = (
                record and upstream_complete and not client_gone and 200 <= response.status_code < 300
                and response_allows_storing(response.headers.multi_items())
            )
            whole = b"".join(chunks)
            if shareable:
                if is_sse:
                    shareable = summarize_sse(whole).is_complete
                else:
                    shareable = is_cacheable_json_answer(response.status_code, whole)
            if shareable and store_key is not None:
                await self._store(store_key, _SSE if is_sse else _JSON, whole)
            if start is not None:  # an empty answer
                await send(start)
            await send({"type": "http.response.body", "body": b""})
            return UpstreamAnswer(response.status_code, _SSE if is_sse else content_type, whole) if shareable else None
        finally:
            if not disconnect_watch.done():
                disconnect_watch.cancel()

    # -- admin endpoints ------------------------------------------------------------------

    async def _health(self, send: Send) -> None:
        assert self.http is not None and self.redis is not None
        upstream_reachable = False
        upstream_status: int | None = None
        try:
            response = await self.http.get(self.upstream_url + "/health", timeout=2.0)
            upstream_status = response.status_code
            upstream_reachable = response.status_code < 500
        except httpx.HTTPError:
            pass
        try:
            redis_reachable = await self.redis.ping(timeout_s=max(0.5, self.config.redis_timeout_s))
        except RedisUnavailable:
            redis_reachable = False
        if redis_reachable:
            self._redis_ok()
        document = {
            "status": "ok" if upstream_reachable and redis_reachable else ("degraded" if upstream_reachable else "unavailable"),
            "upstream": {"url": self.upstream_url, "reachable": upstream_reachable, "status_code": upstream_status},
            "redis": {"reachable": redis_reachable, "circuit": self.breaker.state},
            "policy": self.config.policy,
            "namespace": self.config.namespace,
        }
        body = json.dumps(document).encode()
        await _send_whole(send, 200 if upstream_reachable else 503, _json_headers(body), body)

    async def _flush(self, send: Send) -> None:
        assert self.redis is not None
        try:
            deleted = await self.redis.flush_prefix(key_prefix(self.config.namespace))
            if self.local_tier is not None:
                self.local_tier.clear()  # Redis invalidates them too; this is at once
        except RedisUnavailable as error:
            body = _error_body(f"Redis unavailable: {error}", "redis_unavailable")
            await _send_whole(send, 503, _json_headers(body), body)
            return
        body = json.dumps({"deleted": deleted, "namespace": self.config.namespace}).encode()
        await _send_whole(send, 200, _json_headers(body), body)


def build_app(
    *,
    upstream_url: str,
    redis_url: str,
    policy: str = "all",
    credentials: str = "bypass",
    credential_secret: bytes | None = None,
    ttl_s: int | None = None,
    namespace: str = "lab",
    single_flight: bool = True,
    redis_timeout_s: float = 0.05,
    upstream_timeout_s: float = 600,
    breaker_failure_threshold: int = 3,
    breaker_open_s: float = 2.0,
    upstream_identity: str | None = None,
    local_tier_entries: int = 4096,
    local_tier_max_bytes: int = 64 * 1024 * 1024,
) -> CacheProxy:
    """Build the cache proxy ASGI app (serve it with uvicorn).

    ``upstream_url``: base URL of an OpenAI-compatible server. ``redis_url``:
    ``redis://host:port/db``. ``policy``: ``all`` or ``deterministic``. ``credentials``:
    ``bypass`` or ``per-credential`` (see :data:`CREDENTIAL_MODES_HELP`);
    ``credential_secret``: the HMAC key of per-credential entries (default: random per
    process). ``ttl_s``: entry
    lifetime (None keeps entries until evicted). ``namespace``: key prefix, flushed by
    ``POST /cache/flush``. ``redis_timeout_s``: deadline of each Redis call.
    ``upstream_identity``: what identifies the upstream in keys (default: its URL).
    ``local_tier_entries`` / ``local_tier_max_bytes``: bounds of the in-process tier kept
    coherent by Redis's invalidations (:class:`LocalTier`); 0 switches it off.
    """
    return CacheProxy(
        ProxyConfig(
            upstream_url=upstream_url, redis_url=redis_url, policy=policy, credentials=credentials,
            credential_secret=credential_secret, ttl_s=ttl_s, namespace=namespace,
            single_flight=single_flight, redis_timeout_s=redis_timeout_s, upstream_timeout_s=float(upstream_timeout_s),
            breaker_failure_threshold=breaker_failure_threshold, breaker_open_s=breaker_open_s,
            upstream_identity=upstream_identity, local_tier_entries=local_tier_entries,
            local_tier_max_bytes=local_tier_max_bytes,
        )
    )


def parse_args(argv: Iterable[str] | None = None) -> argparse.Namespace:
    """Command-line arguments of the standalone proxy."""
    parser = argparse.ArgumentParser(
        prog="python -m services.cache_proxy", description=__doc__.split("\n")[0],
        epilog="Credentials: " + CREDENTIAL_MODES_HELP,
    )
    parser.add_argument("--upstream", required=True, help="base URL of an OpenAI-compatible server")
    parser.add_argument("--redis-url", required=True, help="redis://host:port/db")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--policy", choices=POLICIES, default="all",
        help="all: cache every successful answer; deterministic: only requests with temperature 0 or an integer "
             "seed, and n 1 (a missing temperature means 1.0, sampled, on vLLM and the naive server: not cached)",
    )
    parser.add_argument("--credentials", choices=CREDENTIAL_MODES, default="bypass",
                        help="requests carrying credentials: bypass the cache (default) or cache per credential")
    parser.add_argument(
        "--credential-secret-file", type=argparse.FileType("rb"), default=None,
        help="file holding the HMAC secret of per-credential keys (default: random per start; proxies sharing "
             "one Redis share per-credential entries only with the same secret)",
    )
    parser.add_argument("--ttl-s", type=int, default=None)
    parser.add_argument("--namespace", default="lab")
    parser.add_argument("--no-single-flight", action="store_true")
    parser.add_argument("--redis-timeout-s", type=float, default=0.05)
    parser.add_argument("--upstream-timeout-s", type=float, default=600.0)
    parser.add_argument("--upstream-identity", default=None, help="key identity of the upstream (default: its URL)")
    parser.add_argument("--local-tier-entries", type=int, default=4096,
                        help="entries of the in-process tier kept coherent by Redis invalidations (0: off)")
    parser.add_argument("--local-tier-max-bytes", type=int, default=64 * 1024 * 1024,
                        help="bytes of stored answers the in-process tier may hold")
    return parser.parse_args(list(argv) if argv is not None else None)


def main(argv: Iterable[str] | None = None) -> None:
    """Serve the proxy with uvicorn on ``--host:--port``."""
    import uvicorn

    args = parse_args(argv)
    app = build_app(
        upstream_url=args.upstream, redis_url=args.redis_url, policy=args.policy, credentials=args.credentials,
        credential_secret=args.credential_secret_file.read().strip() if args.credential_secret_file else None,
        ttl_s=args.ttl_s,
        namespace=args.namespace, single_flight=not args.no_single_flight, redis_timeout_s=args.redis_timeout_s,
        upstream_timeout_s=args.upstream_timeout_s, upstream_identity=args.upstream_identity,
        local_tier_entries=args.local_tier_entries, local_tier_max_bytes=args.local_tier_max_bytes,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False, lifespan="on")


if __name__ == "__main__":
    main()
