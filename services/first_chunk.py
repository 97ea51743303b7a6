"""ASGI middleware: send a response's headers together with its first body bytes.

uvicorn writes the status line and headers as soon as an app sends
``http.response.start``. A streaming chat endpoint (vLLM's, llama.cpp's, Starlette's
``StreamingResponse``) sends it before the first token exists, so a client's time to
first byte (k6's ``http_req_waiting``) would measure time to headers, not time to first
token. Holding ``http.response.start`` until the first non-empty body message makes the
first byte arrive with the first chunk; a whole (non-streamed) answer is unaffected, as
its body follows its headers at once.

vLLM loads it with ``--middleware services.first_chunk.HeadersWithFirstChunk``.
"""

from __future__ import annotations

from typing import Any

Scope = dict[str, Any]
Message = dict[str, Any]


class HeadersWithFirstChunk:
    """Hold ``http.response.start`` until the body's first bytes (or its end)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        held: Message | None = None

        async def send_with_first_chunk(message: Message) -> None:
            nonlocal held
            kind = message.get("type")
            if kind == "http.response.start":
                held = message
                return
            if held is not None and kind == "http.response.body":
                if not message.get("body") and message.get("more_body", False):
                    return  # an empty keep-alive write: nothing a client could time yet
                start, held = held, None
                await send(start)
            await send(message)

        await self.app(scope, receive, send_with_first_chunk)


def run_llama_cpp_server(argv: list[str]) -> None:
    """``python -m llama_cpp.server ARGS`` with its app behind :class:`HeadersWithFirstChunk`
    (llama-cpp-python's server takes no middleware option; its ``__main__`` imports
    ``create_app`` by name, so the wrapped factory must be in place before it runs)."""
    import runpy
    import sys

    import llama_cpp.server.app as llama_app

    create_app = llama_app.create_app

    def create_wrapped_app(*args: Any, **kwargs: Any) -> Any:
        app = create_app(*args, **kwargs)
        app.add_middleware(HeadersWithFirstChunk)
        return app

    llama_app.create_app = create_wrapped_app
    sys.argv = ["llama_cpp.server", *argv]
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] != ["llama_cpp.server"]:
        raise SystemExit("usage: python -m services.first_chunk llama_cpp.server [its arguments]")
    run_llama_cpp_server(sys.argv[2:])
