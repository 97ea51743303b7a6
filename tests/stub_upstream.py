"""A tiny OpenAI-compatible upstream for the cache proxy's error cases and benchmarks.

It answers ``POST /v1/chat/completions`` and ``/v1/completions`` at once from memory,
counts the calls it got, and misbehaves on request through headers (headers, not body
fields, so a misbehaving request has the same cache key as a normal one):

- ``x-stub-status: N``       answer status N with an error body
- ``x-stub-delay-s: F``      wait F seconds before answering
- ``x-stub-no-choices: 1``   answer 200 with an empty ``choices`` list
- ``x-stub-break-stream: 1`` (stream) send a few chunks, then drop the connection
- ``x-stub-no-done: 1``      (stream) end cleanly but without ``data: [DONE]``
- ``x-stub-chunk-delay-s: F`` (stream) wait F seconds between chunks
- ``x-stub-first-chunk-delay-s: F`` (stream) send the headers at once, the first chunk F
  seconds later (as vLLM does while its first token is computed)
- ``x-stub-response-header: Name: value`` add that header to the answer (``Retry-After``,
  ``Cache-Control: no-store``, ``Set-Cookie``, ...)
- ``x-stub-word-delay-s: F`` (plain answers) "generate" one word every F seconds, and stop
  as soon as the client leaves, as a model server does

Started with ``--api-keys K1,K2``, it checks credentials like a real hosted API: a
request must carry one known key (``Authorization: Bearer K``, ``api-key: K`` or
``x-api-key: K``; :func:`credential_of`) or gets 401, and every answer names the key it
was produced for in ``system_fingerprint`` (``key-<index>``, never the key itself).

Each answer names its call number (``stub answer #N``), so a second real generation is
told apart from a replay. ``GET /stub/calls`` returns ``{"completions": N, "tokens": T,
"abandoned": A}``: the words generated (a stream's chunks, the words of a
``x-stub-word-delay-s`` answer) and the generations stopped because the client left;
``POST /stub/reset`` zeroes them.

Run: ``python -m tests.stub_upstream --port N [--api-keys K1,K2]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

STUB_MODEL = "stub-model"


class _Counter:
    completions = 0
    tokens = 0
    abandoned = 0


async def _until_disconnected(request: Request) -> None:
    """Return once the client has gone (the body is read, so the next message says so)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _generate_slowly(request: Request, words: list[str], word_delay_s: float) -> bool:
    """Count one word every ``word_delay_s``; False (abandoned) when the client left first."""
    gone = asyncio.ensure_future(_until_disconnected(request))
    try:
        for _ in words:
            await asyncio.wait({gone}, timeout=word_delay_s)
            if gone.done():
                _Counter.abandoned += 1
                return False
            _Counter.tokens += 1
        return True
    finally:
        gone.cancel()


def _json_response(document: Any, status_code: int = 200) -> Response:
    # ASCII-escaped, so a lone surrogate echoed from a prompt cannot break the encoding.
    return Response(json.dumps(document).encode(), status_code=status_code, media_type="application/json")


def _header_number(headers: Mapping[str, str], name: str, default: float) -> float:
    try:
        return float(headers.get(name, default))
    except ValueError:
        return default


def credential_of(headers: Mapping[str, str]) -> str | None:
    """The API key a request carries, the way the stub reads it (first of Authorization
    Bearer, api-key, x-api-key); None without any."""
    authorization = headers.get("authorization")
    if authorization is not None:
        scheme, _, token = authorization.partition(" ")
        return token.strip() if scheme.lower() == "bearer" else authorization
    return headers.get("api-key", headers.get("x-api-key"))


def fingerprint_of_key(api_keys: tuple[str, ...], key: str) -> str:
    """The ``system_fingerprint`` of answers produced for ``key``."""
    return f"key-{api_keys.index(key)}"


def _prompt_of(body: dict[str, Any]) -> str:
    messages = body.get("messages")
    if isinstance(messages, list) and messages:
        last = messages[-1]
        if isinstance(last, dict):
            return str(last.get("content", ""))
    return str(body.get("prompt", ""))


def _answer_words(call_number: int, body: dict[str, Any]) -> tuple[list[str], str]:
    words = f"stub answer #{call_number} to: {_prompt_of(body)}".split(" ")
    max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
    if isinstance(max_tokens, int) and max_tokens < len(words):
        return words[:max_tokens], "length"
    return words, "stop"


def _usage(body: dict[str, Any], completion_tokens: int) -> dict[str, int]:
    prompt_tokens = len(_prompt_of(body).split())
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _extra_headers(headers: Mapping[str, str]) -> dict[str, str]:
    name, separator, value = headers.get("x-stub-response-header", "").partition(":")
    return {name.strip(): value.strip()} if separator else {}


async def _completions(request: Request) -> Response:
    response = await _answer(request)
    response.headers.update(_extra_headers(request.headers))
    return response


@dataclass
class _Answer:
    """What every chunk of one answer repeats."""

    answer_id: str
    created: int
    model: str
    fingerprint: str | None
    is_chat: bool


def _stream_answer(
    headers: Mapping[str, str], body: dict[str, Any], words: list[str], finish_reason: str, answer: _Answer
) -> StreamingResponse:
    """The answer as an SSE stream, one word a chunk (misbehaving as the headers ask)."""
    stream_options = body.get("stream_options")
    include_usage = isinstance(stream_options, dict) and bool(stream_options.get("include_usage"))
    chunk_delay_s = _header_number(headers, "x-stub-chunk-delay-s", 0)
    first_chunk_delay_s = _header_number(headers, "x-stub-first-chunk-delay-s", 0)
    break_stream = headers.get("x-stub-break-stream") == "1"
    send_done = headers.get("x-stub-no-done") != "1"

    def event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
        document = {
            "id": answer.answer_id,
            "object": "chat.completion.chunk",
            "created": answer.created,
            "model": answer.model,
            "system_fingerprint": answer.fingerprint,
            "choices": choices,
            **extra,
        }
        return b"data: " + json.dumps(document).encode() + b"\n\n"

    async def events() -> AsyncIterator[bytes]:
        finished = False
        try:
            async for chunk in chunks():
                _Counter.tokens += 1
                yield chunk
            finished = True
        finally:
            if not finished:
                _Counter.abandoned += 1

    async def chunks() -> AsyncIterator[bytes]:
        if first_chunk_delay_s:
            await asyncio.sleep(first_chunk_delay_s)
        for index, word in enumerate(words):
            piece = word if index == 0 else " " + word
            choice: dict[str, Any] = (
                {"index": 0, "delta": {"content": piece}, "finish_reason": None}
                if answer.is_chat
                else {"index": 0, "text": piece, "finish_reason": None}
            )
            yield event([choice])
            if chunk_delay_s:
                await asyncio.sleep(chunk_delay_s)
            if break_stream and index >= 1:
                raise RuntimeError("stub: breaking the stream on purpose")
        final_choice: dict[str, Any] = (
            {"index": 0, "delta": {}, "finish_reason": finish_reason}
            if answer.is_chat
            else {"index": 0, "text": "", "finish_reason": finish_reason}
        )
        yield event([final_choice])
        if include_usage:
            yield event([], usage=_usage(body, len(words)))
        if send_done:
            yield b"data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


async def _answer(request: Request) -> Response:
    headers = request.headers
    delay_s = _header_number(headers, "x-stub-delay-s", 0)
    if delay_s:
        await asyncio.sleep(delay_s)
    _Counter.completions += 1
    call_number = _Counter.completions
    api_keys: tuple[str, ...] = request.app.state.api_keys
    fingerprint = None
    if api_keys:
        key = credential_of(headers)
        if key not in api_keys:
            return _json_response({"error": {"message": "invalid or missing API key", "type": "auth"}}, status_code=401)
        fingerprint = fingerprint_of_key(api_keys, key)
    status_code = int(_header_number(headers, "x-stub-status", 200))
    if status_code != 200:
        return _json_response(
            {"error": {"message": f"stub error {status_code}", "type": "stub"}}, status_code=status_code
        )
    try:
        body = json.loads(await request.body())
    except (ValueError, RecursionError):
        return _json_response({"error": {"message": "the body is not JSON", "type": "stub"}}, status_code=400)
    if not isinstance(body, dict):
        return _json_response({"error": {"message": "the body is not an object", "type": "stub"}}, status_code=400)
    is_chat = request.url.path.endswith("/chat/completions")
    words, finish_reason = _answer_words(call_number, body)
    created = int(time.time())
    answer_id = f"stub-{call_number}"
    model = str(body.get("model", STUB_MODEL))
    if headers.get("x-stub-no-choices") == "1":
        return _json_response(
            {
                "id": answer_id,
                "object": "chat.completion",
                "model": model,
                "choices": [],
                "system_fingerprint": fingerprint,
            }
        )
    answer = _Answer(answer_id, created, model, fingerprint, is_chat)
    if body.get("stream") is True:
        return _stream_answer(headers, body, words, finish_reason, answer)
    word_delay_s = _header_number(headers, "x-stub-word-delay-s", 0)
    if word_delay_s and not await _generate_slowly(request, words, word_delay_s):
        return Response(status_code=499)  # nobody reads it
    text = " ".join(words)
    choice = (
        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish_reason}
        if is_chat
        else {"index": 0, "text": text, "finish_reason": finish_reason}
    )
    return _json_response(
        {
            "id": answer_id,
            "object": "chat.completion" if is_chat else "text_completion",
            "created": created,
            "model": model,
            "system_fingerprint": fingerprint,
            "choices": [choice],
            "usage": _usage(body, len(words)),
        }
    )


async def _health(request: Request) -> Response:
    return _json_response({"status": "ok"})


async def _models(request: Request) -> Response:
    return _json_response({"object": "list", "data": [{"id": STUB_MODEL, "object": "model"}]})


async def _calls(request: Request) -> Response:
    return _json_response(
        {"completions": _Counter.completions, "tokens": _Counter.tokens, "abandoned": _Counter.abandoned}
    )


async def _reset(request: Request) -> Response:
    _Counter.completions = _Counter.tokens = _Counter.abandoned = 0
    return _json_response({"completions": 0, "tokens": 0, "abandoned": 0})


def build_app(*, api_keys: tuple[str, ...] = ()) -> Starlette:
    """The stub upstream app (its call counter lives in the process); with ``api_keys``,
    completions need one of them."""
    app = Starlette(
        routes=[
            Route("/v1/chat/completions", _completions, methods=["POST"]),
            Route("/v1/completions", _completions, methods=["POST"]),
            Route("/v1/models", _models, methods=["GET"]),
            Route("/health", _health, methods=["GET"]),
            Route("/stub/calls", _calls, methods=["GET"]),
            Route("/stub/reset", _reset, methods=["POST"]),
        ]
    )
    app.state.api_keys = api_keys
    return app


def main() -> None:
    """Serve the stub on 127.0.0.1:--port."""
    import uvicorn

    parser = argparse.ArgumentParser(prog="python -m tests.stub_upstream")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--api-keys", default="", help="comma-separated keys; completions then need one")
    args = parser.parse_args()
    api_keys = tuple(key for key in args.api_keys.split(",") if key)
    uvicorn.run(build_app(api_keys=api_keys), host=args.host, port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
