"""The real OpenAI Python SDK (pinned in requirements.txt) against the naive server with SmolLM2,
directly and through the cache proxy (issue 56, items 2 to 4), and the same calls against vLLM
once (llama.cpp's are in test_llamacpp_real.py, on its one server).

The SDK is what a lab's applications use: it always sends ``Authorization`` (a key is mandatory),
closes a stream as soon as it has read ``data: [DONE]``, and calls ``/v1/completions`` for
``client.completions.create``. The naive server is the session's shared one (``naive_service``,
tests/conftest.py); each proxy is a process of its own with its own namespace, in front of it.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from services.supervisor import ManagedService
from tests.support.integration_proxy import start_proxy
from tests.support.openai_sdk import (
    ALPHA_KEY,
    Answer,
    assert_one_client_serves_chat_and_completions,
    chat_answer,
    sdk,
    text_answer,
)

pytestmark = pytest.mark.integration

BETA_KEY = "sk-lab-test-beta"
# Tries of "the same request sent the moment the first one finished" per kind of request.
IMMEDIATE_REPEATS = 5


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("openai-sdk-logs")


@pytest.fixture(scope="module")
def sdk_proxy(naive_service: Any, redis_service: Any, log_dir: Path) -> Iterator[ManagedService]:
    """The proxy as an SDK user runs it: per-credential entries."""
    service = start_proxy(naive_service.url, redis_service.redis_url, log_dir, "--credentials", "per-credential")
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture(scope="module")
def default_proxy(naive_service: Any, redis_service: Any, log_dir: Path) -> Iterator[ManagedService]:
    """The proxy with its default credential policy (bypass)."""
    service = start_proxy(naive_service.url, redis_service.redis_url, log_dir)
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture(scope="module")
def model(naive_service: Any) -> str:
    return sdk(naive_service.url).models.list().data[0].id


def metric_values(base_url: str, name: str) -> dict[str, float]:
    """Samples called ``name`` from ``/metrics``, by their labels (``"reason=credentials"``)."""
    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    return {
        ",".join(f"{key}={value}" for key, value in sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


def finished_generations(naive_url: str) -> float:
    return sum(metric_values(naive_url, "vllm:request_success_total").values())


# --- the naive server, directly ---------------------------------------------------------------


def test_sdk_chat_and_completions_against_the_naive_server(naive_service: Any, model: str) -> None:
    client = sdk(naive_service.url)
    plain_chat = chat_answer(client, model, "Name one colour.", stream=False)
    streamed_chat = chat_answer(client, model, "Name one colour.", stream=True)
    assert plain_chat.text and plain_chat.usage is not None
    assert (streamed_chat.text, streamed_chat.usage) == (plain_chat.text, plain_chat.usage)
    assert streamed_chat.finish_reason == plain_chat.finish_reason

    prompt = "Once upon a time, the number seven"
    plain_text = text_answer(client, model, prompt, stream=False)
    assert re.search(r"[A-Za-z]", plain_text.text), plain_text
    assert plain_text.usage is not None and plain_text.usage["completion_tokens"] <= 8
    assert plain_text.usage["prompt_tokens"] < plain_chat.usage["prompt_tokens"]  # no chat template around it
    assert plain_text.usage["total_tokens"] == plain_text.usage["prompt_tokens"] + plain_text.usage["completion_tokens"]
    streamed_text = text_answer(client, model, prompt, stream=True)
    assert (streamed_text.text, streamed_text.usage, streamed_text.finish_reason) == (
        plain_text.text,
        plain_text.usage,
        plain_text.finish_reason,
    )
    without_usage = text_answer(client, model, prompt, stream=True, include_usage=False)
    assert (without_usage.text, without_usage.usage) == (plain_text.text, None)
    default_length = client.completions.create(model=model, prompt=prompt, temperature=0)
    assert default_length.usage is not None and default_length.usage.completion_tokens <= 16  # OpenAI's default


# --- through the proxy --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("endpoint", "include_usage"), [("chat", True), ("chat", False), ("completions", True), ("completions", False)]
)
def test_a_stream_sent_again_the_moment_it_ended_is_a_hit_with_the_same_text_and_usage(
    sdk_proxy: ManagedService, model: str, endpoint: str, include_usage: bool
) -> None:
    client = sdk(sdk_proxy.url)
    ask = chat_answer if endpoint == "chat" else text_answer
    states = []
    for _ in range(IMMEDIATE_REPEATS):
        prompt = f"Say hello to visitor {uuid.uuid4().hex[:8]}."
        first = ask(client, model, prompt, stream=True, include_usage=include_usage)
        again = ask(client, model, prompt, stream=True, include_usage=include_usage)  # at once: no pause
        states.append((first.x_cache, again.x_cache))
        assert (again.text, again.usage, again.finish_reason, again.chunks) == (
            first.text,
            first.usage,
            first.finish_reason,
            first.chunks,
        )
        assert first.text and (first.usage is not None) is include_usage
    assert states == [("MISS", "HIT")] * IMMEDIATE_REPEATS


def test_plain_chat_and_completions_miss_then_hit(sdk_proxy: ManagedService, model: str) -> None:
    client = sdk(sdk_proxy.url)
    for ask in (chat_answer, text_answer):
        prompt = f"Count to three, {uuid.uuid4().hex[:8]}."
        first, again = (ask(client, model, prompt, stream=False) for _ in range(2))
        assert (first.x_cache, again.x_cache) == ("MISS", "HIT")
        assert (again.text, again.usage, again.finish_reason) == (first.text, first.usage, first.finish_reason)
        streamed = ask(client, model, prompt, stream=True)  # a stream is its own entry
        assert streamed.x_cache == "MISS" and streamed.text == first.text


def test_each_credential_has_its_own_entries(sdk_proxy: ManagedService, model: str) -> None:
    prompt = f"Name a fruit, {uuid.uuid4().hex[:8]}."
    alpha, beta = sdk(sdk_proxy.url, ALPHA_KEY), sdk(sdk_proxy.url, BETA_KEY)
    states = [chat_answer(client, model, prompt, stream=True).x_cache for client in (alpha, alpha, beta, beta)]
    assert states == ["MISS", "HIT", "MISS", "HIT"]
    before = metric_values(sdk_proxy.url, "lab_cache_bypasses_total")
    assert before["reason=credentials"] == 0  # per-credential: nothing bypassed for its key


def test_single_flight_followers_share_one_generation_and_the_next_request_hits(
    sdk_proxy: ManagedService, naive_service: Any, model: str
) -> None:
    prompt = f"Tell a short tale, {uuid.uuid4().hex[:8]}."
    generations_before = finished_generations(naive_service.url)
    answers: dict[str, Answer] = {}

    def ask(name: str) -> None:
        answers[name] = chat_answer(sdk(sdk_proxy.url), model, prompt, stream=True)

    leader = threading.Thread(target=ask, args=("leader",))
    follower = threading.Thread(target=ask, args=("follower",))
    leader.start()
    time.sleep(0.05)
    follower.start()
    for thread in (leader, follower):
        thread.join(timeout=120)
    after = chat_answer(sdk(sdk_proxy.url), model, prompt, stream=True)
    assert finished_generations(naive_service.url) - generations_before == 1
    assert answers["leader"].x_cache == "MISS" and answers["follower"].x_cache in {"MISS", "HIT"}
    assert after.x_cache == "HIT"
    assert {(answer.text, str(answer.usage)) for answer in (*answers.values(), after)} == {
        (after.text, str(after.usage))
    }


@pytest.mark.parametrize("stream", [False, True])
def test_errors_are_never_cached(sdk_proxy: ManagedService, model: str, stream: bool) -> None:
    client = sdk(sdk_proxy.url)
    too_long: dict[str, Any] = {"max_tokens": 10**6}
    for fields, error_type in (({"model": "no-such-model"}, openai.NotFoundError), (too_long, openai.BadRequestError)):
        states = []
        for _ in range(2):
            with pytest.raises(error_type) as raised:
                client.chat.completions.create(
                    **{"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream, **fields}
                )
            states.append(raised.value.response.headers["x-cache"])
        assert states == ["MISS", "MISS"], fields
        with pytest.raises(error_type):
            client.completions.create(**{"model": model, "prompt": "hi", "stream": stream, **fields})


# --- vLLM: the same client code, directly and through the proxy --------------------------------


def test_the_same_sdk_calls_against_vllm_directly_and_a_stream_repeated_at_once_through_the_proxy(
    vllm_service: Any, redis_service: Any, log_dir: Path
) -> None:
    model = assert_one_client_serves_chat_and_completions(vllm_service.url)
    proxy = start_proxy(vllm_service.url, redis_service.redis_url, log_dir, "--credentials", "per-credential")
    try:
        client = sdk(proxy.url)
        for ask in (chat_answer, text_answer):
            prompt = f"Say hello to visitor {uuid.uuid4().hex[:8]}."
            first, again = (ask(client, model, prompt, stream=True) for _ in range(2))
            assert (first.x_cache, again.x_cache) == ("MISS", "HIT")
            assert first.text and first.usage is not None
            assert (again.text, again.usage, again.finish_reason) == (first.text, first.usage, first.finish_reason)
    finally:
        proxy.stop()


# --- the default credential policy says why nothing is cached ----------------------------------


def test_the_default_policy_bypasses_the_sdk_says_why_once_and_counts_it(
    default_proxy: ManagedService, model: str
) -> None:
    client = sdk(default_proxy.url)
    states = [chat_answer(client, model, "Name one colour.", stream=stream).x_cache for stream in (False, True, False)]
    assert states == ["BYPASS"] * 3
    by_reason = metric_values(default_proxy.url, "lab_cache_bypasses_total")
    assert by_reason["reason=credentials"] == 3 and by_reason["reason=no_store"] == 0
    log = default_proxy.log_path.read_text()
    told = [line for line in log.splitlines() if "went upstream uncached" in line]
    assert len(told) == 1, log
    assert "(authorization)" in told[0] and "--credentials per-credential" in told[0]
    assert ALPHA_KEY not in log
