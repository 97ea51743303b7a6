"""The semantic tier against real parts: the proxy as its own process (``--cache semantic``,
all-MiniLM-L6-v2 loaded from its package), the session's real redis-server and the stub
upstream, which names each generation (``stub answer #N``), so a served answer is told apart
from a fresh one.

The prompts: "What is the capital of France?" and "What is the capital city of France?" are
0.96 similar under all-MiniLM-L6-v2; "How do I bake bread?" is 0.15 from either.
"""

from __future__ import annotations

import subprocess
import sys
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
    chat,
    running_proxy,
    start_proxy,
    stub_calls,
    stub_upstream_service,
)

pytestmark = pytest.mark.integration

QUESTION = "What is the capital of France?"
PARAPHRASE = "What is the capital city of France?"
OTHER_QUESTION = "How do I bake bread?"
SEMANTIC = ("--cache", "semantic", "--similarity", "0.9")


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("semantic-proxy-logs")


@pytest.fixture(scope="module")
def stub_upstream(log_dir: Path) -> Iterator[ManagedService]:
    with stub_upstream_service(log_dir, "semantic-stub") as service:
        yield service


@pytest.fixture(scope="module")
def semantic_proxy(stub_upstream: ManagedService, redis_service: Any, log_dir: Path) -> Iterator[ManagedService]:
    with running_proxy(stub_upstream, redis_service.redis_url, log_dir, *SEMANTIC) as service:
        yield service


def metric(proxy: ManagedService, name: str) -> float:
    """One sample of the proxy's /metrics (0 when absent)."""
    for line in httpx.get(f"{proxy.url}/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def test_a_paraphrase_above_the_threshold_is_a_semantic_hit_and_another_question_a_miss(
    semantic_proxy: ManagedService, stub_upstream: ManagedService
) -> None:
    with httpx.Client(base_url=semantic_proxy.url, timeout=60) as client:
        first = client.post(CHAT_PATH, json=chat(QUESTION, temperature=0))
        assert first.headers["x-cache"] == "MISS"
        calls = stub_calls(stub_upstream)
        paraphrase = client.post(CHAT_PATH, json=chat(PARAPHRASE, temperature=0))
        other = client.post(CHAT_PATH, json=chat(OTHER_QUESTION, temperature=0))
    assert paraphrase.headers["x-cache"] == "SEMANTIC"
    assert 0.9 <= float(paraphrase.headers["x-cache-similarity"]) < 1.0
    assert paraphrase.content == first.content  # the stored answer, not a new generation
    assert other.headers["x-cache"] == "MISS"
    assert "x-cache-similarity" not in other.headers
    assert other.json()["choices"][0]["message"]["content"].endswith(OTHER_QUESTION)
    assert stub_calls(stub_upstream) == calls + 1  # only the other question went upstream
    assert metric(semantic_proxy, "lab_cache_semantic_hits_total") >= 1


def test_another_models_or_settings_entry_is_never_served(semantic_proxy: ManagedService) -> None:
    with httpx.Client(base_url=semantic_proxy.url, timeout=60) as client:
        assert client.post(CHAT_PATH, json=chat(QUESTION, max_tokens=12)).headers["x-cache"] in ("MISS", "HIT")
        assert client.post(CHAT_PATH, json=chat(PARAPHRASE, max_tokens=12)).headers["x-cache"] == "SEMANTIC"
        other_model = client.post(CHAT_PATH, json={**chat(PARAPHRASE, max_tokens=12), "model": "another-model"})
        other_tokens = client.post(CHAT_PATH, json=chat(PARAPHRASE, max_tokens=13))
        other_system = client.post(
            CHAT_PATH,
            json={
                **chat(PARAPHRASE, max_tokens=12),
                "messages": [
                    {"role": "system", "content": "Answer in French."},
                    {"role": "user", "content": PARAPHRASE},
                ],
            },
        )
    assert other_model.headers["x-cache"] == "MISS"
    assert other_tokens.headers["x-cache"] == "MISS"
    assert other_system.headers["x-cache"] == "MISS"  # an earlier turn differs: another group


def test_another_credentials_entry_is_never_served(
    stub_upstream: ManagedService, redis_service: Any, log_dir: Path
) -> None:
    with (
        running_proxy(
            stub_upstream, redis_service.redis_url, log_dir, *SEMANTIC, "--credentials", "per-credential"
        ) as proxy,
        httpx.Client(base_url=proxy.url, timeout=60) as client,
    ):
        alice = {"authorization": "Bearer alice-key"}
        bob = {"authorization": "Bearer bob-key"}
        assert client.post(CHAT_PATH, json=chat(QUESTION), headers=alice).headers["x-cache"] == "MISS"
        bobs = client.post(CHAT_PATH, json=chat(PARAPHRASE), headers=bob)
        alices = client.post(CHAT_PATH, json=chat(PARAPHRASE), headers=alice)
    assert bobs.headers["x-cache"] == "MISS"
    assert alices.headers["x-cache"] == "SEMANTIC"


def test_a_restart_keeps_the_entries_and_their_vectors(
    stub_upstream: ManagedService, redis_service: Any, log_dir: Path
) -> None:
    namespace = ("--namespace", f"restart-{uuid.uuid4().hex[:8]}")
    with running_proxy(
        stub_upstream, redis_service.redis_url, log_dir, *SEMANTIC, *namespace, "--ttl-s", "600"
    ) as proxy:
        first = httpx.post(f"{proxy.url}{CHAT_PATH}", json=chat(QUESTION), timeout=60)
        assert first.headers["x-cache"] == "MISS"
    with running_proxy(stub_upstream, redis_service.redis_url, log_dir, *SEMANTIC, *namespace) as restarted:
        status = httpx.get(f"{restarted.url}/cache/semantic", timeout=10).json()
        again = httpx.post(f"{restarted.url}{CHAT_PATH}", json=chat(PARAPHRASE), timeout=60)
        flushed = httpx.post(f"{restarted.url}/cache/flush", timeout=10).json()
        after_flush = httpx.post(f"{restarted.url}{CHAT_PATH}", json=chat(PARAPHRASE), timeout=60)
    assert status["index"]["entries"] == 1
    assert again.headers["x-cache"] == "SEMANTIC"
    assert again.content == first.content
    assert flushed["deleted"] == 2  # the entry and its vector
    assert after_flush.headers["x-cache"] == "MISS"


def test_errors_no_store_and_streams_keep_the_exact_tiers_rules(
    semantic_proxy: ManagedService, stub_upstream: ManagedService
) -> None:
    question = f"Which river runs through Paris? ({uuid.uuid4().hex[:6]})"
    paraphrase = question.replace("Which river runs", "What river flows")
    with httpx.Client(base_url=semantic_proxy.url, timeout=60) as client:
        failed = client.post(CHAT_PATH, json=chat(question), headers={"x-stub-status": "500"})
        assert failed.status_code == 500
        assert client.post(CHAT_PATH, json=chat(paraphrase)).headers["x-cache"] == "MISS"  # nothing was stored
        no_store = client.post(CHAT_PATH, json=chat(paraphrase), headers={"cache-control": "no-store"})
        assert no_store.headers["x-cache"] == "BYPASS"
        stream_body = chat(question, stream=True)
        with client.stream("POST", CHAT_PATH, json=stream_body) as first:
            assert first.headers["x-cache"] == "MISS"
            first_raw = b"".join(first.iter_bytes())
        streamed = client.post(CHAT_PATH, json={**stream_body, "messages": [{"role": "user", "content": paraphrase}]})
    assert streamed.headers["x-cache"] == "SEMANTIC"
    assert streamed.headers["content-type"].startswith("text/event-stream")
    assert summarize_sse(streamed.content).text == summarize_sse(first_raw).text


def test_the_measuring_mode_counts_a_different_fresh_answer_as_a_false_hit(
    stub_upstream: ManagedService, redis_service: Any, log_dir: Path
) -> None:
    # The stub numbers every generation, so the fresh answer always differs: every verified hit is false.
    with running_proxy(
        stub_upstream, redis_service.redis_url, log_dir, *SEMANTIC, "--semantic-verify-fraction", "1"
    ) as proxy:
        with httpx.Client(base_url=proxy.url, timeout=60) as client:
            client.post(CHAT_PATH, json=chat(QUESTION, temperature=0))
            hit = client.post(CHAT_PATH, json=chat(PARAPHRASE, temperature=0))
            assert hit.headers["x-cache"] == "SEMANTIC"
            for _ in range(100):
                if metric(proxy, "lab_cache_semantic_verified_total") >= 1:
                    break
                httpx.get(f"{proxy.url}/health", timeout=10)
            status = client.get("/cache/semantic").json()
        assert metric(proxy, "lab_cache_semantic_verified_total") == 1
        assert metric(proxy, "lab_cache_semantic_false_hits_total") == 1
    verification = status["recent_verifications"][0]
    assert verification["equal"] is False
    assert verification["served"].endswith(QUESTION) and verification["fresh"].endswith(PARAPHRASE)
    assert 0 < verification["answer_similarity"] < 1


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (("--cache", "semantic", "--similarity", "1.5"), "--similarity must be a cosine similarity in (0, 1], not 1.5"),
        (("--cache", "semantic", "--similarity", "0"), "--similarity must be a cosine similarity in (0, 1], not 0"),
        (("--cache", "semantic", "--embedding-model", "/nonexistent/model"), "embedding model '/nonexistent/model'"),
        (("--similarity", "0.9"), "--similarity needs --cache semantic"),
    ],
)
def test_bad_settings_are_refused_in_one_line_at_start(arguments: tuple[str, ...], expected: str) -> None:
    argv = [sys.executable, "-m", "services.cache_proxy", "--upstream", "http://127.0.0.1:9", "--port", "9"]
    argv += ["--redis-url", "redis://127.0.0.1:9/0", *arguments]
    finished = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert finished.returncode == 2
    lines = [line for line in finished.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and expected in lines[0], finished.stderr


def test_two_proxies_with_namespaces_of_their_own_share_no_entry(
    stub_upstream: ManagedService, redis_service: Any, log_dir: Path
) -> None:
    # Two semantic proxies on one Redis, each with its own namespace (start_proxy names one).
    first = start_proxy(stub_upstream.url, redis_service.redis_url, log_dir, *SEMANTIC)
    second = start_proxy(stub_upstream.url, redis_service.redis_url, log_dir, *SEMANTIC)
    try:
        assert httpx.post(f"{first.url}{CHAT_PATH}", json=chat(QUESTION), timeout=60).headers["x-cache"] == "MISS"
        other = httpx.post(f"{second.url}{CHAT_PATH}", json=chat(PARAPHRASE), timeout=60)
        assert other.headers["x-cache"] == "MISS"
    finally:
        first.stop()
        second.stop()
