"""The naive server with the real SmolLM2-135M-Instruct, over HTTP on loopback.

Uses the session-scoped ``naive_service`` fixture (tests/conftest.py), which starts
``python -m services.naive_server`` once per test run.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.integration

STORY_PROMPT = [{"role": "user", "content": "Write a short story about the number 7."}]
COMMON_ENGLISH_WORDS = {"the", "a", "and", "of", "to", "was", "in", "he", "she", "it", "number"}
TIMEOUT_S = 120.0


def model_name(base_url: str) -> str:
    """The name the server serves, from ``/v1/models``."""
    response = httpx.get(f"{base_url}/v1/models", timeout=10)
    response.raise_for_status()
    return response.json()["data"][0]["id"]


def counter_totals(base_url: str) -> dict[str, float]:
    """Counters from ``/metrics`` summed over labels, by sample name."""
    response = httpx.get(f"{base_url}/metrics", timeout=10)
    response.raise_for_status()
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


def complete(base_url: str, **fields: Any) -> dict[str, Any]:
    """A non-streamed completion of the story prompt."""
    body = {"model": model_name(base_url), "messages": STORY_PROMPT, **fields}
    response = httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=TIMEOUT_S)
    assert response.status_code == 200, response.text
    return response.json()


def test_story_prompt_gives_coherent_english_with_usage(naive_service: Any) -> None:
    body = complete(naive_service.url, max_tokens=48, temperature=0)
    text = body["choices"][0]["message"]["content"]
    words = re.findall(r"[A-Za-z']+", text)
    assert len(words) >= 20, text
    assert sum(word.lower() in COMMON_ENGLISH_WORDS for word in words) >= 3, text
    assert sum(char.isascii() for char in text) / len(text) > 0.95, text
    usage = body["usage"]
    assert usage["prompt_tokens"] > 20  # the user message plus SmolLM2's default system prompt
    assert 0 < usage["completion_tokens"] <= 48
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert body["choices"][0]["finish_reason"] in {"stop", "length"}


def test_streaming_gives_the_same_text_as_non_streaming_at_temperature_0(naive_service: Any) -> None:
    plain = complete(naive_service.url, max_tokens=24, temperature=0)
    body = {
        "model": model_name(naive_service.url),
        "messages": STORY_PROMPT,
        "max_tokens": 24,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    payloads: list[str] = []
    with httpx.stream("POST", f"{naive_service.url}/v1/chat/completions", json=body, timeout=TIMEOUT_S) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                payloads.append(line[len("data: ") :])
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(payload) for payload in payloads[:-1]]
    text = "".join(chunk["choices"][0]["delta"].get("content") or "" for chunk in chunks if chunk["choices"])
    assert text == plain["choices"][0]["message"]["content"]
    assert chunks[-1]["usage"] == plain["usage"]
    assert len(chunks) > 10, "tokens should arrive as many chunks, not one"


def test_metrics_counters_move(naive_service: Any) -> None:
    before = counter_totals(naive_service.url)
    body = complete(naive_service.url, max_tokens=8, temperature=0)
    after = counter_totals(naive_service.url)
    assert (
        after["vllm:prompt_tokens_total"] - before.get("vllm:prompt_tokens_total", 0) == body["usage"]["prompt_tokens"]
    )
    assert (
        after["vllm:generation_tokens_total"] - before.get("vllm:generation_tokens_total", 0)
        == body["usage"]["completion_tokens"]
    )
    assert after["vllm:request_success_total"] - before.get("vllm:request_success_total", 0) == 1
    assert (
        after["vllm:e2e_request_latency_seconds_count"] - before.get("vllm:e2e_request_latency_seconds_count", 0) == 1
    )
