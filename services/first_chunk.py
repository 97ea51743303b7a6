"""ASGI middleware: send a response's headers together with its first body bytes.

uvicorn writes the status line and headers as soon as an app sends
``http.response.start``. A streaming chat endpoint (vLLM's, llama.cpp's, Starlette's
``StreamingResponse``) sends it before the first token exists, so a client's time to
first byte (k6's ``http_req_waiting``) would measure time to headers, not time to first
token. Holding ``http.response.start`` until the first non-empty body message makes the
first byte arrive with the first chunk; a whole (non-streamed) answer is unaffected, as
its body follows its headers at once.

vLLM loads it with ``--middleware services.first_chunk.HeadersWithFirstChunk``; a server
without such an option runs as ``python -m services.first_chunk MODULE MODULE.app:factory
ARGS`` (:func:`run_module_behind_middleware`).
"""

from __future__ import annotations

import importlib
import runpy
import sys
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


def run_module_behind_middleware(module: str, app_factory: str, argv: list[str]) -> None:
    """``python -m MODULE ARGV`` with the app its factory builds behind
    :class:`HeadersWithFirstChunk`.

    For a server that takes no middleware option (llama-cpp-python's): ``app_factory``
    (``package.module:function``) is replaced by a wrapper before ``MODULE`` runs, so its
    ``__main__`` builds the wrapped app. The caller names both (``lab/backends``); this
    package knows no backend.
    """
    factory_module_name, _, factory_name = app_factory.partition(":")
    if not factory_name:
        raise ValueError(f"app factory must be 'package.module:function', not {app_factory!r}")
    factory_module = importlib.import_module(factory_module_name)
    create_app = getattr(factory_module, factory_name)

    def create_wrapped_app(*args: Any, **kwargs: Any) -> Any:
        app = create_app(*args, **kwargs)
        app.add_middleware(HeadersWithFirstChunk)
        return app

    setattr(factory_module, factory_name, create_wrapped_app)
    sys.argv = [module, *argv]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit("usage: python -m services.first_chunk MODULE PACKAGE.MODULE:APP_FACTORY [its arguments]")
    run_module_behind_middleware(sys.argv[1], sys.argv[2], sys.argv[3:])
