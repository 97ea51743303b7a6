"""The naive server's HTTP side: a FastAPI app over one :class:`NaiveEngine`.

:func:`build_app` is the pure factory; the routes read the engine and the body limit from
``app.state``. A client that leaves while its request waits for the lock is dropped
without generating; one that leaves mid-generation stops it at the next token.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Receive, Scope, Send

from services.first_chunk import HeadersWithFirstChunk
from services.naive_server.engine import Finished, GenerationJob, NaiveEngine, PreparedRequest, TextDelta
from services.naive_server.errors import ERROR_TYPE_BY_STATUS, GenerationFailed, OpenAIError
from services.openai_protocol import (
    SSE_DONE,
    AssistantMessage,
    ChatCompletionChoice,
    ChatCompletionChunk,
    ChatCompletionChunkChoice,
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionChoice,
    CompletionRequest,
    CompletionResponse,
    DeltaMessage,
    FinishReason,
    GenerationRequest,
    ModelCard,
    ModelList,
    Usage,
    describe_validation_error,
    error_body,
    new_completion_id,
    sse_event,
)

LOGGER = logging.getLogger(__name__)

router = APIRouter()


class _JobStreamingResponse(StreamingResponse):
    """A streaming response that always runs ``on_close``, even if its body never started."""

    def __init__(self, content: AsyncIterator[str], *, on_close: Callable[[], Awaitable[None]], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._on_close()


async def _until_disconnected(request: Request) -> None:
    """Returns once the client has gone: the body is read, so the next message is the disconnect."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _start_unless_gone(
    engine: NaiveEngine, prepared: PreparedRequest, gone: asyncio.Task[Any]
) -> GenerationJob | None:
    """Wait for the generation lock, or for the client to leave first (then None: a request k6
    abandoned at the end of a test must not hold the server for a whole generation)."""
    starting = asyncio.ensure_future(engine.start(prepared))
    try:
        await asyncio.wait({starting, gone}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # the handler itself was cancelled (shutdown): hold no lock, leave no task
        gone.cancel()
        await _close_unless_started(starting)
        raise
    if starting.done():
        return starting.result()
    await _close_unless_started(starting)
    engine.metrics.record_success("abort")  # counted like vLLM's aborted requests
    return None


async def _close_unless_started(starting: asyncio.Future[Any]) -> None:
    """Cancel a pending ``engine.start``; if it got the lock meanwhile, close that job."""
    starting.cancel()
    try:
        job = await starting
    except BaseException:  # cancelled while waiting for the lock: nothing to close
        return
    await job.aclose()


async def _read_body_limited(request: Request, max_body_bytes: int) -> bytes:
    """The request body, or a 413 as soon as it (or its Content-Length) exceeds the limit."""
    too_large = OpenAIError(
        413, f"Request body too large: the limit is {max_body_bytes} bytes.", code="request_too_large"
    )
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            declared_bytes = int(declared)
        except ValueError:
            raise OpenAIError(400, "Invalid Content-Length header.") from None
        if declared_bytes > max_body_bytes:
            raise too_large
    chunks: list[bytes] = []
    received_bytes = 0
    async for chunk in request.stream():
        received_bytes += len(chunk)
        if received_bytes > max_body_bytes:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def _parse_request(body: bytes, request_type: type[GenerationRequest]) -> GenerationRequest:
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise OpenAIError(400, f"We could not parse the JSON body of your request: {error}") from None
    if not isinstance(payload, dict):
        raise OpenAIError(400, "The request body must be a JSON object.")
    try:
        return request_type.model_validate(payload)
    except ValidationError as error:
        message, param = describe_validation_error(error)
        raise OpenAIError(400, message, param=param) from None


@dataclass(frozen=True)
class _Answer:
    """Who answers and how: the id, model name and creation time every chunk repeats."""

    completion_id: str
    created: int
    model_name: str


def _stream_chat_chunks(job: GenerationJob, answer: _Answer, *, include_usage: bool) -> AsyncIterator[str]:
    completion_id, created, model_name = answer.completion_id, answer.created, answer.model_name

    def chunk(delta: DeltaMessage, finish_reason: FinishReason | None = None) -> str:
        return ChatCompletionChunk(
            id=completion_id,
            created=created,
            model=model_name,
            choices=[ChatCompletionChunkChoice(delta=delta, finish_reason=finish_reason)],
        ).to_sse()

    async def body() -> AsyncIterator[str]:
        # The role chunk goes out with the first token's chunk, never before it: a
        # client's time to first byte is then its time to first token.
        role = chunk(DeltaMessage(role="assistant", content=""))
        try:
            async for event in job.events():
                if isinstance(event, TextDelta):
                    yield role + chunk(DeltaMessage(content=event.text))
                    role = ""
                    continue
                yield role + chunk(DeltaMessage(), event.finish_reason)
                role = ""
                if include_usage:
                    yield ChatCompletionChunk(
                        id=completion_id,
                        created=created,
                        model=model_name,
                        choices=[],
                        usage=Usage.of(prompt_tokens=event.prompt_tokens, completion_tokens=event.completion_tokens),
                    ).to_sse()
            yield SSE_DONE
        except GenerationFailed as error:
            yield sse_event(error_body(str(error), error_type="server_error"))
            yield SSE_DONE
        finally:
            await job.aclose()

    return body()


def _stream_text_chunks(job: GenerationJob, answer: _Answer, *, include_usage: bool) -> AsyncIterator[str]:
    """A text completion's server-sent events: one ``text_completion`` chunk per text piece,
    the finish reason on the last, then the usage chunk when asked for, then ``[DONE]``."""

    def chunk(choices: list[CompletionChoice], usage: Usage | None = None) -> str:
        return CompletionResponse(
            id=answer.completion_id, created=answer.created, model=answer.model_name, choices=choices, usage=usage
        ).to_sse()

    async def body() -> AsyncIterator[str]:
        try:
            async for event in job.events():
                if isinstance(event, TextDelta):
                    yield chunk([CompletionChoice(text=event.text)])
                    continue
                yield chunk([CompletionChoice(text="", finish_reason=event.finish_reason)])
                if include_usage:
                    yield chunk(
                        [], Usage.of(prompt_tokens=event.prompt_tokens, completion_tokens=event.completion_tokens)
                    )
            yield SSE_DONE
        except GenerationFailed as error:
            yield sse_event(error_body(str(error), error_type="server_error"))
            yield SSE_DONE
        finally:
            await job.aclose()

    return body()


def _chat_response(answer: _Answer, finished: Finished, text: str) -> dict[str, Any]:
    return ChatCompletionResponse(
        id=answer.completion_id,
        created=answer.created,
        model=answer.model_name,
        choices=[ChatCompletionChoice(message=AssistantMessage(content=text), finish_reason=finished.finish_reason)],
        usage=Usage.of(prompt_tokens=finished.prompt_tokens, completion_tokens=finished.completion_tokens),
    ).model_dump()


def _text_response(answer: _Answer, finished: Finished, text: str) -> dict[str, Any]:
    return CompletionResponse(
        id=answer.completion_id,
        created=answer.created,
        model=answer.model_name,
        choices=[CompletionChoice(text=text, finish_reason=finished.finish_reason)],
        usage=Usage.of(prompt_tokens=finished.prompt_tokens, completion_tokens=finished.completion_tokens),
    ).model_dump()


@dataclass(frozen=True)
class _Endpoint:
    """A generating endpoint as data: its request body, how it becomes tokens, its id prefix,
    and the shapes of its streamed and whole answers."""

    request_type: type[GenerationRequest]
    prepare: Callable[[NaiveEngine, Any, float], PreparedRequest]
    id_prefix: str
    stream: Callable[..., AsyncIterator[str]]
    whole: Callable[[_Answer, Finished, str], dict[str, Any]]


CHAT_ENDPOINT = _Endpoint(ChatCompletionRequest, NaiveEngine.prepare, "chatcmpl", _stream_chat_chunks, _chat_response)
TEXT_ENDPOINT = _Endpoint(
    CompletionRequest, NaiveEngine.prepare_completion, "cmpl", _stream_text_chunks, _text_response
)


def _engine(request: Request) -> NaiveEngine:
    engine: NaiveEngine = request.app.state.engine
    return engine


@router.get("/health")
async def health(request: Request) -> JSONResponse:
    """200 once the model is loaded."""
    if not _engine(request).ready:
        raise OpenAIError(503, "The model is not loaded yet.", error_type="service_unavailable")
    return JSONResponse({"status": "ok"})


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    """Prometheus text exposition."""
    return Response(content=_engine(request).metrics.render(), media_type=CONTENT_TYPE_LATEST)


@router.get("/v1/models")
async def list_models(request: Request) -> dict[str, Any]:
    """The one served model, in OpenAI's list shape."""
    engine = _engine(request)
    card = ModelCard(id=engine.served_model_name, root=engine.model_path, max_model_len=engine.context_length_tokens)
    return ModelList(data=[card]).model_dump()


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    """OpenAI chat completion, one generation at a time."""
    return await _generate(request, CHAT_ENDPOINT)


@router.post("/v1/completions")
async def completions(request: Request) -> Response:
    """OpenAI (legacy) text completion of a prompt, no chat template; one generation at a time."""
    return await _generate(request, TEXT_ENDPOINT)


async def _generate(request: Request, endpoint: _Endpoint) -> Response:
    """Parse, check and tokenise the request, wait for the engine, answer whole or streamed."""
    arrival_s = time.perf_counter()
    engine = _engine(request)
    if not engine.ready:
        raise OpenAIError(503, "The model is not loaded yet.", error_type="service_unavailable")
    body = _parse_request(await _read_body_limited(request, request.app.state.max_body_bytes), endpoint.request_type)
    if body.model is not None and body.model not in engine.accepted_model_names:
        raise OpenAIError(
            404,
            f"The model '{body.model}' does not exist; this server serves '{engine.served_model_name}'.",
            param="model",
            code="model_not_found",
        )
    prepared = await asyncio.to_thread(endpoint.prepare, engine, body, arrival_s)
    answer = _Answer(new_completion_id(endpoint.id_prefix), int(time.time()), body.model or engine.served_model_name)
    gone = asyncio.create_task(_until_disconnected(request))
    try:
        job = await _start_unless_gone(engine, prepared, gone)
    except BaseException:
        gone.cancel()
        raise
    if job is None:
        gone.cancel()
        return Response(status_code=499)  # nginx's "client closed request": nobody reads it
    if body.stream:
        # The streaming response watches for the disconnect itself (one reader of receive()).
        gone.cancel()
        return _JobStreamingResponse(
            endpoint.stream(job, answer, include_usage=body.include_usage_in_stream()),
            on_close=job.aclose,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    gone.add_done_callback(lambda _: job.cancel())
    finished, text = await _whole_completion(job, gone)
    return JSONResponse(endpoint.whole(answer, finished, text))


async def _whole_completion(job: GenerationJob, gone: asyncio.Task[Any]) -> tuple[Finished, str]:
    """Run ``job`` to its end (a non-streamed answer); close it and stop watching ``gone``."""
    try:
        pieces: list[str] = []
        finished: Finished | None = None
        async for event in job.events():
            if isinstance(event, TextDelta):
                pieces.append(event.text)
            else:
                finished = event
    except GenerationFailed as error:
        raise OpenAIError(500, str(error), error_type="server_error") from error
    finally:
        await job.aclose()
        gone.cancel()
    assert finished is not None  # events() always ends with Finished unless it raised
    return finished, "".join(pieces)


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    engine: NaiveEngine = app.state.engine
    engine.open()
    try:
        if engine.model is None:
            await asyncio.to_thread(engine.load)
        else:  # a second lifespan of the same app (tests): the model is already loaded
            engine.ready = True
        yield
    finally:
        engine.close()


def _add_error_handlers(app: FastAPI) -> None:
    """Every error leaves in OpenAI's shape (``{"error": {...}}``) with its status."""

    @app.exception_handler(OpenAIError)
    async def _openai_error(request: Request, error: OpenAIError) -> JSONResponse:
        # The answer's reason in the service log too (the access line has only the status):
        # a run whose requests all fail shows why in the log stored with it.
        LOGGER.warning(
            "%s %s answered %d: %s",
            request.method,
            request.url.path,
            error.status_code,
            " ".join(error.message.split())[:500],
        )
        return error.to_response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        error_type = ERROR_TYPE_BY_STATUS.get(error.status_code, "invalid_request_error")
        return OpenAIError(error.status_code, str(error.detail), error_type=error_type).to_response()

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
        return OpenAIError(400, f"Invalid request: {error.errors()}").to_response()

    @app.exception_handler(Exception)
    async def _unexpected_error(request: Request, error: Exception) -> JSONResponse:
        LOGGER.exception("unexpected error")
        return OpenAIError(500, f"Internal server error: {error!r}", error_type="server_error").to_response()


def build_app(
    *, model_path: str, dtype: str = "bfloat16", max_body_bytes: int = 1_000_000, served_model_name: str | None = None
) -> FastAPI:
    """The naive server as a FastAPI app; the model loads in the app's lifespan.

    ``served_model_name`` defaults to ``model_path``; requests may name either.
    """
    app = FastAPI(title="Serving Lab naive Transformers server", lifespan=_lifespan)
    app.add_middleware(HeadersWithFirstChunk)  # headers leave with the first token's chunk
    app.state.engine = NaiveEngine(
        model_path=model_path, dtype=dtype, served_model_name=served_model_name or model_path
    )
    app.state.max_body_bytes = max_body_bytes
    _add_error_handlers(app)
    app.include_router(router)
    return app
