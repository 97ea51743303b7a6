"""The proxy's side of the upstream: the forwarded request, a streamed answer relayed as it
arrives, and the whole answer that single-flight followers share.

Only misses, bypasses and pass-through paths come here; a hit never reaches the upstream.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from services.cache_proxy.policy import SseEnd
from services.cache_proxy.responses import (
    REQUEST_HEADERS_NOT_FORWARDED,
    BadRequestTarget,
    Scope,
    Send,
    UpstreamStreamBroken,
)


@dataclass
class UpstreamAnswer:
    """A whole, successful, storable upstream answer, shared with single-flight followers."""

    status_code: int
    content_type: bytes
    body: bytes


@dataclass
class RelayedStream:
    """How relaying an upstream answer went: the chunks (when recorded), whether the
    response start left with a chunk, and whether the upstream finished its answer."""

    chunks: list[bytes]
    start_sent: bool
    upstream_complete: bool


def upstream_request(http: httpx.AsyncClient, upstream_url: str, scope: Scope, raw_body: bytes) -> httpx.Request:
    """The upstream request for ``scope``: same method, raw path and query, body, and
    the headers minus hop-by-hop ones. Raises :class:`BadRequestTarget` when the target
    is no URL httpx can send."""
    # The raw path, not the decoded one: "/a%3Fb" must not become a query upstream.
    raw_path = scope.get("raw_path") or scope["path"].encode("utf-8")
    query = scope.get("query_string") or b""
    target = upstream_url + raw_path.decode("latin-1") + (("?" + query.decode("latin-1")) if query else "")
    headers = [(name, value) for name, value in scope["headers"] if name not in REQUEST_HEADERS_NOT_FORWARDED]
    try:
        return http.build_request(scope["method"], target, content=raw_body, headers=headers)
    except (httpx.InvalidURL, httpx.UnsupportedProtocol, ValueError, UnicodeError) as error:
        raise BadRequestTarget(f"the request cannot be forwarded: {error}") from error


async def relay_stream(
    response: httpx.Response,
    send: Send,
    start: dict[str, Any],
    *,
    record: bool,
    before_last_event: Callable[[list[bytes]], Awaitable[None]] | None = None,
) -> RelayedStream:
    """Send the upstream's chunks to the client as they arrive, ``start`` with the first.

    With ``record``, the chunks are kept; ``before_last_event`` (with ``record``) is awaited
    with the chunks so far, the last included, before the chunk that completes the stream's
    ``data: [DONE]`` event is sent: a client that closes the moment it reads ``[DONE]`` (the
    OpenAI SDK does) cannot leave before the answer is stored, and the upstream's own end
    (which may come later, or never once the client has gone) is not waited for.

    Raises ``httpx.HTTPError`` when the upstream failed before anything was sent (the
    caller answers 502/504), :class:`UpstreamStreamBroken` when it failed part-way. A
    client that left is the caller's business: it cancels this (or, while single-flight
    followers wait for the answer, makes ``send`` drop what the client would have got).
    The caller closes ``response``.
    """
    chunks: list[bytes] = []
    start_sent = False
    sse_end = SseEnd() if record and before_last_event is not None else None
    try:
        async for chunk in response.aiter_bytes():
            if record:
                chunks.append(chunk)
            if sse_end is not None and sse_end.feed(chunk):
                assert before_last_event is not None
                sse_end = None
                await before_last_event(chunks)
            if not start_sent:
                await send(start)
                start_sent = True
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    except httpx.HTTPError as error:
        if not start_sent:
            raise
        raise UpstreamStreamBroken(f"upstream stream broke: {error!r}") from error
    return RelayedStream(chunks, start_sent, upstream_complete=True)
