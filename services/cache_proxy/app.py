"""The cache proxy's ASGI application (:class:`CacheProxy`) and its factory :func:`build_app`.

It is a raw ASGI app (no framework routing or middleware): on a hit the request body is
parsed once, hashed once, one ``GET`` is written and the stored bytes are sent as they
came from Redis, or answered from the in-process tier without a round trip. What it
decides is in :mod:`~services.cache_proxy.policy`, how it talks to Redis in
:mod:`~services.cache_proxy.resp`.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

import httpx
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from services.cache_proxy.circuit_breaker import CircuitBreaker
from services.cache_proxy.config import ProxyConfig
from services.cache_proxy.keys import (
    UnkeyableBody,
    cache_key,
    key_prefix,
    normalize_upstream_identity,
    parse_keyable_body,
    requester_fingerprint,
)
from services.cache_proxy.local_tier import LocalTier
from services.cache_proxy.metrics import ProxyMetrics
from services.cache_proxy.policy import (
    CACHED_PATHS,
    CREDENTIAL_MODES,
    POLICIES,
    CacheMode,
    XCache,
    decide_cache_mode,
    is_cacheable_json_answer,
    is_storable_stream,
    request_cache_control,
    response_allows_storing,
)
from services.cache_proxy.resp import PipelinedRedis, RedisUnavailable
from services.cache_proxy.responses import (
    JSON_CONTENT_TYPE,
    SSE_CONTENT_TYPE,
    TAG_BY_CONTENT_TYPE,
    BadRequestTarget,
    Receive,
    Scope,
    Send,
    error_body,
    forwarded_response_headers,
    json_headers,
    prepared_hit,
    read_body,
    send_bad_request,
    send_upstream_error,
    send_whole,
)
from services.cache_proxy.upstream import UpstreamAnswer, relay_stream, upstream_request

# Memo of parsed request bodies (see CacheProxy._parse_request): at most this many
# entries of at most this many bytes each, i.e. a few tens of MB at worst.
PARSED_REQUEST_MEMO_ENTRIES = 4096
PARSED_REQUEST_MEMO_MAX_BODY_BYTES = 8192


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
                      prepare=prepared_hit)
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
            await send_bad_request(send, f"the request target {path[:100]!r} is not a path starting with '/'")
            return
        try:
            if method == "POST" and path in CACHED_PATHS:
                await self._cacheable(scope, receive, send)
            elif path == "/health" and method == "GET":
                await self._health(send)
            elif path == "/metrics" and method == "GET":
                body = generate_latest(self.metrics.registry)
                await send_whole(send, 200, json_headers(body, content_type=CONTENT_TYPE_LATEST.encode()), body)
            elif path == "/cache/flush" and method == "POST":
                await self._flush(send)
            else:
                body = await read_body(receive)
                await self._forward_streaming(scope, receive, send, body, XCache.BYPASS, record=False)
        except BadRequestTarget as error:
            # Raised before any response started (see upstream.upstream_request).
            await send_bad_request(send, str(error))

    # -- the cache ------------------------------------------------------------------------

    async def _cacheable(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A request on a cacheable path: bypass, local hit, Redis hit, or miss."""
        raw_body = await read_body(receive)
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
        await self._miss(scope, receive, send, raw_body, streaming, key)

    async def _miss(
        self, scope: Scope, receive: Receive, send: Send, raw_body: bytes, streaming: bool, key: str,
    ) -> None:
        """A miss, counted: asked upstream and stored when allowed. With single-flight, the
        first request for ``key`` asks upstream, identical ones arriving meanwhile wait for
        its answer and share it when it is storable."""
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
                headers = json_headers(answer.body, XCache.MISS, answer.content_type)
                await send_whole(send, answer.status_code, headers, answer.body)
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
        headers, payload = prepared_hit(stored)
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
            await self.redis.set(key, TAG_BY_CONTENT_TYPE.get(content_type, b"j") + body, ttl_s=self.config.ttl_s)
        except RedisUnavailable:
            self._redis_failed()
            self.metrics.store_errors.inc()
            return False
        self._redis_ok()
        self.metrics.stores.inc()
        return True

    # -- upstream -------------------------------------------------------------------------

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
        request = upstream_request(self.http, self.upstream_url, scope, raw_body)
        started_at = time.perf_counter()
        try:
            response = await self.http.send(request)
        except httpx.HTTPError as error:
            await send_upstream_error(send, error, x_cache)
            return None
        self.metrics.upstream_latency.observe(time.perf_counter() - started_at)
        body = response.content
        content_type = response.headers.get("content-type", "application/json").encode("latin-1")
        shareable = is_cacheable_json_answer(response.status_code, body) and response_allows_storing(
            response.headers.multi_items()
        )
        if store_key is not None and shareable:
            stored_type = JSON_CONTENT_TYPE if content_type.startswith(JSON_CONTENT_TYPE) else content_type
            if not await self._store(store_key, stored_type, body):
                x_cache = XCache.ERROR
        headers = forwarded_response_headers(response, x_cache)
        headers.append((b"content-length", b"%d" % len(body)))
        await send_whole(send, response.status_code, headers, body)
        return UpstreamAnswer(response.status_code, content_type, body) if shareable else None

    async def _forward_streaming(
        self, scope: Scope, receive: Receive, send: Send, raw_body: bytes, x_cache: XCache,
        *, record: bool, store_key: str | None = None,
    ) -> UpstreamAnswer | None:
        """Pass an upstream answer through as it arrives; optionally record it and, once
        it completed (an SSE stream ending with ``[DONE]``, or a cacheable JSON answer),
        store it and return it for single-flight followers."""
        assert self.http is not None
        request = upstream_request(self.http, self.upstream_url, scope, raw_body)
        started_at = time.perf_counter()
        try:
            response = await self.http.send(request, stream=True)
        except httpx.HTTPError as error:
            await send_upstream_error(send, error, x_cache)
            return None
        headers = forwarded_response_headers(response, x_cache)
        content_type = response.headers.get("content-type", "").encode("latin-1")
        is_sse = content_type.startswith(SSE_CONTENT_TYPE)
        # The headers leave with the first chunk: an upstream that sends its headers before
        # its first token (vLLM, llama.cpp) would otherwise hide its TTFT from the client.
        start: dict[str, Any] = {"type": "http.response.start", "status": response.status_code, "headers": headers}
        # uvicorn drops writes after a client disconnect silently: watch for it.
        disconnect_watch = asyncio.ensure_future(receive())
        try:
            try:
                relayed = await relay_stream(response, send, start, disconnect_watch, x_cache, record=record)
            finally:
                await response.aclose()
                self.metrics.upstream_latency.observe(time.perf_counter() - started_at)
            if relayed is None:
                return None
            client_gone = disconnect_watch.done() and disconnect_watch.result().get("type") == "http.disconnect"
            whole = b"".join(relayed.chunks)
            shareable = (
                record and relayed.upstream_complete and not client_gone
                and is_storable_stream(response.status_code, response.headers.multi_items(), whole, is_sse=is_sse)
            )
            if shareable and store_key is not None:
                await self._store(store_key, SSE_CONTENT_TYPE if is_sse else JSON_CONTENT_TYPE, whole)
            if not relayed.start_sent:  # an empty answer
                await send(start)
            await send({"type": "http.response.body", "body": b""})
            if not shareable:
                return None
            return UpstreamAnswer(response.status_code, SSE_CONTENT_TYPE if is_sse else content_type, whole)
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
        await send_whole(send, 200 if upstream_reachable else 503, json_headers(body), body)

    async def _flush(self, send: Send) -> None:
        assert self.redis is not None
        try:
            deleted = await self.redis.flush_prefix(key_prefix(self.config.namespace))
            if self.local_tier is not None:
                self.local_tier.clear()  # Redis invalidates them too; this is at once
        except RedisUnavailable as error:
            body = error_body(f"Redis unavailable: {error}", "redis_unavailable")
            await send_whole(send, 503, json_headers(body), body)
            return
        body = json.dumps({"deleted": deleted, "namespace": self.config.namespace}).encode()
        await send_whole(send, 200, json_headers(body), body)


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
