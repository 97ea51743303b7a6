"""The cache proxy against real parts: a real redis-server, the real naive server with
SmolLM2, and the stub upstream (tests/stub_upstream.py) for errors, broken streams and
call counting. Every proxy runs as its own process (``python -m services.cache_proxy``).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.cache_proxy.policy import summarize_sse
from services.supervisor import ManagedService
from tests.support.integration_proxy import (
    CHAT_PATH,
    REPO_ROOT,
    KillableRedis,
    chat,
    redis_command,
    start_proxy,
    stub_calls,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache-proxy-logs")


@pytest.fixture(scope="module")
def stub_upstream(log_dir: Path) -> Iterator[ManagedService]:
    service = ManagedService(
        name="stub-upstream",
        argv=[sys.executable, "-m", "tests.stub_upstream", "--port", "{port}"],
        log_path=log_dir / "stub.log",
        readiness_timeout_s=30.0,
        cwd=REPO_ROOT,
    )
    with service:
        yield service


@pytest.fixture(scope="module")
def stub_proxy(stub_upstream: ManagedService, redis_service: Any, log_dir: Path) -> Iterator[ManagedService]:
    service = start_proxy(stub_upstream.url, redis_service.redis_url, log_dir)
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture(scope="module")
def naive_proxy(naive_service: ManagedService, redis_service: Any, log_dir: Path) -> Iterator[ManagedService]:
    service = start_proxy(naive_service.url, redis_service.redis_url, log_dir)
    try:
        yield service
    finally:
        service.stop()


# --- against the real naive server (SmolLM2) --------------------------------------------


@pytest.fixture(scope="module")
def naive_model_name(naive_proxy: ManagedService) -> str:
    """The model id the naive server serves (read through the proxy's passthrough)."""
    return httpx.get(f"{naive_proxy.url}/v1/models", timeout=10).json()["data"][0]["id"]


def test_naive_miss_then_hit_is_byte_identical_and_variants_share_the_entry(
    naive_proxy: ManagedService, naive_model_name: str
) -> None:
    body = {
        "model": naive_model_name,
        "messages": [{"role": "user", "content": "Name one colour."}],
        "max_tokens": 6,
        "temperature": 0,
    }
    with httpx.Client(base_url=naive_proxy.url, timeout=120) as client:
        first = client.post(CHAT_PATH, content=json.dumps(body))
        assert first.status_code == 200, first.text
        assert first.headers["x-cache"] == "MISS"
        assert first.json()["choices"][0]["finish_reason"] == "length"  # a max_tokens finish is stored
        started_at = time.perf_counter()
        second = client.post(CHAT_PATH, content=json.dumps(body))
        hit_s = time.perf_counter() - started_at
        assert second.headers["x-cache"] == "HIT"
        assert second.content == first.content
        assert hit_s < 0.5
        reordered = dict(reversed(list(body.items())))
        variant = client.post(
            CHAT_PATH, content=json.dumps(reordered, indent=3), headers={"content-type": "application/json"}
        )
        assert variant.headers["x-cache"] == "HIT"
        assert variant.content == first.content
        other_tokens = client.post(CHAT_PATH, json={**body, "max_tokens": 5})
        assert other_tokens.status_code == 200
        assert other_tokens.headers["x-cache"] == "MISS"
        other_model = client.post(CHAT_PATH, json={**body, "model": "another-model"})
        assert other_model.headers["x-cache"] == "MISS"


def test_naive_streaming_miss_and_hit_give_the_same_text_finish_and_usage(
    naive_proxy: ManagedService, naive_model_name: str
) -> None:
    body = {
        "model": naive_model_name,
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 6,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.Client(base_url=naive_proxy.url, timeout=120) as client:
        with client.stream("POST", CHAT_PATH, json=body) as first:
            assert first.headers["x-cache"] == "MISS"
            assert first.headers["content-type"].startswith("text/event-stream")
            first_raw = b"".join(first.iter_bytes())
        second = client.post(CHAT_PATH, json=body)
    assert second.headers["x-cache"] == "HIT"
    assert second.headers["content-type"].startswith("text/event-stream")
    miss, hit = summarize_sse(first_raw), summarize_sse(second.content)
    assert miss.is_complete and hit.is_complete
    assert miss.text and hit.text == miss.text
    assert hit.finish_reason == miss.finish_reason
    assert miss.usage is not None and hit.usage == miss.usage


# --- against the stub upstream ---------------------------------------------------------


def test_error_answers_are_not_stored(stub_proxy: ManagedService, stub_upstream: ManagedService) -> None:
    with httpx.Client(base_url=stub_proxy.url, timeout=30) as client:
        for status_code in (400, 404, 500, 503):
            body = chat(f"error {status_code} {uuid.uuid4()}")
            failed = client.post(CHAT_PATH, json=body, headers={"x-stub-status": str(status_code)})
            assert failed.status_code == status_code
            assert failed.headers["x-cache"] == "MISS"
            retried = client.post(CHAT_PATH, json=body)
            assert (retried.status_code, retried.headers["x-cache"]) == (200, "MISS")
            assert client.post(CHAT_PATH, json=body).headers["x-cache"] == "HIT"
        empty_body = chat(f"no choices {uuid.uuid4()}")
        empty = client.post(CHAT_PATH, json=empty_body, headers={"x-stub-no-choices": "1"})
        assert empty.status_code == 200 and empty.json()["choices"] == []
        assert client.post(CHAT_PATH, json=empty_body).headers["x-cache"] == "MISS"


def test_broken_and_unfinished_streams_are_not_stored(stub_proxy: ManagedService) -> None:
    with httpx.Client(base_url=stub_proxy.url, timeout=30) as client:
        for misbehaviour in ({"x-stub-break-stream": "1"}, {"x-stub-no-done": "1"}):
            body = chat(f"stream {uuid.uuid4()}", stream=True)
            try:
                with client.stream("POST", CHAT_PATH, json=body, headers=misbehaviour) as broken:
                    broken_raw = b"".join(broken.iter_bytes())
            except httpx.HTTPError:
                broken_raw = b""  # the proxy passed the break on to us
            assert not summarize_sse(broken_raw).is_complete
            again = client.post(CHAT_PATH, json=body)
            assert again.headers["x-cache"] == "MISS"
            assert summarize_sse(again.content).is_complete
            assert client.post(CHAT_PATH, json=body).headers["x-cache"] == "HIT"


def test_cache_control_and_x_cache_values(stub_proxy: ManagedService) -> None:
    body = chat(f"cache-control {uuid.uuid4()}")
    with httpx.Client(base_url=stub_proxy.url, timeout=30) as client:
        first = client.post(CHAT_PATH, json=body)
        assert first.headers["x-cache"] == "MISS"
        bypass = client.post(CHAT_PATH, json=body, headers={"cache-control": "no-store"})
        assert bypass.headers["x-cache"] == "BYPASS" and bypass.content != first.content
        refreshed = client.post(CHAT_PATH, json=body, headers={"cache-control": "no-cache"})
        assert refreshed.headers["x-cache"] == "MISS" and refreshed.content != first.content
        hit = client.post(CHAT_PATH, json=body)
        assert hit.headers["x-cache"] == "HIT" and hit.content == refreshed.content
        models = client.get("/v1/models")
        assert models.status_code == 200 and models.json()["data"][0]["id"] == "stub-model"


def test_deterministic_policy_caches_only_reproducible_requests(
    stub_upstream: ManagedService, redis_service: Any, log_dir: Path
) -> None:
    proxy = start_proxy(stub_upstream.url, redis_service.redis_url, log_dir, "--policy", "deterministic")
    try:
        with httpx.Client(base_url=proxy.url, timeout=30) as client:
            sampled = chat(f"sampled {uuid.uuid4()}", temperature=0.8)
            assert [client.post(CHAT_PATH, json=sampled).headers["x-cache"] for _ in range(2)] == ["BYPASS", "BYPASS"]
            greedy = chat(f"greedy {uuid.uuid4()}", temperature=0)
            assert [client.post(CHAT_PATH, json=greedy).headers["x-cache"] for _ in range(2)] == ["MISS", "HIT"]
    finally:
        proxy.stop()


async def _concurrent_posts(url: str, body: dict, count: int, headers: dict[str, str]) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        return await asyncio.gather(*(client.post(CHAT_PATH, json=body, headers=headers) for _ in range(count)))


def test_single_flight_makes_one_upstream_call_for_20_identical_misses(
    stub_proxy: ManagedService, stub_upstream: ManagedService, redis_service: Any, log_dir: Path
) -> None:
    slow = {"x-stub-delay-s": "0.5"}
    body = chat(f"single flight {uuid.uuid4()}")
    calls_before = stub_calls(stub_upstream)
    responses = asyncio.run(_concurrent_posts(stub_proxy.url, body, 20, slow))
    assert stub_calls(stub_upstream) - calls_before == 1
    assert all(response.status_code == 200 for response in responses)
    assert len({response.content for response in responses}) == 1

    # Switched off, the same load makes many upstream calls (so the check above can fail).
    proxy = start_proxy(stub_upstream.url, redis_service.redis_url, log_dir, "--no-single-flight")
    try:
        calls_before = stub_calls(stub_upstream)
        asyncio.run(_concurrent_posts(proxy.url, chat(f"no single flight {uuid.uuid4()}"), 20, slow))
        assert stub_calls(stub_upstream) - calls_before > 1
    finally:
        proxy.stop()


def test_health_metrics_and_flush(stub_proxy: ManagedService, redis_service: Any) -> None:
    host, port = redis_service.host, int(redis_service.port or 0)
    foreign_key = f"someone-else:{uuid.uuid4()}"
    redis_command(host, port, b"SET", foreign_key.encode(), b"keep me")
    with httpx.Client(base_url=stub_proxy.url, timeout=30) as client:
        body = chat(f"flush {uuid.uuid4()}")
        client.post(CHAT_PATH, json=body)
        assert client.post(CHAT_PATH, json=body).headers["x-cache"] == "HIT"
        health = client.get("/health")
        assert health.status_code == 200
        assert health.json()["upstream"]["reachable"] is True and health.json()["redis"]["reachable"] is True
        metrics = client.get("/metrics").text
        for name in (
            "lab_cache_hits_total",
            "lab_cache_misses_total",
            "lab_cache_bypasses_total",
            "lab_cache_store_errors_total",
            "lab_cache_hit_latency_seconds_bucket",
            "lab_cache_upstream_latency_seconds_bucket",
        ):
            assert name in metrics
        hits = [line for line in metrics.splitlines() if line.startswith("lab_cache_hits_total")]
        assert float(hits[0].split()[-1]) >= 1
        flushed = client.post("/cache/flush")
        assert flushed.status_code == 200 and flushed.json()["deleted"] >= 1
        assert client.post(CHAT_PATH, json=body).headers["x-cache"] == "MISS"
    assert redis_command(host, port, b"GET", foreign_key.encode()).endswith(b"keep me\r\n")


# --- fail-open: Redis killed, paused, restarted -----------------------------------------


@pytest.fixture
def killable_redis(log_dir: Path) -> Iterator[KillableRedis]:
    redis = KillableRedis(log_dir / "killable-redis.log")
    redis.start()
    try:
        yield redis
    finally:
        redis.kill()


def test_redis_down_or_slow_fails_open_and_caching_resumes(
    stub_upstream: ManagedService, killable_redis: KillableRedis, log_dir: Path
) -> None:
    proxy = start_proxy(stub_upstream.url, killable_redis.url, log_dir)
    try:
        with httpx.Client(base_url=proxy.url, timeout=30) as client:
            body = chat(f"fail open {uuid.uuid4()}")
            assert client.post(CHAT_PATH, json=body).headers["x-cache"] == "MISS"
            assert client.post(CHAT_PATH, json=body).headers["x-cache"] == "HIT"

            # Paused (slow) Redis: answers come from upstream within the 50 ms Redis timeout;
            # an answer already in the in-process tier is still a hit (a paused Redis
            # changes nothing, and its invalidation connection is alive).
            assert killable_redis.process is not None
            killable_redis.process.send_signal(signal.SIGSTOP)
            assert client.post(CHAT_PATH, json=body).headers["x-cache"] == "HIT"
            for index in range(5):
                started_at = time.perf_counter()
                slow = client.post(CHAT_PATH, json=chat(f"redis paused {index} {uuid.uuid4()}"))
                elapsed_s = time.perf_counter() - started_at
                assert (slow.status_code, slow.headers["x-cache"]) == (200, "ERROR")
                assert elapsed_s < 0.4
            killable_redis.process.send_signal(signal.SIGCONT)

            killable_redis.kill()
            durations_s = []
            for index in range(20):
                started_at = time.perf_counter()
                down = client.post(CHAT_PATH, json=chat(f"redis down {index} {uuid.uuid4()}"))
                durations_s.append(time.perf_counter() - started_at)
                assert down.status_code == 200
                assert down.headers["x-cache"] == "ERROR"
            assert max(durations_s) < 0.4
            health = client.get("/health")
            assert health.status_code == 200 and health.json()["redis"]["reachable"] is False

            killable_redis.start()  # empty again: no persistence
            deadline = time.monotonic() + 10
            states = []
            while time.monotonic() < deadline:
                states.append(client.post(CHAT_PATH, json=body).headers["x-cache"])
                if states[-1] == "HIT":
                    break
                time.sleep(0.2)
            assert states[-1] == "HIT", states
            assert "MISS" in states
            metrics = client.get("/metrics").text
            assert "lab_cache_errors_total" in metrics
    finally:
        proxy.stop()
