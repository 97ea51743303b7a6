"""Unit tests of the cache proxy's pure decisions (services/cache_proxy/).

The proxy's behaviour against real Redis and real upstreams is in
tests/integration/test_cache_proxy_real.py.
"""

from __future__ import annotations

import json

import pytest

from services.cache_proxy.app import build_app
from services.cache_proxy.circuit_breaker import CircuitBreaker
from services.cache_proxy.cli import parse_args
from services.cache_proxy.local_tier import LocalTier
from services.cache_proxy.policy import (
    CacheMode,
    decide_cache_mode,
    is_cacheable_json_answer,
    parse_cache_control,
    request_cache_control,
    response_allows_storing,
    summarize_sse,
)
from services.cache_proxy.resp import RedisUnavailable, _Incomplete, _parse_resp, encode_command

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def sse(*chunks: dict, done: bool = True) -> bytes:
    lines = [b"data: " + json.dumps(chunk).encode() + b"\n\n" for chunk in chunks]
    if done:
        lines.append(b"data: [DONE]\n\n")
    return b"".join(lines)


def test_cache_control_directives_are_parsed_case_insensitively() -> None:
    assert parse_cache_control("No-Cache, max-age=0") == {"no-cache", "max-age"}
    assert parse_cache_control(b"no-store") == {"no-store"}
    assert parse_cache_control(None) == frozenset()


@pytest.mark.parametrize(
    ("body", "cache_control", "policy", "expected"),
    [
        (CHAT, None, "all", CacheMode.LOOKUP),
        (CHAT, "no-cache", "all", CacheMode.REFRESH),
        (CHAT, "no-store", "all", CacheMode.BYPASS),
        (CHAT, "no-cache, no-store", "all", CacheMode.BYPASS),
        (CHAT, None, "deterministic", CacheMode.BYPASS),  # a missing temperature samples at 1.0
        ({**CHAT, "temperature": None}, None, "deterministic", CacheMode.BYPASS),
        ({**CHAT, "temperature": 0}, None, "deterministic", CacheMode.LOOKUP),
        ({**CHAT, "seed": 3}, "no-cache", "deterministic", CacheMode.REFRESH),
        ({**CHAT, "temperature": 0, "n": 2}, None, "deterministic", CacheMode.BYPASS),
    ],
)
def test_cache_mode_follows_policy_and_cache_control(
    body: dict, cache_control: str | None, policy: str, expected: CacheMode
) -> None:
    assert decide_cache_mode(body=body, cache_control=cache_control, policy=policy) is expected


def test_only_2xx_answers_with_choices_are_cacheable() -> None:
    good = json.dumps({"choices": [{"message": {"content": "x"}, "finish_reason": "length"}]}).encode()
    assert is_cacheable_json_answer(200, good)  # a max_tokens finish is a complete answer
    assert not is_cacheable_json_answer(500, good)
    assert not is_cacheable_json_answer(404, good)
    assert not is_cacheable_json_answer(200, b'{"choices": []}')
    assert not is_cacheable_json_answer(200, b'{"object": "error"}')
    assert not is_cacheable_json_answer(200, b"not json")


def test_sse_summary_assembles_text_finish_reason_and_usage() -> None:
    raw = sse(
        {"choices": [{"delta": {"role": "assistant"}}]},
        {"choices": [{"delta": {"content": "Hello"}}]},
        {"choices": [{"delta": {"content": " world"}, "finish_reason": "length"}]},
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}},
    )
    summary = summarize_sse(raw)
    assert summary.text == "Hello world"
    assert summary.finish_reason == "length"
    assert summary.usage == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert summary.is_complete


def test_sse_without_done_or_with_error_or_without_choices_is_incomplete() -> None:
    chunk = {"choices": [{"text": "a", "finish_reason": "stop"}]}
    assert summarize_sse(sse(chunk)).is_complete
    assert summarize_sse(sse(chunk)).text == "a"  # completions-style chunks too
    assert not summarize_sse(sse(chunk, done=False)).is_complete
    assert not summarize_sse(sse(chunk, {"error": {"message": "boom"}})).is_complete
    assert not summarize_sse(sse({"choices": []})).is_complete
    assert not summarize_sse(b'data: {"choices": [{"te').is_complete


def test_circuit_breaker_opens_after_failures_then_lets_one_trial_through() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(failure_threshold=3, open_s=2.0, clock=clock)
    for _ in range(2):
        breaker.record_failure()
        assert breaker.allow() and breaker.state == "closed"
    breaker.record_failure()
    assert breaker.state == "open" and not breaker.allow()
    clock.now_s += 2.5
    assert breaker.state == "half-open"
    assert breaker.allow()  # the trial
    assert not breaker.allow()  # only one trial at a time
    breaker.record_failure()  # trial failed: open again at once
    assert breaker.state == "open" and not breaker.allow()
    clock.now_s += 2.5
    assert breaker.allow()
    breaker.record_success()
    assert breaker.state == "closed" and breaker.allow() and breaker.allow()


def test_circuit_breaker_success_resets_the_failure_count() -> None:
    breaker = CircuitBreaker(failure_threshold=2, open_s=1.0, clock=FakeClock())
    breaker.record_failure()
    breaker.record_success()
    breaker.record_failure()
    assert breaker.state == "closed"


def test_resp_encoding_and_parsing_round_trip() -> None:
    assert encode_command(b"SET", "k", b"v\r\n", 5) == b"*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nv\r\n\r\n$1\r\n5\r\n"
    assert _parse_resp(b"$3\r\nabc\r\n", 0) == (b"abc", 9)
    assert _parse_resp(b"$-1\r\n", 0) == (None, 5)
    assert _parse_resp(b"+PONG\r\n", 0) == (b"PONG", 7)
    assert _parse_resp(b":12\r\n", 0) == (12, 5)
    scan_reply = b"*2\r\n$1\r\n0\r\n*1\r\n$1\r\nk\r\n"
    assert _parse_resp(scan_reply, 0) == ([b"0", [b"k"]], len(scan_reply))
    error, _ = _parse_resp(b"-ERR wrong\r\n", 0)
    assert isinstance(error, RedisUnavailable)
    with pytest.raises(_Incomplete):
        _parse_resp(b"$10\r\nabc", 0)


def test_build_app_rejects_an_unknown_policy() -> None:
    with pytest.raises(ValueError, match="policy"):
        build_app(upstream_url="http://127.0.0.1:1", redis_url="redis://127.0.0.1:1/0", policy="sometimes")


def test_every_cache_control_request_line_is_read() -> None:
    headers = [(b"cache-control", b"max-age=0"), (b"accept", b"*/*"), (b"cache-control", b"no-store")]
    assert decide_cache_mode(body=CHAT, cache_control=request_cache_control(headers), policy="all") is CacheMode.BYPASS
    assert request_cache_control([]) == b""


@pytest.mark.parametrize(
    ("headers", "allowed"),
    [
        ([("content-type", "application/json")], True),
        ([("Cache-Control", "max-age=60, public")], True),
        ([("Cache-Control", "no-store")], False),
        ([("cache-control", "max-age=60"), ("cache-control", "Private")], False),
        ([("cache-control", "no-cache")], True),  # an SSE server's "do not buffer", kept
        ([("set-cookie", "session=1")], False),
    ],
)
def test_answers_marked_private_or_no_store_are_not_storable(headers: list[tuple[str, str]], allowed: bool) -> None:
    assert response_allows_storing(headers) is allowed


def test_credentials_default_to_bypass_and_an_unknown_mode_is_refused() -> None:
    args = parse_args(["--upstream", "http://u", "--redis-url", "redis://r", "--port", "1"])
    assert args.credentials == "bypass"
    with pytest.raises(ValueError, match="credentials"):
        build_app(upstream_url="http://127.0.0.1:1", redis_url="redis://127.0.0.1:1/0", credentials="sometimes")


def _call_asgi(app, scope_overrides: dict) -> list[dict]:
    """Run one HTTP request through the ASGI app in-process; return the messages it sent."""
    import asyncio

    scope = {
        "type": "http",
        "method": "GET",
        "path": "/",
        "raw_path": b"/",
        "query_string": b"",
        "headers": [],
        **scope_overrides,
    }
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    async def run() -> None:
        try:
            await app(scope, receive, send)
        finally:
            await app.close()

    asyncio.run(run())
    return sent


@pytest.mark.parametrize(("path", "raw_path"), [("*", b"*"), ("http://elsewhere/", b"http://elsewhere/"), ("", b"")])
def test_a_target_that_is_not_a_path_gets_400_without_any_network(path: str, raw_path: bytes) -> None:
    app = build_app(upstream_url="http://127.0.0.1:1", redis_url="redis://127.0.0.1:1/0")
    sent = _call_asgi(app, {"method": "OPTIONS", "path": path, "raw_path": raw_path})
    assert sent[0]["status"] == 400
    assert b"not a path" in sent[1]["body"]


def test_a_target_httpx_cannot_send_gets_400() -> None:
    app = build_app(upstream_url="http://127.0.0.1:1", redis_url="redis://127.0.0.1:1/0")
    sent = _call_asgi(app, {"path": "/x", "raw_path": b"/x\x00\xff y"})
    assert sent[0]["status"] == 400


def _filled(tier: LocalTier, key: str, value: bytes, ttl_ms: int = -1) -> None:
    token = tier.begin_fill(key)
    assert token is not None
    tier.finish_fill(key, token, value, ttl_ms)


def test_local_tier_serves_nothing_until_tracking_is_confirmed() -> None:
    tier = LocalTier(max_entries=10, max_bytes=10_000)
    assert tier.begin_fill("k") is None
    tier.enable()
    _filled(tier, "k", b"jvalue")
    assert tier.get("k") == b"jvalue"
    tier.disable()  # the tracked or the invalidation connection was lost
    assert tier.get("k") is None and tier.begin_fill("k") is None


def test_local_tier_drops_invalidated_keys_and_cancels_fills_in_flight() -> None:
    tier = LocalTier(max_entries=10, max_bytes=10_000)
    tier.enable()
    _filled(tier, "a", b"j1")
    _filled(tier, "b", b"j2")
    tier.invalidate([b"a"])
    assert tier.get("a") is None and tier.get("b") == b"j2"
    token = tier.begin_fill("c")
    tier.invalidate([b"c"])  # changed while our GET was on its way: its reply may be stale
    tier.finish_fill("c", token, b"jstale", -1)
    assert tier.get("c") is None
    old_epoch_token = tier.begin_fill("d")
    tier.disable()
    tier.enable()
    tier.finish_fill("d", old_epoch_token, b"jold", -1)
    assert tier.get("d") is None
    tier.invalidate(None)  # FLUSHDB / FLUSHALL
    assert len(tier) == 0 and tier.bytes_used == 0


def test_local_tier_honours_the_ttl_read_with_the_value() -> None:
    clock = FakeClock()
    tier = LocalTier(max_entries=10, max_bytes=10_000, clock=clock)
    tier.enable()
    _filled(tier, "short", b"jx", ttl_ms=500)
    _filled(tier, "forever", b"jy", ttl_ms=-1)
    _filled(tier, "gone", b"jz", ttl_ms=-2)
    assert tier.get("gone") is None
    clock.now_s += 0.4
    assert tier.get("short") == b"jx"
    clock.now_s += 0.2
    assert tier.get("short") is None and tier.get("forever") == b"jy"


def test_local_tier_is_bounded_in_entries_and_bytes_least_recently_used_first() -> None:
    tier = LocalTier(max_entries=3, max_bytes=1600)
    tier.enable()
    for key in "abc":
        _filled(tier, key, b"j" + b"x" * 99)
    tier.get("a")
    _filled(tier, "d", b"j" + b"x" * 99)
    assert tier.get("b") is None and tier.get("a") is not None and len(tier) == 3
    _filled(tier, "big", b"j" * 101)  # over max_bytes // 16: never kept
    assert tier.get("big") is None
    small = LocalTier(max_entries=100, max_bytes=1600)
    small.enable()
    for index in range(40):
        _filled(small, str(index), b"j" * 100)
    assert small.bytes_used <= 1600 and len(small) == 16
