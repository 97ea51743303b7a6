"""A tiny OpenAI-compatible stub server for testing the k6 scripts and the k6 driver.

A bare ASGI app (no framework, so it stays far faster than anything it is used to test)
that answers ``POST /v1/chat/completions`` with a fixed completion and a ``usage`` block,
``GET /health`` and ``GET /v1/models``. It counts requests server-side (``GET /stats``)
so tests can check k6's client-side counts against it.

Options: a delay per completion (``delay_s``), a record of arrivals (``record_arrivals``),
an ``X-Cache`` header (``cache_mode``:
``off`` sends none, ``hit``/``miss`` always send that value, ``by-body`` answers ``MISS``
the first time a request body is seen and ``HIT`` afterwards), an HTTP status to answer
every n-th completion with (``fail_every``), and a health status (``healthy``).
A request with ``"stream": true`` gets an SSE answer (unless ``streams=False``: one JSON
body, like a server that ignores ``stream``): one chunk per completion token,
``token_delay_s`` apart (none on a HIT), then the usage chunk and ``[DONE]``.

Run alone with ``python -m tests.stub_openai --host 127.0.0.1 --port N [--delay-s 0.05]``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn

LOOPBACK_HOST = "127.0.0.1"
COMPLETION_TEXT = "Once upon a time, the number was happy."
PROMPT_TOKENS = 40
COMPLETION_TOKENS = 128

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass
class StubStats:
    """Server-side counters of the stub (thread-safe enough: one event loop writes)."""

    completions_total: int = 0
    completions_ok: int = 0
    completions_failed: int = 0
    cache_hits: int = 0
    prompt_tokens_total: int = 0
    completion_tokens_total: int = 0
    seen_body_hashes: set[str] = field(default_factory=set)
    # (arrival time, epoch s; the request's JSON body) of each completion, when recorded.
    arrivals: list[tuple[float, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, int]:
        """The counters as a JSON-ready dict."""
        return {
            "completions_total": self.completions_total,
            "completions_ok": self.completions_ok,
            "completions_failed": self.completions_failed,
            "cache_hits": self.cache_hits,
            "prompt_tokens_total": self.prompt_tokens_total,
            "completion_tokens_total": self.completion_tokens_total,
        }


def build_app(
    *,
    delay_s: float = 0.0,
    cache_mode: str = "off",
    fail_every: int = 0,
    fail_status: int = 500,
    healthy: bool = True,
    prompt_tokens: int = PROMPT_TOKENS,
    completion_tokens: int = COMPLETION_TOKENS,
    metrics: tuple[int, str, bytes] | None = None,
    streams: bool = True,
    token_delay_s: float = 0.0,
    record_arrivals: bool = False,
) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """Build the stub ASGI app; the app's ``stats`` attribute holds its counters.

    ``metrics`` is ``GET /metrics``'s (status, content type, body); without it, a 404.
    ``record_arrivals`` keeps each completion's arrival time and body in ``stats.arrivals``.
    """
    if cache_mode not in {"off", "hit", "miss", "by-body"}:
        raise ValueError(f"unknown cache_mode {cache_mode!r}")
    stats = StubStats()

    async def respond(
        send: Send, status: int, payload: dict[str, Any], headers: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        body = json.dumps(payload).encode()
        all_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        all_headers.extend(headers or [])
        await send({"type": "http.response.start", "status": status, "headers": all_headers})
        await send({"type": "http.response.body", "body": body})

    async def read_body(receive: Receive) -> bytes:
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                return b"".join(chunks)

    async def completions(receive: Receive, send: Send) -> None:
        body = await read_body(receive)
        if record_arrivals:
            stats.arrivals.append((time.time(), json.loads(body)))
        stats.completions_total += 1
        number = stats.completions_total
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        if fail_every and number % fail_every == 0:
            stats.completions_failed += 1
            await respond(send, fail_status, {"error": {"message": "stub failure", "type": "server_error"}})
            return
        headers: list[tuple[bytes, bytes]] = []
        if cache_mode in {"hit", "miss"}:
            headers.append((b"x-cache", cache_mode.upper().encode()))
        elif cache_mode == "by-body":
            digest = hashlib.sha256(body).hexdigest()
            hit = digest in stats.seen_body_hashes
            stats.seen_body_hashes.add(digest)
            headers.append((b"x-cache", b"HIT" if hit else b"MISS"))
        if headers and headers[0][1] == b"HIT":
            stats.cache_hits += 1
        try:
            model = json.loads(body).get("model", "stub")
        except (ValueError, AttributeError):
            model = "stub"
        stats.completions_ok += 1
        stats.prompt_tokens_total += prompt_tokens
        stats.completion_tokens_total += completion_tokens
        if streams and _asks_stream(body):
            hit = bool(headers) and headers[0][1] == b"HIT"
            await stream(send, number, model, headers, 0.0 if hit else token_delay_s)
            return
        await respond(
            send,
            200,
            {
                "id": f"chatcmpl-stub-{number}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": COMPLETION_TEXT},
                        "finish_reason": "length",
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            },
            headers,
        )

    async def stream(send: Send, number: int, model: str, headers: list[tuple[bytes, bytes]], gap_s: float) -> None:
        def event(payload: dict[str, Any]) -> bytes:
            base = {
                "id": f"chatcmpl-stub-{number}",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
            }
            return b"data: " + json.dumps({**base, **payload}).encode() + b"\n\n"

        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream"), *headers],
            }
        )
        for index in range(completion_tokens):
            if index and gap_s > 0:
                await asyncio.sleep(gap_s)
            delta = {"content": "t "} if index else {"role": "assistant", "content": "t "}
            finish = "length" if index == completion_tokens - 1 else None
            chunk = event({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        await send({"type": "http.response.body", "body": event({"choices": [], "usage": usage}) + b"data: [DONE]\n\n"})

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        if method == "POST" and path == "/v1/chat/completions":
            await completions(receive, send)
        elif method == "GET" and path == "/health":
            await respond(send, 200 if healthy else 503, {"status": "ok" if healthy else "unhealthy"})
        elif method == "GET" and path == "/v1/models":
            await respond(
                send, 200 if healthy else 503, {"object": "list", "data": [{"id": "stub", "object": "model"}]}
            )
        elif method == "GET" and path == "/metrics" and metrics is not None:
            status, content_type, body = metrics
            await send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())],
                }
            )
            await send({"type": "http.response.body", "body": body})
        elif method == "GET" and path == "/stats":
            await respond(send, 200, stats.as_dict())
        else:
            await respond(send, 404, {"detail": "not found"})

    app.stats = stats  # type: ignore[attr-defined]  # the tests read the counters off the app
    return app


def _asks_stream(body: bytes) -> bool:
    try:
        return json.loads(body).get("stream") is True
    except (ValueError, AttributeError):
        return False


class StubServer:
    """Runs the stub app with uvicorn in a background thread (tests: ``with StubServer(...) as s``)."""

    def __init__(self, *, port: int, **app_options: Any) -> None:
        self.port = port
        self.app = build_app(**app_options)
        config = uvicorn.Config(
            self.app, host=LOOPBACK_HOST, port=port, log_level="warning", access_log=False, lifespan="on"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name=f"stub-openai-{port}", daemon=True)

    @property
    def url(self) -> str:
        """Base URL of the stub."""
        return f"http://{LOOPBACK_HOST}:{self.port}"

    @property
    def stats(self) -> StubStats:
        """The stub's server-side counters."""
        return self.app.stats  # type: ignore[attr-defined]  # set on the app when it is built

    def start(self, timeout_s: float = 10.0) -> StubServer:
        """Start serving; block until uvicorn is listening."""
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("stub OpenAI server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """Stop serving and join the thread."""
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> StubServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def main() -> None:
    """Command line: serve the stub on a loopback port."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default=LOOPBACK_HOST)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay-s", type=float, default=0.0)
    parser.add_argument("--cache-mode", default="off", choices=["off", "hit", "miss", "by-body"])
    parser.add_argument("--fail-every", type=int, default=0)
    args = parser.parse_args()
    if args.host != LOOPBACK_HOST:
        parser.error("the stub binds 127.0.0.1 only")
    app = build_app(delay_s=args.delay_s, cache_mode=args.cache_mode, fail_every=args.fail_every)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
