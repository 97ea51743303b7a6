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

Each answer names its call number (``stub answer #N``), so a second real generation is
told apart from a replay. ``GET /stub/calls`` returns ``{"completions": N}``;
``POST /stub/reset`` zeroes it.

Run: ``python -m tests.stub_upstream --port N``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

STUB_MODEL = "stub-model"


class _Counter:
    completions = 0


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


async def _completions(request: Request) -> Response:
    headers = request.headers
    delay_s = float(headers.get("x-stub-delay-s", "0") or 0)
    if delay_s:
        await asyncio.sleep(delay_s)
    _Counter.completions += 1
    call_number = _Counter.completions
    status_code = int(headers.get("x-stub-status", "200"))
    if status_code != 200:
        return JSONResponse({"error": {"message": f"stub error {status_code}", "type": "stub"}}, status_code=status_code)
    body = json.loads(await request.body())
    is_chat = request.url.path.endswith("/chat/completions")
    words, finish_reason = _answer_words(call_number, body)
    created = int(time.time())
    answer_id = f"stub-{call_number}"
    model = body.get("model", STUB_MODEL)
    if headers.get("x-stub-no-choices") == "1":
        return JSONResponse({"id": answer_id, "object": "chat.completion", "model": model, "choices": []})
    if body.get("stream") is True:
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        chunk_delay_s = float(headers.get("x-stub-chunk-delay-s", "0") or 0)
        break_stream = headers.get("x-stub-break-stream") == "1"
        send_done = headers.get("x-stub-no-done") != "1"

        async def events() -> AsyncIterator[bytes]:
            for index, word in enumerate(words):
                piece = word if index == 0 else " " + word
                choice: dict[str, Any] = (
                    {"index": 0, "delta": {"content": piece}, "finish_reason": None}
                    if is_chat
                    else {"index": 0, "text": piece, "finish_reason": None}
                )
                chunk = {"id": answer_id, "object": "chat.completion.chunk", "created": created, "model": model,
                         "choices": [choice]}
                yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
                if chunk_delay_s:
                    await asyncio.sleep(chunk_delay_s)
                if break_stream and index >= 1:
                    raise RuntimeError("stub: breaking the stream on purpose")
            final_choice: dict[str, Any] = (
                {"index": 0, "delta": {}, "finish_reason": finish_reason}
                if is_chat
                else {"index": 0, "text": "", "finish_reason": finish_reason}
            )
            final = {"id": answer_id, "object": "chat.completion.chunk", "created": created, "model": model,
                     "choices": [final_choice]}
            yield b"data: " + json.dumps(final).encode() + b"\n\n"
            if include_usage:
                usage_chunk = {"id": answer_id, "object": "chat.completion.chunk", "created": created, "model": model,
                               "choices": [], "usage": _usage(body, len(words))}
                yield b"data: " + json.dumps(usage_chunk).encode() + b"\n\n"
            if send_done:
                yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")
    text = " ".join(words)
    choice = (
        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish_reason}
        if is_chat
        else {"index": 0, "text": text, "finish_reason": finish_reason}
    )
    return JSONResponse(
        {"id": answer_id, "object": "chat.completion" if is_chat else "text_completion", "created": created,
         "model": model, "choices": [choice], "usage": _usage(body, len(words))}
    )


async def _health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def _models(request: Request) -> Response:
    return JSONResponse({"object": "list", "data": [{"id": STUB_MODEL, "object": "model"}]})


async def _calls(request: Request) -> Response:
    return JSONResponse({"completions": _Counter.completions})


async def _reset(request: Request) -> Response:
    _Counter.completions = 0
    return JSONResponse({"completions": 0})


def build_app() -> Starlette:
    """The stub upstream app (its call counter lives in the process)."""
    return Starlette(
        routes=[
            Route("/v1/chat/completions", _completions, methods=["POST"]),
            Route("/v1/completions", _completions, methods=["POST"]),
            Route("/v1/models", _models, methods=["GET"]),
            Route("/health", _health, methods=["GET"]),
            Route("/stub/calls", _calls, methods=["GET"]),
            Route("/stub/reset", _reset, methods=["POST"]),
        ]
    )


def main() -> None:
    """Serve the stub on 127.0.0.1:--port."""
    import uvicorn

    parser = argparse.ArgumentParser(prog="python -m tests.stub_upstream")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(build_app(), host=args.host, port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
