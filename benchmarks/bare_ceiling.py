"""The bare ceiling: a raw ASGI app answering every request with a fixed completion from
memory. No Redis, no upstream: what the HTTP server and k6 alone allow on this machine,
the upper bound any cache proxy's hit path is compared with.

Served as the proxy is (:mod:`services.cache_proxy.serving`), under ``--server uvicorn``
(with the proxy's header deadline), ``granian`` or ``granian-rsgi`` (granian's own interface);
``--plain-uvicorn`` serves it with uvicorn's defaults (httptools, uvloop, no header deadline), as the seed's proxy is.

Run: ``python -m benchmarks.bare_ceiling --port N [--server uvicorn|granian|granian-rsgi] [--plain-uvicorn]``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

FIXED_COMPLETION = json.dumps(
    {
        "id": "bare-1",
        "object": "chat.completion",
        "created": 0,
        "model": "bare",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "stub answer #1 to: Write a short story about the number 7.",
                },
                "finish_reason": "length",
            }
        ],
        "usage": {"prompt_tokens": 40, "completion_tokens": 128, "total_tokens": 168},
    },
    separators=(",", ":"),
).encode()
_HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(FIXED_COMPLETION)).encode())]
_RSGI_HEADERS = [(name.decode(), value.decode()) for name, value in _HEADERS]


async def app(
    scope: MutableMapping[str, Any],
    receive: Callable[[], Awaitable[MutableMapping[str, Any]]],
    send: Callable[[MutableMapping[str, Any]], Awaitable[None]],
) -> None:
    """Read the request body, answer the fixed completion (``/health`` included)."""
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
    message = await receive()
    while message.get("more_body", False):
        message = await receive()
    await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
    await send({"type": "http.response.body", "body": FIXED_COMPLETION})


async def rsgi_app(scope: Any, protocol: Any) -> None:
    """The same answer through granian's RSGI interface: read the body, answer from memory."""
    await protocol()
    protocol.response_bytes(200, _RSGI_HEADERS, FIXED_COMPLETION)


def main() -> None:
    """Serve the bare app on 127.0.0.1:--port."""
    from services.cache_proxy.serving import SERVERS, serve_granian, serve_uvicorn

    parser = argparse.ArgumentParser(prog="python -m benchmarks.bare_ceiling")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--server", choices=SERVERS, default="uvicorn")
    parser.add_argument("--plain-uvicorn", action="store_true", help="uvicorn.run with its defaults")
    args = parser.parse_args()
    if args.plain_uvicorn:
        import uvicorn

        uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    elif args.server == "uvicorn":
        serve_uvicorn(app, host=args.host, port=args.port)
    elif args.server == "granian":
        serve_granian("benchmarks.bare_ceiling:app", host=args.host, port=args.port)
    else:
        serve_granian("benchmarks.bare_ceiling:rsgi_app", host=args.host, port=args.port, interface="rsgi")


if __name__ == "__main__":
    main()
