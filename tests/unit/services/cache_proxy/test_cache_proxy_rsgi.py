"""Unit tests of the RSGI adapter (services/cache_proxy/rsgi.py) against an in-memory RSGI
protocol: the ASGI scope it builds, how bodies arrive, how answers leave, and the client
leaving. The proxy under a real granian (RSGI) is in tests/integration/test_proxy_hostile.py."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from services.cache_proxy.config import ProxyConfig
from services.cache_proxy.rsgi import RsgiAdapter, asgi_scope_of
from services.cache_proxy.serving import (
    SETTINGS_ENVIRONMENT_VARIABLE,
    rsgi_app_from_environment,
    settings_to_environment,
)


class FakeHeaders:
    def __init__(self, items: list[tuple[str, str]]):
        self._items = items

    def items(self) -> list[tuple[str, str]]:
        return list(self._items)


@dataclass
class FakeScope:
    headers: FakeHeaders
    proto: str = "http"
    http_version: str = "1.1"
    method: str = "POST"
    scheme: str = "http"
    path: str = "/v1/chat/completions"
    query_string: str = ""
    client: str = "127.0.0.1:5555"
    server: str = "127.0.0.1:8000"


class ProtocolClosed(RuntimeError):
    pass


@dataclass
class FakeStream:
    sent: list[bytes] = field(default_factory=list)
    closed: bool = False

    async def send_bytes(self, data: bytes) -> None:
        if self.closed:
            raise ProtocolClosed("client left")
        self.sent.append(data)


@dataclass
class FakeProtocol:
    chunks: list[bytes]
    disconnected: asyncio.Event = field(default_factory=asyncio.Event)
    answers: list[tuple[str, int, list[tuple[str, str]], bytes]] = field(default_factory=list)
    stream: FakeStream | None = None
    whole_reads: int = 0

    async def __call__(self) -> bytes:
        self.whole_reads += 1
        return b"".join(self.chunks)

    def __aiter__(self) -> Any:
        async def chunks() -> Any:
            for chunk in self.chunks:
                yield chunk

        return chunks()

    async def client_disconnect(self) -> None:
        await self.disconnected.wait()

    def response_bytes(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.answers.append(("bytes", status, headers, body))

    def response_empty(self, status: int, headers: list[tuple[str, str]]) -> None:
        self.answers.append(("empty", status, headers, b""))

    def response_stream(self, status: int, headers: list[tuple[str, str]]) -> FakeStream:
        self.answers.append(("stream", status, headers, b""))
        self.stream = FakeStream()
        return self.stream


def scope_with(*headers: tuple[str, str], **fields: Any) -> FakeScope:
    return FakeScope(headers=FakeHeaders(list(headers)), **fields)


def test_the_asgi_scope_carries_what_the_proxy_reads() -> None:
    scope = asgi_scope_of(
        scope_with(
            ("content-type", "application/json"),
            ("authorization", "Bearer x"),
            query_string="a=1",
            method="GET",
            path="/v1/models",
            client="[::1]:4000",
        )
    )
    assert scope["type"] == "http" and scope["method"] == "GET" and scope["path"] == "/v1/models"
    assert scope["query_string"] == b"a=1"
    assert scope["headers"] == [(b"content-type", b"application/json"), (b"authorization", b"Bearer x")]
    assert scope["client"] == ("[::1]", 4000) and scope["server"] == ("127.0.0.1", 8000)
    assert asgi_scope_of(scope_with())["query_string"] == b""
    assert asgi_scope_of(scope_with(client="unix-socket"))["client"] is None


class Recorder:
    """An ASGI app recording what it received, answering with ``answer`` messages."""

    def __init__(self, *answer: dict[str, Any], reads: int = 1, wait_for_disconnect: bool = False):
        self.answer = answer
        self.reads = reads
        self.wait_for_disconnect = wait_for_disconnect
        self.received: list[dict[str, Any]] = []
        self.opened = self.closed = False

    async def open(self) -> None:
        self.opened = True

    async def close(self) -> None:
        self.closed = True

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        message = await receive()
        self.received.append(message)
        while message.get("more_body"):
            message = await receive()
            self.received.append(message)
        for message in self.answer:
            await send(message)
        if self.wait_for_disconnect:
            self.received.append(await receive())


START = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"application/json"), (b"x-cache", b"HIT")],
}


def test_a_declared_body_within_the_limit_is_read_whole_and_a_whole_answer_is_one_call() -> None:
    app = Recorder(START, {"type": "http.response.body", "body": b"{}"})
    protocol = FakeProtocol(chunks=[b'{"a":', b"1}"])
    adapter = RsgiAdapter(app, whole_body_max_bytes=100)
    asyncio.run(adapter.__rsgi__(scope_with(("content-length", "7")), protocol))
    assert app.received == [{"type": "http.request", "body": b'{"a":1}', "more_body": False}]
    assert protocol.whole_reads == 1
    assert protocol.answers == [("bytes", 200, [("content-type", "application/json"), ("x-cache", "HIT")], b"{}")]


@pytest.mark.parametrize("headers", [(), (("content-length", "5000"),), (("content-length", "x"),)])
def test_chunked_or_oversized_bodies_arrive_chunk_by_chunk(headers: tuple[tuple[str, str], ...]) -> None:
    app = Recorder(START, {"type": "http.response.body", "body": b"{}"})
    protocol = FakeProtocol(chunks=[b"ab", b"cd"])
    asyncio.run(RsgiAdapter(app, whole_body_max_bytes=100).__rsgi__(scope_with(*headers), protocol))
    assert [message["body"] for message in app.received] == [b"ab", b"cd", b""]
    assert [message["more_body"] for message in app.received] == [True, True, False]
    assert protocol.whole_reads == 0


def test_an_answer_in_parts_is_streamed_and_a_client_that_left_is_not_an_error() -> None:
    parts = [
        {"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True},
        {"type": "http.response.body", "body": b"data: 2\n\n", "more_body": True},
        {"type": "http.response.body", "body": b"", "more_body": False},
    ]
    app = Recorder(START, *parts)
    protocol = FakeProtocol(chunks=[b"{}"])
    asyncio.run(RsgiAdapter(app, whole_body_max_bytes=100).__rsgi__(scope_with(("content-length", "2")), protocol))
    assert [answer[0] for answer in protocol.answers] == ["stream"]
    assert protocol.stream is not None and protocol.stream.sent == [b"data: 1\n\n", b"data: 2\n\n"]

    class LeavingProtocol(FakeProtocol):
        def response_stream(self, status: int, headers: list[tuple[str, str]]) -> FakeStream:
            stream = super().response_stream(status, headers)
            stream.closed = True
            return stream

    leaving = LeavingProtocol(chunks=[b"{}"])
    asyncio.run(
        RsgiAdapter(Recorder(START, *parts), whole_body_max_bytes=100).__rsgi__(
            scope_with(("content-length", "2")), leaving
        )
    )
    assert leaving.stream is not None and leaving.stream.sent == []


def test_after_the_body_receive_waits_for_the_client_to_leave() -> None:
    app = Recorder(START, {"type": "http.response.body", "body": b"{}"}, wait_for_disconnect=True)
    protocol = FakeProtocol(chunks=[b"{}"])

    async def scenario() -> None:
        serving = asyncio.ensure_future(
            RsgiAdapter(app, whole_body_max_bytes=100).__rsgi__(scope_with(("content-length", "2")), protocol)
        )
        await asyncio.sleep(0.05)
        assert not serving.done()  # still waiting: the client is there
        protocol.disconnected.set()
        await asyncio.wait_for(serving, 1)

    asyncio.run(scenario())
    assert app.received[-1] == {"type": "http.disconnect"}


def test_an_app_that_never_answers_gets_a_500_and_the_lifespan_opens_and_closes() -> None:
    app = Recorder()
    protocol = FakeProtocol(chunks=[b""])
    adapter = RsgiAdapter(app, whole_body_max_bytes=100)
    loop = asyncio.new_event_loop()
    try:
        adapter.__rsgi_init__(loop)
        loop.run_until_complete(adapter.__rsgi__(scope_with(("content-length", "0")), protocol))
        adapter.__rsgi_del__(loop)
    finally:
        loop.close()
    assert app.opened and app.closed
    assert protocol.answers == [("empty", 500, [], b"")]


def test_granian_rsgi_workers_build_the_proxy_with_its_body_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    config = ProxyConfig(upstream_url="http://u", redis_url="redis://r", max_body_bytes=321)
    monkeypatch.setenv(SETTINGS_ENVIRONMENT_VARIABLE, settings_to_environment(config))
    adapter = rsgi_app_from_environment()
    assert adapter.app.config == config and adapter.whole_body_max_bytes == 321
