"""Streamed answers reach the client as tokens exist, not after the whole answer, and the
response headers leave with the first chunk, so a client's time to first byte (k6's
``http_req_waiting``, the lab's client TTFT) is its time to first token.

On every engine: the naive server, vLLM (marked ``vllm``), llama.cpp (skipped when
llama_cpp is not importable) and the cache proxy (a MISS passes the stream through, a HIT
replays it).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.supervisor import ManagedService

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
STORY = [{"role": "user", "content": "Write a short story about the number 7."}]


def timed_stream(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> dict[str, Any]:
    """Stream one chat completion: when headers, each body read and each content chunk arrived."""
    started = time.perf_counter()
    reads: list[tuple[float, bytes]] = []
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers, timeout=300) as response:
        headers_s = time.perf_counter() - started
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for raw in response.iter_raw():
            reads.append((time.perf_counter() - started, raw))
        x_cache = response.headers.get("x-cache")
    content_reads = [at for at, raw in reads if _has_content(raw)]
    usage = None
    for line in b"".join(raw for _, raw in reads).decode().splitlines():
        if line.startswith("data: {") and '"usage"' in line:
            usage = json.loads(line[6:]).get("usage") or usage
    return {
        "headers_s": headers_s,
        "reads": reads,
        "content_reads_s": content_reads,
        "x_cache": x_cache,
        "usage": usage,
    }


def _has_content(raw: bytes) -> bool:
    for line in raw.decode(errors="replace").splitlines():
        if line.startswith("data: {"):
            try:
                choices = json.loads(line[6:]).get("choices") or []
            except ValueError:
                continue  # a chunk split across reads
            if choices and (choices[0].get("delta") or {}).get("content"):
                return True
    return False


def stream_body(model: str, max_tokens: int = 48) -> dict[str, Any]:
    return {
        "model": model,
        "messages": STORY,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def model_of(url: str) -> str:
    return httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"]


def assert_streams_token_by_token(timed: dict[str, Any]) -> None:
    """The first content chunk came before the last one (several reads, time apart), and the
    first body bytes carried it or came with the headers' moment."""
    content = timed["content_reads_s"]
    assert len(content) >= 2, "the whole answer arrived in one read"
    assert content[0] < content[-1]
    # llama-cpp-python's server sends no usage chunk (k6/lib.js then counts content chunks).
    assert timed["usage"] is None or timed["usage"]["completion_tokens"] > 1


def test_naive_server_first_bytes_carry_the_first_token(naive_service: Any) -> None:
    timed = timed_stream(naive_service.url, stream_body(model_of(naive_service.url)))
    assert_streams_token_by_token(timed)
    # The role chunk is not sent alone ahead of the first token: the first read has content.
    assert _has_content(timed["reads"][0][1])


@pytest.mark.vllm
def test_vllm_streams_token_by_token(vllm_service: Any) -> None:
    timed = timed_stream(vllm_service.url, stream_body(model_of(vllm_service.url), max_tokens=64))
    assert_streams_token_by_token(timed)


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama_cpp is not importable")
def test_llamacpp_streams_token_by_token(service_manager: Any, default_model_path: Path) -> None:
    from lab.backends import default_service_config
    from lab.settings import get_settings

    config = default_service_config("llamacpp", model=str(default_model_path), settings=get_settings())
    url = service_manager.ensure("llamacpp", config)
    try:
        timed = timed_stream(url, stream_body("any", max_tokens=64))
        assert_streams_token_by_token(timed)
    finally:
        service_manager.stop("llamacpp")


@pytest.fixture(scope="module")
def stub_and_proxy(redis_service: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    log_dir = tmp_path_factory.mktemp("stream-proxy")
    stub = ManagedService(
        name="stream-stub",
        argv=[sys.executable, "-m", "tests.stub_upstream", "--port", "{port}"],
        log_path=log_dir / "stub.log",
        readiness_timeout_s=30.0,
        cwd=REPO_ROOT,
    )
    with stub:
        proxy = ManagedService(
            name="stream-proxy",
            argv=[
                sys.executable,
                "-m",
                "services.cache_proxy",
                "--upstream",
                stub.url,
                "--redis-url",
                redis_service.redis_url,
                "--port",
                "{port}",
                "--namespace",
                f"test-{uuid.uuid4().hex[:8]}",
            ],
            log_path=log_dir / "proxy.log",
            readiness_timeout_s=30.0,
            cwd=REPO_ROOT,
        )
        with proxy:
            yield stub.url, proxy.url


FIRST_CHUNK_DELAY_S = 1.0


def test_proxy_miss_sends_headers_with_the_first_chunk_and_a_hit_replays_the_stream(
    stub_and_proxy: tuple[str, str],
) -> None:
    stub_url, proxy_url = stub_and_proxy
    # The stub sends its headers at once and its first chunk a second later, as vLLM does.
    slow_first = {"x-stub-first-chunk-delay-s": str(FIRST_CHUNK_DELAY_S), "x-stub-chunk-delay-s": "0.05"}
    body = {**stream_body("stub-model", max_tokens=8), "messages": [{"role": "user", "content": uuid.uuid4().hex}]}
    direct = timed_stream(stub_url, body, slow_first)
    assert direct["headers_s"] < FIRST_CHUNK_DELAY_S <= direct["content_reads_s"][0]  # what the proxy must hide
    miss = timed_stream(proxy_url, body, slow_first)
    assert miss["x_cache"] == "MISS"
    assert miss["headers_s"] >= FIRST_CHUNK_DELAY_S  # no headers before the first chunk existed
    assert_streams_token_by_token(miss)
    hit = timed_stream(proxy_url, body, slow_first)
    assert hit["x_cache"] == "HIT"
    assert hit["headers_s"] < FIRST_CHUNK_DELAY_S  # a replay: the first chunk exists at once
    assert b"".join(raw for _, raw in hit["reads"]) == b"".join(raw for _, raw in miss["reads"])
