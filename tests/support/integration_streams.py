"""Streamed chat completions timed read by read, and ``python -m lab`` as a subprocess: the
helpers of the streaming, services and llama.cpp integration tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

PROJECT_ROOT = Path(__file__).resolve().parents[2]
STORY = [{"role": "user", "content": "Write a short story about the number 7."}]


def lab_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """``python -m lab ARGS`` from the project root, this environment plus ``env``; its result."""
    return subprocess.run(
        [sys.executable, "-m", "lab", *args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def stream_text(url: str, model: str) -> tuple[str, dict[str, Any] | None]:
    """The story streamed from ``url`` at temperature 0 (32 tokens): its text and usage chunk."""
    text, usage = "", None
    body = {
        "model": model,
        "messages": STORY,
        "max_tokens": 32,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0,
    }
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=300) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line.removeprefix("data: "))
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices", []):
                text += choice.get("delta", {}).get("content") or ""
    return text, usage


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
    content_reads = [at for at, raw in reads if has_content(raw)]
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


def has_content(raw: bytes) -> bool:
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
