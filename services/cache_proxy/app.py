"""The cache proxy's ASGI application (:class:`CacheProxy`) and its factory :func:`build_app`.

It is a raw ASGI app (no framework routing or middleware): on a hit the request body is
parsed once, hashed once, one ``GET`` is written and the stored bytes are sent as they
came from Redis, or answered from the in-process tier without a round trip. What it
decides is in :mod:`~services.cache_proxy.policy`, how it talks to Redis in
:mod:`~services.cache_proxy.resp`.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import time

import httpx
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from services.cache_proxy import admin
from services.cache_proxy.bodies import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_MAX_BODY_BYTES,
    BodyDeadlines,
    BodyReadTimeout,
    BodyTooLarge,
    ClientGone,
    OffLoopKeyer,
    read_limited_body,
    send_read_timeout,
    send_too_large,
)
from services.cache_proxy.circuit_breaker import CircuitBreaker
from services.cache_proxy.config import ProxyConfig
from services.cache_proxy.flights import UpstreamFlights, run_in_task
from services.cache_proxy.keys import (
    KeyedRequest,
    UnkeyableBody,
    key_request,
    normalize_upstream_identity,
    requester_fingerprint,
)
from services.cache_proxy.local_tier import LocalTier
from services.cache_proxy.metrics import ProxyMetrics
from services.cache_proxy.policy import (
    CACHED_PATHS,
    CREDENTIAL_MODES,
    POLICIES,
    BypassReason,
    CacheMode,
    XCache,
    bypass_reason,
    credential_bypass_notice,
    decide_cache_mode,
    request_cache_control,
)
from services.cache_proxy.recording import CapturedAnswer, recorder_for
from services.cache_proxy.resp import PipelinedRedis, RedisUnavailable, RedisWrongType
from services.cache_proxy.responses import (
    TAG_BY_CONTENT_TYPE,
    BadRequestTarget,
    PreparedHit,
    Receive,
    Scope,
    Send,
    json_headers,
    prepared_hit,
    send_bad_request,
    send_whole,
)
from services.cache_proxy.semantic import SemanticSettings, SemanticTier
from services.cache_proxy.semantic_keys import EMBED_SCOPES

LOGGER = logging.getLogger(__name__)

# Memo of keyed request bodies (see CacheProxy._keyed): at most this many entries of at
# most this many bytes each, i.e. a few tens of MB at worst.
PARSED_REQUEST_MEMO_ENTRIES = 4096
PARSED_REQUEST_MEMO_MAX_BODY_BYTES = 8192


class _Lookup(enum.Enum):
    """How a Redis lookup went."""

    HIT = "hit"  # answered
    MISS = "miss"
    UNAVAILABLE = "unavailable"  # Redis failed: fail open


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
            LocalTier(
                max_entries=config.local_tier_entries, max_bytes=config.local_tier_max_bytes, prepare=prepared_hit
            )
            if config.local_tier_entries > 0 and config.local_tier_max_bytes > 0
            else None
        )
        self.flights = UpstreamFlights(upstream_url=self.upstream_url, metrics=self.metrics, store=self._store)
        self.keyer = OffLoopKeyer()
        self.body_deadlines = BodyDeadlines(config.body_timeout_s)
        self._keyed_requests: dict[tuple[str, str | None, bytes], KeyedRequest] = {}
        self.recorder = recorder_for(config)
        self.semantic = self._semantic_tier(config)
        self._recording = False
        self._credential_bypass_told = False

    def _semantic_tier(self, config: ProxyConfig) -> SemanticTier | None:
        if config.semantic_similarity is None or not config.cache:
            return None
        if not 0 < config.semantic_similarity <= 1 or config.semantic_embed not in EMBED_SCOPES:
            raise ValueError(
                f"semantic similarity in (0, 1] and embed in {EMBED_SCOPES}, "
                f"not {config.semantic_similarity!r} and {config.semantic_embed!r}"
            )
        settings = SemanticSettings(
            similarity=config.semantic_similarity,
            embed=config.semantic_embed,
            model=config.semantic_model,
            verify_fraction=config.semantic_verify_fraction,
            namespace=config.namespace,
            upstream_url=self.upstream_url,
            upstream_identity=self.upstream_identity,
        )
        return SemanticTier(settings, self.metrics.registry)

    # -- lifecycle ------------------------------------------------------------------------

    async def open(self) -> None:
        """Open the shared Redis connection and httpx client (idempotent)."""
        if self.http is None:
            self.http = httpx.AsyncClient(
                timeout=httpx.Timeout(self.config.upstream_timeout_s, connect=5.0),
                limits=httpx.Limits(max_connections=512, max_keepalive_connections=128),
                trust_env=False,
            )
            self.flights.http = self.http
        if self.recorder is not None and not self._recording:
            self._recording = True
            # On this event loop: a thread of its own cost the hit path more than the writing.
            self.recorder.start(asyncio.get_running_loop())
        if self.redis is None and self.config.cache:
            self.redis = PipelinedRedis(
                self.config.redis_url, timeout_s=self.config.redis_timeout_s, local_tier=self.local_tier
            )
            if self.semantic is not None:
                await self.semantic.open(self.redis, self.http)

    async def close(self) -> None:
        """Close the shared clients and stop the keying process."""
        if self.http is not None:
            await self.http.aclose()
            self.http = self.flights.http = None
        if self.redis is not None:
            await self.redis.close()
            self.redis = None
        self.keyer.close()
        if self.semantic is not None:
            self.semantic.close()
        if self.recorder is not None and self._recording:
            self.recorder.close()
            self._recording = False

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
            await send_bad_request(send, f"the request target {path[:100]!r} is not a path starting with '/'")
            return
        try:
            if method == "POST" and path in CACHED_PATHS:
                await self._cacheable(scope, receive, send)
            elif path == "/health" and method == "GET":
                await run_in_task(admin.health(self, send))
            elif path == "/metrics" and method == "GET":
                body = generate_latest(self.metrics.registry)
                await send_whole(send, 200, json_headers(body, content_type=CONTENT_TYPE_LATEST.encode()), body)
            elif path == "/cache/flush" and method == "POST":
                await run_in_task(admin.flush(self, send))
            elif path == "/cache/semantic" and method == "GET":
                await admin.semantic_status(self, send)
            else:
                raw_body = await self._read_body(scope, receive, send)
                if raw_body is not None:
                    await self.flights.call(
                        scope, receive, send, raw_body, True, XCache.BYPASS, store_key=None, record=False
                    )
        except BadRequestTarget as error:
            # Raised before any response started (see upstream.upstream_request).
            await send_bad_request(send, str(error))

    async def _read_body(self, scope: Scope, receive: Receive, send: Send) -> bytes | None:
        """The request body, or None once the request was refused (413, 408) or the client left."""
        try:
            return await read_limited_body(
                receive, scope["headers"], max_body_bytes=self.config.max_body_bytes, deadlines=self.body_deadlines
            )
        except BodyTooLarge:
            self.metrics.refused_bodies.inc()
            await send_too_large(send, receive, max_body_bytes=self.config.max_body_bytes)
        except BodyReadTimeout as error:
            self.metrics.refused_bodies.inc()
            await send_read_timeout(send, str(error))
        except ClientGone:
            pass
        return None

    # -- the cache ------------------------------------------------------------------------

    async def _cacheable(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A request on a cacheable path, recorded when the proxy records a trace."""
        raw_body = await self._read_body(scope, receive, send)
        if raw_body is None:
            return
        if self.recorder is None:
            await self._answer(scope, receive, send, raw_body)
            return
        # The ticket comes back in every case (finally): the lines after it wait for it.
        ticket = self.recorder.arrive(time.monotonic())
        captured = CapturedAnswer(send)
        try:
            await self._answer(scope, receive, captured.send, raw_body)
        finally:
            self.recorder.observe(ticket, scope["path"], raw_body, scope["headers"], captured.answer())

    async def _answer(self, scope: Scope, receive: Receive, send: Send, raw_body: bytes) -> None:
        """Bypass (always, with the cache off), local hit, Redis hit, or miss."""
        started_at = time.perf_counter()
        if not self.config.cache:
            self.metrics.bypassed(BypassReason.CACHE_OFF)
            await self.flights.call(scope, receive, send, raw_body, True, XCache.BYPASS, store_key=None, record=False)
            return
        requester = requester_fingerprint(
            scope["headers"], scope.get("query_string") or b"", secret=self._credential_secret
        )
        if requester is not None and self.config.credentials == "bypass":
            self.metrics.bypassed(BypassReason.CREDENTIALS)
            if not self._credential_bypass_told:  # once: the SDKs send Authorization on every request
                self._credential_bypass_told = True
                LOGGER.warning(credential_bypass_notice(scope["headers"], scope.get("query_string") or b""))
            await self.flights.call(scope, receive, send, raw_body, True, XCache.BYPASS, store_key=None, record=False)
            return
        try:
            policy_fields, streaming, key = await self._keyed(scope["path"], requester, raw_body)
        except UnkeyableBody:
            # Passed through untouched: the upstream judges the body, the cache stays out.
            self.metrics.bypassed(BypassReason.UNKEYABLE_BODY)
            self.metrics.unkeyable_bodies.inc()
            await self.flights.call(scope, receive, send, raw_body, True, XCache.BYPASS, store_key=None, record=False)
            return
        cache_control = request_cache_control(scope["headers"])
        mode = decide_cache_mode(body=policy_fields, cache_control=cache_control, policy=self.config.policy)
        if mode is CacheMode.BYPASS:
            self.metrics.bypassed(bypass_reason(cache_control))
            await self.flights.call(scope, receive, send, raw_body, streaming, XCache.BYPASS, store_key=None)
            return
        if mode is CacheMode.LOOKUP and self.local_tier is not None:
            prepared = self.local_tier.get(key)
            if prepared is not None and prepared[2] is streaming:
                await self._send_hit(send, prepared, started_at)
                self.metrics.local_hits.inc()
                return
        if not self.breaker.allow():
            self.metrics.errors.inc()
            await self.flights.call(scope, receive, send, raw_body, streaming, XCache.ERROR, store_key=None)
            return
        if mode is CacheMode.LOOKUP:
            found = await self._lookup(send, key, streaming, started_at)
            if found is _Lookup.HIT:
                return
            if found is _Lookup.UNAVAILABLE:
                self.metrics.errors.inc()
                await self.flights.call(scope, receive, send, raw_body, streaming, XCache.ERROR, store_key=None)
                return
        if self.semantic is not None:
            semantic_hit = await self.semantic.find(
                scope, raw_body, key, requester, lookup=mode is CacheMode.LOOKUP, streaming=streaming
            )
            if semantic_hit is not None:
                await self._send_hit(send, semantic_hit.prepared, started_at, exact=False)
                self.semantic.served(semantic_hit, scope, raw_body)
                return
        self.metrics.misses.inc()
        await self.flights.miss(scope, receive, send, raw_body, streaming, key, single_flight=self.config.single_flight)

    async def _lookup(self, send: Send, key: str, streaming: bool, started_at: float) -> _Lookup:
        """Look ``key`` up in Redis and answer a hit. A value that cannot be served to this
        request (not what the proxy stores, the other kind than the request's stream flag,
        another Redis type under the key) is a miss, and is removed so the answer replaces it."""
        assert self.redis is not None
        try:
            stored = await self.redis.get_and_fill(key)
        except RedisUnavailable:
            self._redis_failed()
            return _Lookup.UNAVAILABLE
        except RedisWrongType:
            self.redis_ok()  # Redis answered: the entry is bad, not Redis
            await self._remove_bad_entry(key)
            return _Lookup.MISS
        self.redis_ok()
        if stored is None:
            return _Lookup.MISS
        prepared = prepared_hit(stored)
        if prepared is None or prepared[2] is not streaming:
            await self._remove_bad_entry(key)
            return _Lookup.MISS
        await self._send_hit(send, prepared, started_at)
        return _Lookup.HIT

    async def _remove_bad_entry(self, key: str) -> None:
        self.metrics.bad_entries.inc()
        assert self.redis is not None
        try:
            await self.redis.unlink(key)
        except RedisUnavailable:
            self._redis_failed()

    async def _send_hit(self, send: Send, prepared: PreparedHit, started_at: float, *, exact: bool = True) -> None:
        headers, payload, _ = prepared
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": payload})
        self.metrics.hits.inc()
        if exact:
            self.metrics.exact_hits.inc()
        self.metrics.hit_latency.observe(time.perf_counter() - started_at)

    async def _keyed(self, path: str, requester: str | None, raw_body: bytes) -> KeyedRequest:
        """The body parsed and keyed; raise :class:`UnkeyableBody` when it cannot be keyed.

        Small bodies are remembered by their exact bytes (and requester), so a repeated
        request (the common case on hits) is neither parsed nor hashed again; the memo is
        bounded in entries and body size, and cleared when full. Large bodies are keyed in
        another process (:class:`~services.cache_proxy.bodies.OffLoopKeyer`), so the loop
        keeps serving hits meanwhile.
        """
        if len(raw_body) > PARSED_REQUEST_MEMO_MAX_BODY_BYTES:  # not hashed for the memo either
            if len(raw_body) >= self.config.off_loop_key_min_bytes:
                return await self.keyer.key(
                    raw_body,
                    upstream_identity=self.upstream_identity,
                    path=path,
                    namespace=self.config.namespace,
                    requester=requester,
                )
            return key_request(
                raw_body,
                upstream_identity=self.upstream_identity,
                path=path,
                namespace=self.config.namespace,
                requester=requester,
            )
        memo_key = (path, requester, raw_body)
        keyed = self._keyed_requests.get(memo_key)
        if keyed is None:
            keyed = key_request(
                raw_body,
                upstream_identity=self.upstream_identity,
                path=path,
                namespace=self.config.namespace,
                requester=requester,
            )
            if len(self._keyed_requests) >= PARSED_REQUEST_MEMO_ENTRIES:
                self._keyed_requests.clear()
            self._keyed_requests[memo_key] = keyed
        return keyed

    def redis_ok(self) -> None:
        if self.breaker.opened_at is not None:
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
            value = TAG_BY_CONTENT_TYPE.get(content_type, b"j") + body
            if self.semantic is None:
                await self.redis.set(key, value, ttl_s=self.config.ttl_s)
            else:  # with the request's vector beside it
                await self.semantic.store(self.redis, key, value, self.config.ttl_s)
        except RedisUnavailable:
            self._redis_failed()
            self.metrics.store_errors.inc()
            return False
        self.redis_ok()
        self.metrics.stores.inc()
        return True


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
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
) -> CacheProxy:
    """Build the cache proxy ASGI app (serve it with :mod:`~services.cache_proxy.serving`).

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
    ``max_body_bytes``: larger request bodies get 413; ``body_timeout_s``: a body must
    arrive within it, or 408 (:mod:`~services.cache_proxy.bodies`). The cache switched off and the
    trace recording are :class:`ProxyConfig` fields (``cache``, ``record_*``), set with ``CacheProxy(config)``.
    """
    return CacheProxy(
        ProxyConfig(
            upstream_url=upstream_url,
            redis_url=redis_url,
            policy=policy,
            credentials=credentials,
            credential_secret=credential_secret,
            ttl_s=ttl_s,
            namespace=namespace,
            single_flight=single_flight,
            redis_timeout_s=redis_timeout_s,
            upstream_timeout_s=float(upstream_timeout_s),
            breaker_failure_threshold=breaker_failure_threshold,
            breaker_open_s=breaker_open_s,
            upstream_identity=upstream_identity,
            local_tier_entries=local_tier_entries,
            local_tier_max_bytes=local_tier_max_bytes,
            max_body_bytes=max_body_bytes,
            body_timeout_s=body_timeout_s,
        )
    )
