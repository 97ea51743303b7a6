"""The proxy under granian's own interface, RSGI, rather than ASGI.

RSGI hands the app a scope object and a protocol object, and the app answers with one call
(``response_bytes``) instead of two ASGI messages that granian translates. :class:`RsgiAdapter`
serves the proxy's one ASGI app (:class:`~services.cache_proxy.app.CacheProxy`) that way, so the
cache's rules stay written once: each request gets an ASGI ``receive``/``send`` pair backed by
the RSGI protocol (:class:`_Exchange`).

- The body: with a declared ``Content-Length`` within the app's limit it is read whole, in one
  message; any other body (chunked, or one the app refuses and then drains) arrives chunk by
  chunk, so the app's size limit and deadline apply as it comes.
- After the body, ``receive`` waits for the client to leave (``http.disconnect``), which is
  how the app cancels an upstream call nobody waits for.
- A whole answer is one ``response_bytes``; an answer in several parts (a relayed stream) is a
  response stream. Writing to a client that left is dropped silently, as under uvicorn.
"""

from __future__ import annotations

import asyncio
from typing import Any

from services.cache_proxy.bodies import declared_body_bytes
from services.cache_proxy.responses import Message, Scope


class RsgiAdapter:
    """An ASGI app (with ``open()``/``close()``, like ``CacheProxy``) served over RSGI; bodies
    declared at most ``whole_body_max_bytes`` long are read in one piece."""

    def __init__(self, app: Any, *, whole_body_max_bytes: int):
        self.app = app
        self.whole_body_max_bytes = whole_body_max_bytes

    def __rsgi_init__(self, loop: asyncio.AbstractEventLoop) -> None:
        # Called by granian before its loop runs: the ASGI lifespan's startup.
        loop.run_until_complete(self.app.open())

    def __rsgi_del__(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.run_until_complete(self.app.close())

    async def __rsgi__(self, scope: Any, protocol: Any) -> None:
        if scope.proto != "http":
            return
        asgi_scope = asgi_scope_of(scope)
        declared_bytes = declared_body_bytes(asgi_scope["headers"])
        exchange = _Exchange(
            protocol, whole_body=declared_bytes is not None and declared_bytes <= self.whole_body_max_bytes
        )
        await self.app(asgi_scope, exchange.receive, exchange.send)
        exchange.finish()


def asgi_scope_of(scope: Any) -> Scope:
    """The ASGI ``http`` scope of an RSGI scope (header names are lower case in both)."""
    query_string = scope.query_string
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": scope.http_version,
        "method": scope.method,
        "scheme": scope.scheme,
        "path": scope.path,
        "query_string": query_string.encode("latin-1") if query_string else b"",
        "headers": [(name.encode("latin-1"), value.encode("latin-1")) for name, value in scope.headers.items()],
        "client": _address(scope.client),
        "server": _address(scope.server),
    }


def _address(text: str) -> tuple[str, int] | None:
    host, _, port = text.rpartition(":")
    return (host, int(port)) if host and port.isdigit() else None


class _Exchange:
    """One request's ASGI ``receive`` and ``send`` over its RSGI protocol; ``whole_body``: read
    the body in one piece (its declared length is within the app's limit)."""

    def __init__(self, protocol: Any, *, whole_body: bool):
        self.protocol = protocol
        self.whole_body = whole_body
        self._chunks: Any = None
        self._body_done = False
        self._status = 500
        self._headers: list[tuple[str, str]] = []
        self._stream: Any = None
        self._answered = False
        self._client_gone = False

    async def receive(self) -> Message:
        if self._body_done:
            await self.protocol.client_disconnect()
            return {"type": "http.disconnect"}
        if self.whole_body:
            self._body_done = True
            return {"type": "http.request", "body": await self.protocol(), "more_body": False}
        if self._chunks is None:
            self._chunks = self.protocol.__aiter__()
        try:
            chunk = await self._chunks.__anext__()
        except StopAsyncIteration:
            self._body_done = True
            return {"type": "http.request", "body": b"", "more_body": False}
        return {"type": "http.request", "body": chunk, "more_body": True}

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self._status = message["status"]
            self._headers = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in message["headers"]]
            return
        if kind != "http.response.body" or self._answered:
            return
        body = message.get("body", b"")
        more_body = message.get("more_body", False)
        if self._stream is None and not more_body:
            self._answered = True
            self.protocol.response_bytes(self._status, self._headers, body)
            return
        if self._stream is None:
            self._stream = self.protocol.response_stream(self._status, self._headers)
        if body and not self._client_gone:
            try:
                await self._stream.send_bytes(body)
            except Exception:  # RSGIProtocolClosed: the client left; uvicorn drops these writes too
                self._client_gone = True
        if not more_body:
            self._answered = True

    def finish(self) -> None:
        """Answer 500 if the app returned without answering (as ASGI servers do)."""
        if self._stream is None and not self._answered:
            self.protocol.response_empty(500, [])
