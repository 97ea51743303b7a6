"""Streamed answers reach the client as tokens exist, not after the whole answer, and the
response headers leave with the first chunk, so a client's time to first byte (k6's
``http_req_waiting``, the lab's client TTFT) is its time to first token.

On every engine: the naive server, vLLM (marked ``vllm``) and the cache proxy (a MISS passes
the stream through, a HIT replays it); llama.cpp's is checked in test_llamacpp_real.py, on the
one llama.cpp server the run starts.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.supervisor import ManagedService
from tests.support.integration_streams import (
    assert_streams_token_by_token,
    has_content,
    model_of,
    stream_body,
    timed_stream,
)

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_naive_server_first_bytes_carry_the_first_token(naive_service: Any) -> None:
    timed = timed_stream(naive_service.url, stream_body(model_of(naive_service.url)))
    assert_streams_token_by_token(timed)
    # The role chunk is not sent alone ahead of the first token: the first read has content.
    assert has_content(timed["reads"][0][1])


@pytest.mark.vllm
def test_vllm_streams_token_by_token(vllm_service: Any) -> None:
    timed = timed_stream(vllm_service.url, stream_body(model_of(vllm_service.url), max_tokens=64))
    assert_streams_token_by_token(timed)


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
