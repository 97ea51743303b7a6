"""The proxy's admin endpoints: ``GET /health``, ``POST /cache/flush``, ``GET /cache/semantic``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import httpx

from services.cache_proxy.keys import key_prefix
from services.cache_proxy.resp import RedisUnavailable
from services.cache_proxy.responses import Send, error_body, json_headers, send_whole

if TYPE_CHECKING:
    from services.cache_proxy.app import CacheProxy


async def health(proxy: CacheProxy, send: Send) -> None:
    """``GET /health``: the upstream's and Redis's reachability, the policy and namespace."""
    assert proxy.http is not None
    upstream_reachable = False
    upstream_status: int | None = None
    try:
        response = await proxy.http.get(proxy.upstream_url + "/health", timeout=2.0)
        upstream_status = response.status_code
        upstream_reachable = response.status_code < 500
    except httpx.HTTPError:
        pass
    redis_reachable: bool | None = None  # the cache is off: Redis is not asked
    try:
        if proxy.redis is not None:
            redis_reachable = await proxy.redis.ping(timeout_s=max(0.5, proxy.config.redis_timeout_s))
    except RedisUnavailable:
        redis_reachable = False
    if redis_reachable:
        proxy.redis_ok()
    document = {
        "status": "ok"
        if upstream_reachable and redis_reachable is not False
        else ("degraded" if upstream_reachable else "unavailable"),
        "upstream": {"url": proxy.upstream_url, "reachable": upstream_reachable, "status_code": upstream_status},
        "redis": {"reachable": redis_reachable, "circuit": proxy.breaker.state},
        "policy": proxy.config.policy,
        "namespace": proxy.config.namespace,
        "tier": "semantic" if proxy.semantic is not None else ("exact" if proxy.config.cache else "off"),
    }
    body = json.dumps(document).encode()
    await send_whole(send, 200 if upstream_reachable else 503, json_headers(body), body)


async def flush(proxy: CacheProxy, send: Send) -> None:
    """``POST /cache/flush``: delete this namespace's entries (and their vectors), nothing else."""
    try:
        deleted = 0 if proxy.redis is None else await proxy.redis.flush_prefix(key_prefix(proxy.config.namespace))
        if proxy.local_tier is not None:
            proxy.local_tier.clear()  # Redis invalidates them too; this is at once
        if proxy.semantic is not None:
            proxy.semantic.clear()  # the vectors went with the entries (same prefix)
    except RedisUnavailable as error:
        body = error_body(f"Redis unavailable: {error}", "redis_unavailable")
        await send_whole(send, 503, json_headers(body), body)
        return
    body = json.dumps({"deleted": deleted, "namespace": proxy.config.namespace}).encode()
    await send_whole(send, 200, json_headers(body), body)


async def semantic_status(proxy: CacheProxy, send: Send) -> None:
    """``GET /cache/semantic``: the semantic tier's settings, index and last verifications (404
    when the proxy runs the exact tier alone)."""
    if proxy.semantic is None:
        body = error_body("the semantic tier is off (start the proxy with --cache semantic)", "not_found")
        await send_whole(send, 404, json_headers(body), body)
        return
    body = json.dumps(proxy.semantic.status()).encode()
    await send_whole(send, 200, json_headers(body), body)
