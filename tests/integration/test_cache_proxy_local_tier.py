"""The cache proxy's in-process tier stays coherent with Redis (issue 12), with real
processes: two proxies on one redis-server, the stub upstream; an entry overwritten,
deleted, flushed or expired in Redis is never served from a proxy's memory, and the tier
empties when Redis goes and works again once it returns.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from services.supervisor import ManagedService
from tests.support.integration_proxy import (
    CHAT_PATH,
    KillableRedis,
    chat,
    redis_command,
    running_proxy,
    start_proxy,
    stub_upstream_service,
)

pytestmark = pytest.mark.integration

# The namespace each proxy keys its entries under, by the proxy's URL (to compute its keys).
NAMESPACES: dict[str, str] = {}


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache-proxy-local-tier-logs")


@pytest.fixture(scope="module")
def open_stub(log_dir: Path) -> Iterator[ManagedService]:
    with stub_upstream_service(log_dir, "open-stub") as service:
        yield service


# --- the in-process tier stays coherent with Redis (two proxies, one Redis) --------------------------


def _metric(proxy: ManagedService, name: str) -> float:
    for line in httpx.get(f"{proxy.url}/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in the metrics")


def _redis(redis_service, *parts: bytes) -> bytes:
    return redis_command(redis_service.host, int(redis_service.port), *parts)


@pytest.fixture(scope="module")
def twin_proxies(open_stub: ManagedService, redis_service, log_dir: Path) -> Iterator[tuple[ManagedService, ...]]:
    namespace = f"twins-{uuid.uuid4().hex[:8]}"
    first = start_proxy(open_stub.url, redis_service.redis_url, log_dir, "--namespace", namespace)
    second = start_proxy(open_stub.url, redis_service.redis_url, log_dir, "--namespace", namespace)
    NAMESPACES[first.url] = namespace
    try:
        yield first, second
    finally:
        first.stop()
        second.stop()


def _warm_local(client: httpx.Client, proxy: ManagedService, body: dict) -> bytes:
    """MISS (stored), HIT from Redis (kept locally), HIT from the local tier."""
    states = [client.post(CHAT_PATH, json=body) for _ in range(2)]
    assert [response.headers["x-cache"] for response in states] == ["MISS", "HIT"]
    local_before = _metric(proxy, "lab_cache_local_hits_total")
    local = client.post(CHAT_PATH, json=body)
    assert local.headers["x-cache"] == "HIT" and local.content == states[0].content
    assert _metric(proxy, "lab_cache_local_hits_total") == local_before + 1
    return local.content


def _key_of(proxy: ManagedService, upstream: ManagedService, body: dict) -> bytes:
    from services.cache_proxy.keys import cache_key, normalize_upstream_identity

    return cache_key(
        upstream_identity=normalize_upstream_identity(upstream.url),
        path=CHAT_PATH,
        body=body,
        namespace=NAMESPACES[proxy.url],
    ).encode()


def test_an_entry_overwritten_through_another_proxy_is_not_served_locally(twin_proxies, open_stub) -> None:
    first, second = twin_proxies
    body = chat(f"overwrite {uuid.uuid4()}")
    with (
        httpx.Client(base_url=first.url, timeout=30) as client_a,
        httpx.Client(base_url=second.url, timeout=30) as client_b,
    ):
        old = _warm_local(client_a, first, body)
        refreshed = client_b.post(CHAT_PATH, json=body, headers={"cache-control": "no-cache"})
        assert refreshed.headers["x-cache"] == "MISS" and refreshed.content != old
        after = client_a.post(CHAT_PATH, json=body)
        assert after.headers["x-cache"] == "HIT" and after.content == refreshed.content


def test_an_entry_deleted_or_flushed_in_redis_is_not_served_locally(twin_proxies, open_stub, redis_service) -> None:
    first, second = twin_proxies
    with (
        httpx.Client(base_url=first.url, timeout=30) as client_a,
        httpx.Client(base_url=second.url, timeout=30) as client_b,
    ):
        deleted = chat(f"deleted {uuid.uuid4()}")
        _warm_local(client_a, first, deleted)
        assert _redis(redis_service, b"DEL", _key_of(first, open_stub, deleted)) == b":1\r\n"
        assert client_a.post(CHAT_PATH, json=deleted).headers["x-cache"] == "MISS"
        flushed = chat(f"flushed {uuid.uuid4()}")
        _warm_local(client_a, first, flushed)
        assert client_b.post("/cache/flush").json()["deleted"] >= 1
        assert client_a.post(CHAT_PATH, json=flushed).headers["x-cache"] == "MISS"


def test_an_entry_expired_in_redis_is_not_served_locally(open_stub, redis_service, log_dir: Path) -> None:
    with running_proxy(open_stub, redis_service.redis_url, log_dir, "--ttl-s", "1") as proxy:
        NAMESPACES[proxy.url] = proxy.name.removeprefix("cache-proxy-")
        with httpx.Client(base_url=proxy.url, timeout=30) as client:
            by_ttl = chat(f"ttl {uuid.uuid4()}")
            _warm_local(client, proxy, by_ttl)
            time.sleep(1.1)
            assert client.post(CHAT_PATH, json=by_ttl).headers["x-cache"] == "MISS"
            shortened = chat(f"pexpire {uuid.uuid4()}")
            _warm_local(client, proxy, shortened)
            assert _redis(redis_service, b"PEXPIRE", _key_of(proxy, open_stub, shortened), b"1") == b":1\r\n"
            time.sleep(0.05)
            assert client.post(CHAT_PATH, json=shortened).headers["x-cache"] == "MISS"


def test_the_local_tier_is_emptied_when_redis_goes_and_works_again_after_it_returns(
    open_stub: ManagedService, log_dir: Path
) -> None:
    redis = KillableRedis(log_dir / "tier-redis.log")
    redis.start()
    try:
        with (
            running_proxy(open_stub, redis.url, log_dir) as proxy,
            httpx.Client(base_url=proxy.url, timeout=30) as client,
        ):
            body = chat(f"tier reconnect {uuid.uuid4()}")
            _warm_local(client, proxy, body)
            redis.kill()
            time.sleep(0.2)
            # The entry may be long gone from a restarted Redis: never a local hit now.
            assert client.post(CHAT_PATH, json=body).headers["x-cache"] == "ERROR"
            redis.start()
            deadline = time.monotonic() + 10
            while client.post(CHAT_PATH, json=body).headers["x-cache"] != "HIT":
                assert time.monotonic() < deadline, "caching did not resume"
                time.sleep(0.2)
            _warm_local(client, proxy, chat(f"tier reconnect again {uuid.uuid4()}"))
    finally:
        redis.kill()
