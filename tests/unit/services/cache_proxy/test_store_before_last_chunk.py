"""A completed stream is in the cache before its client has the last chunk (issue 56, item 2).

The SDK closes a stream as soon as it has read ``data: [DONE]``; an upstream may take a while
after that to end its response. These tests run the proxy's upstream calls against an in-memory
upstream that sends ``[DONE]`` and then waits before it ends, with a client that leaves the
moment it has ``[DONE]``: the answer must be stored by then, for the first client and for
single-flight followers. No network.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, MutableMapping
from typing import Any

import httpx

from services.cache_proxy.flights import UpstreamFlights
from services.cache_proxy.metrics import ProxyMetrics
from services.cache_proxy.policy import SseEnd, XCache, summarize_sse

SCOPE = {
    "type": "http",
    "method": "POST",
    "path": "/v1/chat/completions",
    "raw_path": b"/v1/chat/completions",
    "query_string": b"",
    "headers": [(b"content-type", b"application/json")],
}
USAGE = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}


def event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


STREAM_CHUNKS = [
    event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}}]}),
    event({"choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]}),
    event({"choices": [], "usage": USAGE}),
    b"data: [DONE]\n\n",
]


class LingeringUpstream:
    """Streams ``chunks`` (a chunk may be split anywhere), then waits ``linger_s`` before it ends
    its response (as an upstream finishing its own bookkeeping does); counts its calls."""

    def __init__(self, chunks: list[bytes], linger_s: float) -> None:
        self.chunks, self.linger_s, self.calls, self.ended = chunks, linger_s, 0, 0

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1

        async def body() -> AsyncIterator[bytes]:
            for chunk in self.chunks:
                yield chunk
                await asyncio.sleep(0.01)
            await asyncio.sleep(self.linger_s)
            self.ended += 1

        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body())


class Recorder:
    """What happened, in order: ``("store", body)`` and ``("sent", client, body)`` events."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def flights(self, upstream: LingeringUpstream) -> UpstreamFlights:
        async def store(key: str, content_type: bytes, body: bytes) -> bool:
            await asyncio.sleep(0.005)  # a Redis round trip
            self.events.append(("store", body))
            return True

        flights = UpstreamFlights(upstream_url="http://upstream", metrics=ProxyMetrics(), store=store)
        flights.http = httpx.AsyncClient(transport=httpx.MockTransport(upstream))
        return flights

    def stored(self) -> list[bytes]:
        return [entry[1] for entry in self.events if entry[0] == "store"]

    def first_done_index(self, client: str) -> int:
        for index, entry in enumerate(self.events):
            if entry[0] == "sent" and entry[1] == client and b"[DONE]" in entry[2]:
                return index
        raise AssertionError(f"{client} never got [DONE]: {self.events}")


class LeavingClient:
    """An ASGI client that closes its connection as soon as it has read ``[DONE]``."""

    def __init__(self, name: str, recorder: Recorder) -> None:
        self.name, self.recorder = name, recorder
        self.messages: list[MutableMapping[str, Any]] = []
        self._has_done = asyncio.Event()
        self._body_read = False

    async def send(self, message: MutableMapping[str, Any]) -> None:
        self.messages.append(message)
        body = message.get("body", b"")
        if message["type"] == "http.response.body":
            self.recorder.events.append(("sent", self.name, body))
            if b"[DONE]" in body:
                self._has_done.set()

    async def receive(self) -> dict[str, Any]:
        if not self._body_read:
            self._body_read = True
            return {"type": "http.request", "body": b"{}", "more_body": False}
        await self._has_done.wait()
        return {"type": "http.disconnect"}

    def x_cache(self) -> bytes:
        start = next(message for message in self.messages if message["type"] == "http.response.start")
        return dict(start["headers"])[b"x-cache"]


def test_sse_end_is_found_however_the_chunks_split_the_done_event() -> None:
    whole = b"".join(STREAM_CHUNKS)
    for cut in range(1, len(whole)):
        end = SseEnd()
        assert not end.feed(whole[:cut])
        assert end.feed(whole[cut:]), cut
    for text in (b"data:[DONE]\r\n\r\n", b"data: [DONE] \n\n", b"\n\ndata: [DONE]\n\n"):
        assert SseEnd().feed(text), text
    for text in (
        b"data: [DONE]\n",  # the event is not complete before its blank line
        b'data: {"choices": [{"delta": {"content": "data: [DONE]"}}]}\n\n',
        b"data: [DONE]x\n\n",
        b"data: [DO" + b"x" * 10_000 + b"NE]\n\n",
    ):
        assert not SseEnd().feed(text), text


def test_a_stream_is_stored_before_its_client_gets_the_last_chunk() -> None:
    async def scenario() -> tuple[Recorder, LingeringUpstream, LeavingClient]:
        recorder = Recorder()
        upstream = LingeringUpstream(STREAM_CHUNKS, linger_s=1.0)
        flights = recorder.flights(upstream)
        client = LeavingClient("first", recorder)
        await flights.miss(SCOPE, client.receive, client.send, b"{}", True, "key", single_flight=True)
        await asyncio.sleep(0.05)
        return recorder, upstream, client

    recorder, upstream, client = asyncio.run(scenario())
    stored = recorder.stored()
    assert stored == [b"".join(STREAM_CHUNKS)]
    assert recorder.events.index(("store", stored[0])) < recorder.first_done_index("first")
    assert client.x_cache() == XCache.MISS.value
    summary = summarize_sse(stored[0])
    assert (summary.text, summary.usage, summary.is_complete) == ("Hello", USAGE, True)
    assert upstream.ended == 0  # the client left before the upstream ended: the call was cancelled


def test_a_done_event_split_over_chunks_is_stored_before_its_last_piece_is_sent() -> None:
    whole = b"".join(STREAM_CHUNKS)
    pieces = [whole[index : index + 7] for index in range(0, len(whole), 7)]

    async def scenario() -> Recorder:
        recorder = Recorder()
        flights = recorder.flights(LingeringUpstream(pieces, linger_s=1.0))
        client = LeavingClient("first", recorder)
        await flights.miss(SCOPE, client.receive, client.send, b"{}", True, "key", single_flight=True)
        return recorder

    recorder = asyncio.run(scenario())
    assert recorder.stored() == [whole]
    last_piece_sent = max(
        index for index, entry in enumerate(recorder.events) if entry[0] == "sent" and entry[2] == pieces[-1]
    )
    assert recorder.events.index(("store", whole)) < last_piece_sent


def test_followers_get_the_answer_once_stored_without_waiting_for_the_upstream_to_end() -> None:
    async def scenario() -> tuple[Recorder, LingeringUpstream, LeavingClient, LeavingClient, float]:
        recorder = Recorder()
        upstream = LingeringUpstream(STREAM_CHUNKS, linger_s=2.0)
        flights = recorder.flights(upstream)
        leader, follower = LeavingClient("leader", recorder), LeavingClient("follower", recorder)
        loop = asyncio.get_running_loop()
        started_at = loop.time()
        leading = asyncio.ensure_future(
            flights.miss(SCOPE, leader.receive, leader.send, b"{}", True, "key", single_flight=True)
        )
        await asyncio.sleep(0.005)
        await flights.miss(SCOPE, follower.receive, follower.send, b"{}", True, "key", single_flight=True)
        follower_s = loop.time() - started_at
        await leading
        return recorder, upstream, leader, follower, follower_s

    recorder, upstream, _, follower, follower_s = asyncio.run(scenario())
    assert upstream.calls == 1
    assert recorder.stored() == [b"".join(STREAM_CHUNKS)]
    store_index = recorder.events.index(("store", recorder.stored()[0]))
    assert store_index < recorder.first_done_index("leader")
    assert store_index < recorder.first_done_index("follower")
    assert follower.x_cache() == XCache.MISS.value
    assert b"".join(message.get("body", b"") for message in follower.messages) == b"".join(STREAM_CHUNKS)
    assert follower_s < 1.0  # not after the upstream's 2 s linger
