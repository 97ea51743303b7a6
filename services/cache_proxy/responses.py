"""ASGI plumbing of the proxy: reading a body, answering whole, error answers in OpenAI's
shape, the headers forwarded each way, and the stored value's layout.

Stored value layout: one tag byte for the content type, then the body as the upstream
sent it; :func:`prepared_hit` checks it and turns it into a hit's headers and body once.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import httpx

from services.cache_proxy.policy import XCache, is_cacheable_json_answer, summarize_sse

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# Request headers not forwarded upstream: hop-by-hop, recomputed, or ones that would let
# the upstream compress (we pass bytes through and store them as sent).
REQUEST_HEADERS_NOT_FORWARDED = frozenset(
    {
        b"host",
        b"content-length",
        b"connection",
        b"keep-alive",
        b"transfer-encoding",
        b"te",
        b"upgrade",
        b"proxy-connection",
        b"accept-encoding",
        b"cache-control",
    }
)
RESPONSE_HEADERS_NOT_FORWARDED = frozenset(
    {"content-length", "connection", "keep-alive", "transfer-encoding", "content-encoding", "date", "server"}
)

JSON_CONTENT_TYPE = b"application/json"
SSE_CONTENT_TYPE = b"text/event-stream"
TAG_BY_CONTENT_TYPE = {JSON_CONTENT_TYPE: b"j", SSE_CONTENT_TYPE: b"s"}
CONTENT_TYPE_BY_TAG = {ord("j"): JSON_CONTENT_TYPE, ord("s"): SSE_CONTENT_TYPE}


# A hit ready to send: its headers, its body, and whether it is an SSE stream (to be served
# only to a request that asked for a stream).
PreparedHit = tuple[list[tuple[bytes, bytes]], bytes, bool]


def prepared_hit(stored: bytes) -> PreparedHit | None:
    """The headers, body and kind of a hit on a stored value (tag byte + body), or None
    when the value is not one the proxy stores: an unknown tag, a JSON answer without
    choices, an SSE stream that did not complete (garbage, a truncated write, another
    program's value under our key)."""
    content_type = CONTENT_TYPE_BY_TAG.get(stored[0]) if stored else None
    payload = stored[1:]
    if content_type is JSON_CONTENT_TYPE:
        if not is_cacheable_json_answer(200, payload):
            return None
    elif content_type is SSE_CONTENT_TYPE:
        if not summarize_sse(payload).is_complete:
            return None
    else:
        return None
    headers = [(b"content-type", content_type), (b"content-length", b"%d" % len(payload)), (b"x-cache", b"HIT")]
    return headers, payload, content_type is SSE_CONTENT_TYPE


async def read_body(receive: Receive) -> bytes:
    """The whole request body, however many ``http.request`` messages it came in."""
    message = await receive()
    body: bytes = message.get("body", b"")
    if not message.get("more_body", False):
        return body
    chunks = [body]
    while message.get("more_body", False):
        message = await receive()
        chunks.append(message.get("body", b""))
    return b"".join(chunks)


async def send_upstream_error(send: Send, error: httpx.HTTPError, x_cache: XCache) -> None:
    """Answer 400 (the client's request cannot be forwarded as sent), 504 (upstream timed
    out) or 502 (unreachable) in OpenAI's error shape."""
    if isinstance(error, (httpx.LocalProtocolError, httpx.UnsupportedProtocol)):
        status, body = 400, error_body(f"the request cannot be forwarded as sent: {error}", "invalid_request")
    elif isinstance(error, httpx.TimeoutException):
        status, body = 504, error_body(f"upstream timed out: {error!r}", "upstream_timeout")
    else:
        status, body = 502, error_body(f"upstream unreachable: {error!r}", "upstream_unreachable")
    await send_whole(send, status, json_headers(body, x_cache), body)


async def send_bad_request(send: Send, message: str) -> None:
    """Answer 400 in OpenAI's error shape (no ``X-Cache``: nothing was proxied)."""
    body = error_body(message, "invalid_request")
    await send_whole(send, 400, json_headers(body), body)


class BadRequestTarget(ValueError):
    """The request target cannot be forwarded (``*``, an absolute or malformed URL)."""


def forwarded_response_headers(response: httpx.Response, x_cache: XCache) -> list[tuple[bytes, bytes]]:
    """The upstream's response headers (Retry-After included) minus hop-by-hop and
    recomputed ones, plus our ``X-Cache``."""
    headers = [
        (name.lower(), value)
        for name, value in response.headers.raw
        if name.lower().decode("latin-1") not in RESPONSE_HEADERS_NOT_FORWARDED and name.lower() != b"x-cache"
    ]
    headers.append((b"x-cache", x_cache.value))
    return headers


async def send_whole(send: Send, status_code: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    """Send a whole answer: its start, then its one body message."""
    await send({"type": "http.response.start", "status": status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def json_headers(
    body: bytes, x_cache: XCache | None = None, content_type: bytes = JSON_CONTENT_TYPE
) -> list[tuple[bytes, bytes]]:
    """Content type and length of a whole answer, plus ``X-Cache`` when given."""
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    if x_cache is not None:
        headers.append((b"x-cache", x_cache.value))
    return headers


def error_body(message: str, kind: str) -> bytes:
    """``{"error": {"message", "type"}}`` as JSON bytes."""
    return json.dumps({"error": {"message": message, "type": kind}}).encode()


class UpstreamStreamBroken(RuntimeError):
    """The upstream broke a stream after the response had started; the client connection
    is closed so the client sees the break too."""
