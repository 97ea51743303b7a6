"""Headers leave with the first body bytes: the ASGI middleware and the naive server's chunks."""

from __future__ import annotations

import asyncio
from typing import Any

from lab.backends import get_backend
from lab.settings import get_settings
from services.first_chunk import HeadersWithFirstChunk


def _run(app: Any, scope: dict[str, Any] | None = None) -> list[tuple[str, dict[str, Any]]]:
    """Run ``app`` behind the middleware; the log holds what reached the server and the app's steps."""
    log: list[tuple[str, dict[str, Any]]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        log.append(("sent", message))

    async def main() -> None:
        await HeadersWithFirstChunk(lambda s, r, snd: app(s, r, snd, log))(scope or {"type": "http"}, receive, send)

    asyncio.run(main())
    return log


async def _streaming_app(scope: Any, receive: Any, send: Any, log: list) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    log.append(("app", {"step": "headers sent, computing the first token"}))
    await send({"type": "http.response.body", "body": b"", "more_body": True})  # an empty write
    log.append(("app", {"step": "first token"}))
    await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
    await send({"type": "http.response.body", "body": b"data: 2\n\n", "more_body": False})


def test_headers_are_held_until_the_first_non_empty_body() -> None:
    log = _run(_streaming_app)
    kinds = [entry[1].get("type") or entry[1]["step"] for entry in log]
    assert kinds == [
        "headers sent, computing the first token",
        "first token",
        "http.response.start",
        "http.response.body",
        "http.response.body",
    ]
    assert log[3][1]["body"] == b"data: 1\n\n"


def test_an_empty_answer_still_gets_its_headers() -> None:
    async def empty(scope: Any, receive: Any, send: Any, log: list) -> None:
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    log = _run(empty)
    assert [message["type"] for _, message in log] == ["http.response.start", "http.response.body"]


def test_other_scopes_pass_through() -> None:
    async def lifespan(scope: Any, receive: Any, send: Any, log: list) -> None:
        await send({"type": "lifespan.startup.complete"})

    assert _run(lifespan, {"type": "lifespan"}) == [("sent", {"type": "lifespan.startup.complete"})]


def test_vllm_is_launched_with_the_middleware() -> None:
    backend = get_backend("vllm")
    launch = backend.launch(model="m", options=backend.default_options(), settings=get_settings())
    index = launch.argv.index("--middleware")
    assert launch.argv[index + 1] == "services.first_chunk.HeadersWithFirstChunk"


def test_llamacpp_is_launched_behind_the_middleware(tmp_path: Any) -> None:
    backend = get_backend("llamacpp")
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert backend.options_model is not None
    options = backend.options_model(gguf_path=str(gguf))
    try:
        launch = backend.launch(model="m", options=options, settings=get_settings())
    except ValueError:  # llama-cpp-python not installed here
        return
    assert launch.argv[1:4] == ["-m", "services.first_chunk", "llama_cpp.server"]
