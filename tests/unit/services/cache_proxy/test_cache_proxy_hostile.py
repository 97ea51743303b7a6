"""Unit tests of the cache proxy under hostile clients (issue 25, items 5-8), no network:
bodies read under a limit and a deadline, stored values checked on read, WRONGTYPE told
apart from an outage, and upstream calls cancelled when their last client leaves (against
an in-memory httpx transport). The real-process tests are in
tests/integration/test_proxy_hostile.py.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.cache_proxy.bodies import (
    BodyDeadlines,
    BodyReadTimeout,
    BodyTooLarge,
    ClientGone,
    read_limited_body,
    send_too_large,
)
from services.cache_proxy.cli import parse_args
from services.cache_proxy.config import ProxyConfig
from services.cache_proxy.flights import UpstreamFlights
from services.cache_proxy.keys import cache_key, key_request
from services.cache_proxy.local_tier import LocalTier
from services.cache_proxy.metrics import ProxyMetrics
from services.cache_proxy.policy import XCache
from services.cache_proxy.resp import RedisUnavailable, RedisWrongType, _parse_resp
from services.cache_proxy.responses import prepared_hit
from services.cache_proxy.serving import (
    SERVERS,
    SETTINGS_ENVIRONMENT_VARIABLE,
    app_from_environment,
    settings_to_environment,
)

ANSWER = json.dumps({"choices": [{"index": 0, "message": {"content": "hi"}, "finish_reason": "stop"}]}).encode()
STREAM = b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n'


def messages(*bodies: bytes, then_disconnect_after_s: float | None = None) -> Callable:
    """An ASGI ``receive`` giving ``bodies`` as one request body, then (after a while) a disconnect."""
    queue = [
        {"type": "http.request", "body": body, "more_body": index < len(bodies) - 1}
        for index, body in enumerate(bodies)
    ]

    async def receive() -> dict:
        if queue:
            return queue.pop(0)
        if then_disconnect_after_s is None:
            await asyncio.Event().wait()  # never set: the client stays until cancelled
        else:
            await asyncio.sleep(then_disconnect_after_s)
        return {"type": "http.disconnect"}

    return receive


# --- bodies ---------------------------------------------------------------------------------


def test_a_declared_length_over_the_limit_is_refused_before_reading() -> None:
    async def receive() -> dict:
        raise AssertionError("the body must not be read")

    with pytest.raises(BodyTooLarge):
        asyncio.run(
            read_limited_body(
                receive, [(b"content-length", b"1000001")], max_body_bytes=1_000_000, deadlines=BodyDeadlines(1)
            )
        )


def test_a_body_without_length_is_counted_as_it_arrives() -> None:
    chunks = [b"x" * 400] * 10
    with pytest.raises(BodyTooLarge):
        asyncio.run(read_limited_body(messages(*chunks), [], max_body_bytes=1000, deadlines=BodyDeadlines(1)))
    body = asyncio.run(read_limited_body(messages(*chunks), [], max_body_bytes=4000, deadlines=BodyDeadlines(1)))
    assert body == b"x" * 4000


def test_a_body_that_trickles_in_times_out_and_a_client_that_leaves_is_gone() -> None:
    async def slow() -> dict:
        await asyncio.sleep(0.02)
        return {"type": "http.request", "body": b"x", "more_body": True}

    started_at = time.perf_counter()
    with pytest.raises(BodyReadTimeout):
        asyncio.run(read_limited_body(slow, [], max_body_bytes=1000, deadlines=BodyDeadlines(0.3)))
    assert 0.3 <= time.perf_counter() - started_at < 1.0

    async def in_time() -> bytes:  # a deadline of its own for each read, and none left behind
        deadlines = BodyDeadlines(0.3)
        first = await read_limited_body(messages(b"a", b"b"), [], max_body_bytes=10, deadlines=deadlines)
        await asyncio.sleep(0.5)
        return first + await read_limited_body(messages(b"c"), [], max_body_bytes=10, deadlines=deadlines)

    assert asyncio.run(in_time()) == b"abc"

    async def gone() -> dict:
        return {"type": "http.disconnect"}

    with pytest.raises(ClientGone):
        asyncio.run(read_limited_body(gone, [], max_body_bytes=1000, deadlines=BodyDeadlines(1)))


def test_deadlines_hold_where_the_server_steps_the_app_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """granian runs the app under its own scheduler, whose tasks ignore cancel(): reads are
    raced against the deadline instead (simulated here by a current task that is not an asyncio.Task)."""
    from services.cache_proxy import bodies

    monkeypatch.setattr(bodies.asyncio, "current_task", lambda: object())

    async def never() -> dict:
        await asyncio.Event().wait()
        return {}

    started_at = time.perf_counter()
    with pytest.raises(BodyReadTimeout, match=re.escape("0.3 s")):
        asyncio.run(read_limited_body(never, [], max_body_bytes=10, deadlines=BodyDeadlines(0.3)))
    assert 0.3 <= time.perf_counter() - started_at < 1.0
    body = asyncio.run(read_limited_body(messages(b"a", b"b"), [], max_body_bytes=10, deadlines=BodyDeadlines(1)))
    assert body == b"ab"
    sent: list[MutableMapping[str, Any]] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    monkeypatch.setattr(bodies, "DRAIN_AFTER_REFUSAL_S", 0.2)
    asyncio.run(send_too_large(send, never, max_body_bytes=10))  # a client that stops sending: ends anyway
    assert sent[0]["status"] == 413 and sent[-1] == {"type": "http.response.body", "body": b""}


def test_a_413_closes_the_connection_after_reading_what_the_client_still_sends() -> None:
    sent: list[MutableMapping[str, Any]] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    asyncio.run(send_too_large(send, messages(b"a", b"b", b"c"), max_body_bytes=10))
    assert sent[0]["status"] == 413 and (b"connection", b"close") in sent[0]["headers"]
    assert b"10 bytes" in sent[1]["body"] and sent[-1] == {"type": "http.response.body", "body": b""}


# --- stored values -------------------------------------------------------------------------


def test_only_values_the_proxy_stores_are_served_and_their_kind_is_known() -> None:
    plain, stream = prepared_hit(b"j" + ANSWER), prepared_hit(b"s" + STREAM)
    assert plain is not None and plain[1] == ANSWER and plain[2] is False
    assert stream is not None and stream[1] == STREAM and stream[2] is True
    assert (b"content-type", b"text/event-stream") in stream[0]


@pytest.mark.parametrize(
    "stored",
    [
        b"",
        b"j",
        b"\x00\xffgarbage",
        b"x" + ANSWER,
        b"j" + ANSWER[:-5],
        b'j{"choices": []}',
        b"j[1, 2]",
        b"s" + STREAM.replace(b"data: [DONE]\n\n", b""),
        b"s" + ANSWER,
        b"j" + STREAM,
    ],
    ids=[
        "empty",
        "tag only",
        "garbage",
        "unknown tag",
        "truncated",
        "no choices",
        "not an object",
        "stream without DONE",
        "JSON tagged as stream",
        "stream tagged as JSON",
    ],
)
def test_values_of_the_wrong_shape_are_not_served(stored: bytes) -> None:
    assert prepared_hit(stored) is None


def test_the_local_tier_keeps_no_value_the_proxy_would_not_serve() -> None:
    tier = LocalTier(max_entries=10, max_bytes=100_000, prepare=prepared_hit)
    tier.enable()
    for key, value in (("good", b"j" + ANSWER), ("bad", b"jnot json")):
        token = tier.begin_fill(key)
        tier.finish_fill(key, token, value, -1)
    assert tier.get("good") is not None and tier.get("bad") is None and len(tier) == 1


def test_wrongtype_is_a_bad_entry_not_an_outage() -> None:
    wrong, _ = _parse_resp(b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n", 0)
    other, _ = _parse_resp(b"-ERR max number of clients reached\r\n", 0)
    assert isinstance(wrong, RedisWrongType) and not isinstance(wrong, RedisUnavailable)
    assert isinstance(other, RedisUnavailable)


# --- keying ---------------------------------------------------------------------------------


def test_a_keyed_request_carries_only_small_policy_fields_and_the_same_key() -> None:
    body = {"model": "m", "messages": [], "stream": True, "temperature": 0, "n": [1] * 1000, "seed": {"a": 1}}
    keyed = key_request(
        json.dumps(body).encode(),
        upstream_identity="http://u",
        path="/v1/chat/completions",
        namespace="ns",
        requester=None,
    )
    assert keyed.streaming is True
    assert keyed.policy_fields == {"temperature": 0, "n": [], "seed": []}
    assert keyed.key == cache_key(upstream_identity="http://u", path="/v1/chat/completions", body=body, namespace="ns")


# --- upstream calls end with their last client ------------------------------------------------


class SlowUpstream:
    """An in-memory upstream answering after ``delay_s``; records calls and cancellations."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s, self.calls, self.cancelled, self.finished = delay_s, 0, 0, 0

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        try:
            await asyncio.sleep(self.delay_s)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        self.finished += 1
        return httpx.Response(200, content=ANSWER, headers={"content-type": "application/json"})


def _flights(upstream: SlowUpstream) -> tuple[UpstreamFlights, list[tuple[str, bytes]]]:
    stored: list[tuple[str, bytes]] = []

    async def store(key: str, content_type: bytes, body: bytes) -> bool:
        stored.append((key, body))
        return True

    flights = UpstreamFlights(upstream_url="http://upstream", metrics=ProxyMetrics(), store=store)
    flights.http = httpx.AsyncClient(transport=httpx.MockTransport(upstream))
    return flights, stored


SCOPE = {
    "type": "http",
    "method": "POST",
    "path": "/v1/chat/completions",
    "raw_path": b"/v1/chat/completions",
    "query_string": b"",
    "headers": [(b"content-type", b"application/json")],
}


def _client(flights: UpstreamFlights, leave_after_s: float | None) -> tuple[Callable, list[MutableMapping[str, Any]]]:
    sent: list[MutableMapping[str, Any]] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    async def run() -> None:
        await flights.miss(
            SCOPE, messages(b"{}", then_disconnect_after_s=leave_after_s), send, b"{}", False, "key", single_flight=True
        )
        await asyncio.sleep(0.1)  # the cancellation lands (asyncio.run would cancel what is left anyway)

    return run, sent


def test_a_client_leaving_cancels_the_upstream_call() -> None:
    upstream = SlowUpstream(delay_s=10)
    flights, stored = _flights(upstream)
    run, sent = _client(flights, leave_after_s=0.2)

    async def scenario() -> tuple[int, float]:
        started_at = time.perf_counter()
        await run()
        return upstream.cancelled, time.perf_counter() - started_at

    cancelled, elapsed_s = asyncio.run(scenario())
    assert elapsed_s < 2
    assert (upstream.calls, cancelled, sent, stored) == (1, 1, [], [])


def test_a_single_flight_call_goes_on_while_a_follower_waits_and_ends_with_the_last() -> None:
    async def scenario(leader_leaves_s: float, follower_leaves_s: float | None) -> tuple:
        upstream = SlowUpstream(delay_s=1.0)
        flights, stored = _flights(upstream)
        leader, _ = _client(flights, leave_after_s=leader_leaves_s)
        follower, follower_sent = _client(flights, leave_after_s=follower_leaves_s)
        leading = asyncio.ensure_future(leader())
        await asyncio.sleep(0.05)
        await asyncio.gather(follower(), leading)
        return upstream.calls, upstream.cancelled, upstream.finished, follower_sent, stored

    calls, cancelled, finished, follower_sent, stored = asyncio.run(scenario(0.2, None))
    assert (calls, cancelled, finished) == (1, 0, 1)
    assert follower_sent[0]["status"] == 200 and follower_sent[1]["body"] == ANSWER and stored
    assert (b"x-cache", XCache.MISS.value) in follower_sent[0]["headers"]
    calls, cancelled, finished, follower_sent, stored = asyncio.run(scenario(0.2, 0.4))
    assert (calls, cancelled, finished, follower_sent, stored) == (1, 1, 0, [], [])


# --- serving --------------------------------------------------------------------------------


def test_server_and_limits_are_settings_with_safe_defaults() -> None:
    args = parse_args(["--upstream", "http://u", "--redis-url", "redis://r", "--port", "1"])
    assert args.server == "uvicorn"
    assert 1 <= args.max_body_bytes // (1024 * 1024) <= 16
    assert 0 < args.header_timeout_s <= 10 and 0 < args.body_timeout_s <= 30
    for server in ("granian", "granian-rsgi"):
        assert parse_args(["--upstream", "u", "--redis-url", "r", "--port", "1", "--server", server]).server == server
    with pytest.raises(SystemExit):
        parse_args(["--upstream", "u", "--redis-url", "r", "--port", "1", "--server", "gunicorn"])


def test_granian_workers_build_the_same_proxy_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    config = ProxyConfig(
        upstream_url="http://u",
        redis_url="redis://r",
        credential_secret=b"\x00secret",
        max_body_bytes=123,
        namespace="ns",
    )
    monkeypatch.setenv(SETTINGS_ENVIRONMENT_VARIABLE, settings_to_environment(config))
    assert app_from_environment().config == config
    assert SETTINGS_ENVIRONMENT_VARIABLE not in __import__("os").environ


def test_the_catalog_passes_the_proxy_server_through(tmp_path: Path) -> None:
    from services.catalog import build_service, cache_proxy_config

    for server in SERVERS:
        config = cache_proxy_config(upstream_url="http://127.0.0.1:1", redis_url="redis://127.0.0.1:2/0", server=server)
        argv = build_service("cache-proxy", config, log_path=tmp_path / "p.log", port=1).resolved_argv()
        assert argv[argv.index("--server") + 1] == server
    with pytest.raises(ValueError, match="uvicorn"):
        cache_proxy_config(upstream_url="http://u", redis_url="redis://r", server="gunicorn")


def test_another_server_wins_only_when_faster_at_a_p99_no_worse_than_uvicorns() -> None:
    from benchmarks.asgi_servers import verdicts

    def runs(lab_granian: tuple[float, float], lab_rsgi: tuple[float, float] = (1000, 50)) -> dict[str, list]:
        def figures(req_per_s: float, p99_ms: float) -> list[dict[str, float]]:
            return [{"req_per_s": req_per_s, "latency_p99_ms": p99_ms}]

        return {
            "seed": figures(5000, 30),
            "bare-uvicorn": figures(15000, 9),
            "bare-granian": figures(18000, 8),
            "bare-granian-rsgi": figures(20000, 7),
            "lab-uvicorn": figures(14000, 9.5),
            "lab-granian": figures(*lab_granian),
            "lab-granian-rsgi": figures(*lab_rsgi),
        }

    assert verdicts(runs((16000, 9.0)))["winner"] == "granian"
    assert verdicts(runs((16000, 9.6)))["winner"] == "uvicorn"  # faster, but a worse p99
    assert verdicts(runs((13000, 5.0)))["winner"] == "uvicorn"
    assert verdicts(runs((16000, 9.0), (17000, 9.5)))["winner"] == "granian-rsgi"  # fastest, p99 equal
    assert verdicts(runs((16000, 9.0), (17000, 9.51)))["winner"] == "granian"
    result = verdicts(runs((16000, 9.0)))
    assert result["targets"]["granian"]["vs_seed_req_per_s"] == pytest.approx(3.2)
    assert result["targets"]["granian"]["p99_over_seed_p99"] == pytest.approx(0.3)
    assert result["over_uvicorn_req_per_s_by_round"]["bare-granian-rsgi"] == [pytest.approx(20000 / 15000)]
