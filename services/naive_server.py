"""The naive baseline: Transformers ``generate`` behind FastAPI, one request at a time.

This is the seed experiment's hand-written server. It loads one causal LM with
``AutoModelForCausalLM`` in the app's lifespan and answers OpenAI chat completions, but it
runs a single ``generate`` at a time: requests wait on an ``asyncio.Lock`` (visible as
``vllm:num_requests_waiting``), which is exactly why its latency grows with load. The
generation itself runs in a worker thread so ``/health`` and ``/metrics`` stay responsive.

Endpoints: ``POST /v1/chat/completions`` (plain JSON or server-sent events),
``GET /v1/models``, ``GET /health`` and ``GET /metrics`` (Prometheus text, using vLLM's
metric names where the meaning is the same, so one scraper reads both servers).

Run: ``python -m services.naive_server --model models/SmolLM2-135M-Instruct --port 8000``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import prometheus_client
import torch
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Receive, Scope, Send
from transformers import AutoModelForCausalLM, AutoTokenizer, StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from services.first_chunk import HeadersWithFirstChunk
from services.openai_protocol import (
    DEFAULT_MAX_TOKENS,
    SSE_DONE,
    AssistantMessage,
    ChatCompletionChoice,
    ChatCompletionChunk,
    ChatCompletionChunkChoice,
    ChatCompletionRequest,
    ChatCompletionResponse,
    DeltaMessage,
    FinishReason,
    ModelCard,
    ModelList,
    Usage,
    describe_validation_error,
    error_body,
    new_completion_id,
    sse_event,
)

LOGGER = logging.getLogger("services.naive_server")

TORCH_DTYPES: dict[str, torch.dtype] = {
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float32": torch.float32,
}

# vLLM's own bucket boundaries, so histograms from both servers line up.
TIME_TO_FIRST_TOKEN_BUCKETS_S = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)
TIME_PER_OUTPUT_TOKEN_BUCKETS_S = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0,
)
REQUEST_LATENCY_BUCKETS_S = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
    120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)


# ---------------------------------------------------------------- errors


class OpenAIError(Exception):
    """An error answered as ``{"error": {message, type, param, code}}`` with a status."""

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        error_type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.error_type = error_type
        self.param = param
        self.code = code

    def to_response(self) -> JSONResponse:
        """The JSON response for this error."""
        return JSONResponse(
            status_code=self.status_code,
            content=error_body(self.message, error_type=self.error_type, param=self.param, code=self.code),
        )


class GenerationFailed(RuntimeError):
    """``generate`` raised in the worker thread."""


_ERROR_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    503: "service_unavailable",
}


# ---------------------------------------------------------------- metrics


class NaiveServerMetrics:
    """Prometheus metrics in a registry of their own, named and labelled like vLLM's."""

    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry()
        self.model_name = model_name
        labels = ["model_name"]

        def counter(name: str, doc: str) -> Any:
            # prometheus_client appends "_total" to counter names on exposition.
            return Counter(name, doc, labels, registry=self.registry).labels(model_name=model_name)

        def gauge(name: str, doc: str) -> Any:
            return Gauge(name, doc, labels, registry=self.registry).labels(model_name=model_name)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Any:
            return Histogram(name, doc, labels, registry=self.registry, buckets=buckets).labels(
                model_name=model_name
            )

        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        self._request_success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            ["model_name", "finished_reason"],
            registry=self.registry,
        )
        self.num_requests_running = gauge("vllm:num_requests_running", "Number of requests generating now.")
        self.num_requests_waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to generate.")
        self.time_to_first_token_s = histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds (from arrival, queueing included).",
            TIME_TO_FIRST_TOKEN_BUCKETS_S,
        )
        self.time_per_output_token_s = histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of a request's mean time per output token after the first, in seconds.",
            TIME_PER_OUTPUT_TOKEN_BUCKETS_S,
        )
        self.inter_token_latency_s = histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of the time between consecutive output tokens in seconds.",
            TIME_PER_OUTPUT_TOKEN_BUCKETS_S,
        )
        self.e2e_request_latency_s = histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of end-to-end request latency in seconds.",
            REQUEST_LATENCY_BUCKETS_S,
        )
        self.request_queue_time_s = histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent waiting for the generation lock in seconds.",
            REQUEST_LATENCY_BUCKETS_S,
        )

    def record_success(self, finished_reason: str) -> None:
        """Count one request that finished with ``finished_reason``."""
        self._request_success.labels(model_name=self.model_name, finished_reason=finished_reason).inc()

    def render(self) -> bytes:
        """The registry in Prometheus text format."""
        return generate_latest(self.registry)


# ---------------------------------------------------------------- generation


@dataclass(frozen=True)
class PreparedRequest:
    """A validated, tokenised request, ready to generate."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    prompt_tokens: int
    max_new_tokens: int
    temperature: float
    top_p: float
    seed: int | None
    stop_strings: tuple[str, ...]
    arrival_s: float


@dataclass(frozen=True)
class TextDelta:
    """New completion text."""

    text: str


@dataclass(frozen=True)
class Finished:
    """The end of a completion."""

    finish_reason: FinishReason
    prompt_tokens: int
    completion_tokens: int


class _QueueStreamer(BaseStreamer):
    """Hands each new token from the ``generate`` thread to the event loop, with its time."""

    def __init__(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[tuple[str, Any, float]]) -> None:
        self._loop = loop
        self._queue = queue
        self._prompt_seen = False

    def _send(self, kind: str, payload: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, (kind, payload, time.perf_counter()))
        except RuntimeError:  # the loop is closed: the server is shutting down
            pass

    def put(self, value: torch.Tensor) -> None:
        """Called by ``generate``: first with the prompt (skipped), then per new token."""
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        self._send("tokens", value.reshape(-1).tolist())

    def end(self) -> None:
        """Called by ``generate`` when it stops."""
        self._send("end", None)

    def fail(self, error: BaseException) -> None:
        """Report an exception raised by ``generate``."""
        self._send("error", error)


class _CancelCriteria(StoppingCriteria):
    """Stops ``generate`` at the next token once its event is set (stop string, disconnect)."""

    def __init__(self, event: threading.Event) -> None:
        self._event = event

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return torch.full((input_ids.shape[0],), self._event.is_set(), dtype=torch.bool, device=input_ids.device)


class IncrementalDetokenizer:
    """Turns a stream of token ids into text deltas, honouring stop strings.

    Each delta is the difference between decoding a short window of recent tokens with and
    without the newest ones (the approach of TGI and vLLM), so the concatenated deltas are
    stable even when a token ends in the middle of a UTF-8 character. Text that might be the
    start of a stop string is held back until it is known not to be one.
    """

    def __init__(self, tokenizer: Any, stop_strings: tuple[str, ...] = ()) -> None:
        self._tokenizer = tokenizer
        self._stop_strings = stop_strings
        self._token_ids: list[int] = []
        self._prefix_offset = 0
        self._read_offset = 0
        self._text = ""
        self._emitted_chars = 0
        self.stopped = False

    def _decode(self, token_ids: list[int]) -> str:
        return self._tokenizer.decode(token_ids, skip_special_tokens=True)

    def _decode_new_text(self, *, final: bool) -> str:
        prefix_text = self._decode(self._token_ids[self._prefix_offset : self._read_offset])
        new_text = self._decode(self._token_ids[self._prefix_offset :])
        if len(new_text) > len(prefix_text) and (final or not new_text.endswith("\ufffd")):
            self._prefix_offset = self._read_offset
            self._read_offset = len(self._token_ids)
            return new_text[len(prefix_text) :]
        return ""

    def _held_back_chars(self) -> int:
        """Length of the longest tail of the text that could begin a stop string."""
        longest = 0
        for stop in self._stop_strings:
            for length in range(min(len(stop) - 1, len(self._text)), longest, -1):
                if self._text.endswith(stop[:length]):
                    longest = length
                    break
        return longest

    def push(self, token_ids: list[int]) -> str:
        """Add tokens; return the text that can be shown now (``stopped`` turns true on a stop string)."""
        if self.stopped:
            return ""
        self._token_ids.extend(token_ids)
        self._text += self._decode_new_text(final=False)
        if self._stop_strings:
            search_from = max(0, self._emitted_chars - max(len(stop) for stop in self._stop_strings))
            hits = [index for stop in self._stop_strings if (index := self._text.find(stop, search_from)) >= 0]
            if hits:
                self.stopped = True
                return self._take(min(hits))
        return self._take(len(self._text) - self._held_back_chars())

    def flush(self) -> str:
        """The text still held back, once generation has ended without a stop string."""
        if self.stopped:
            return ""
        self._text += self._decode_new_text(final=True)
        return self._take(len(self._text))

    def _take(self, end: int) -> str:
        delta = self._text[self._emitted_chars : end]
        self._emitted_chars = max(self._emitted_chars, end)
        return delta


class GenerationJob:
    """One running ``generate``: it holds the engine's lock until :meth:`aclose`."""

    def __init__(self, engine: "NaiveEngine", prepared: PreparedRequest) -> None:
        self._engine = engine
        self._prepared = prepared
        self._queue: asyncio.Queue[tuple[str, Any, float]] = asyncio.Queue()
        self._cancel = threading.Event()
        self._closed = False
        loop = asyncio.get_running_loop()
        streamer = _QueueStreamer(loop, self._queue)
        self._future = loop.run_in_executor(
            engine.executor, engine.run_generate, prepared, streamer, _CancelCriteria(self._cancel)
        )

    async def events(self) -> AsyncIterator[TextDelta | Finished]:
        """Text deltas as tokens arrive, then one :class:`Finished`; metrics are recorded here."""
        prepared = self._prepared
        metrics = self._engine.metrics
        detokenizer = IncrementalDetokenizer(self._engine.tokenizer, prepared.stop_strings)
        completion_tokens = 0
        last_token_id: int | None = None
        first_token_s: float | None = None
        previous_token_s: float | None = None
        while True:
            kind, payload, at_s = await self._queue.get()
            if kind == "error":
                raise GenerationFailed(f"generation failed: {payload!r}") from payload
            if kind == "end":
                break
            completion_tokens += len(payload)
            last_token_id = payload[-1]
            # Counted as produced, like vLLM, so aborted requests' work shows too.
            metrics.generation_tokens.inc(len(payload))
            if first_token_s is None or previous_token_s is None:
                first_token_s = at_s
                metrics.prompt_tokens.inc(prepared.prompt_tokens)
                metrics.time_to_first_token_s.observe(at_s - prepared.arrival_s)
            else:
                metrics.inter_token_latency_s.observe(at_s - previous_token_s)
            previous_token_s = at_s
            text = detokenizer.push(payload)
            if text:
                yield TextDelta(text)
            if detokenizer.stopped:
                self._cancel.set()
                break
        tail = detokenizer.flush()
        if tail:
            yield TextDelta(tail)

        ended_on_eos = last_token_id in self._engine.eos_token_ids
        hit_max_tokens = completion_tokens >= prepared.max_new_tokens
        finish_reason: FinishReason = (
            "length" if hit_max_tokens and not ended_on_eos and not detokenizer.stopped else "stop"
        )
        if self._cancel.is_set() and not detokenizer.stopped and not hit_max_tokens and not ended_on_eos:
            metrics.record_success("abort")  # the client left (vLLM's label); not a finished answer's figures
        else:
            metrics.e2e_request_latency_s.observe(time.perf_counter() - prepared.arrival_s)
            if first_token_s is not None and previous_token_s is not None and completion_tokens > 1:
                metrics.time_per_output_token_s.observe(
                    (previous_token_s - first_token_s) / (completion_tokens - 1))
            metrics.record_success(finish_reason)
        yield Finished(finish_reason, prepared.prompt_tokens, completion_tokens)

    def cancel(self) -> None:
        """Stop generating at the next token (the client has gone); :meth:`aclose` still follows."""
        self._cancel.set()

    async def aclose(self) -> None:
        """Stop generating (if still running), wait for the thread, release the lock. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._cancel.set()
        try:
            await asyncio.shield(self._future)
        except Exception:  # already reported through events(); the lock must still go
            pass
        finally:
            self._engine.release()


class NaiveEngine:
    """The model, its tokenizer, the one-at-a-time lock and the metrics."""

    def __init__(self, *, model_path: str, dtype: str, served_model_name: str) -> None:
        if dtype not in TORCH_DTYPES:
            raise ValueError(f"dtype must be one of {sorted(TORCH_DTYPES)}, not {dtype!r}")
        self.model_path = model_path
        self.dtype = dtype
        self.served_model_name = served_model_name
        self.accepted_model_names = {served_model_name, model_path, str(Path(model_path).resolve())}
        self.metrics = NaiveServerMetrics(served_model_name)
        self.tokenizer: Any = None
        self.model: Any = None
        self.context_length_tokens = 0
        self.eos_token_ids: set[int] = set()
        # Made per serving loop in open(): a lock and an executor belong to one event loop.
        self.executor: ThreadPoolExecutor | None = None
        self._lock: asyncio.Lock | None = None
        self.ready = False

    def open(self) -> None:
        """Create the lock and the single generation thread for the running event loop."""
        self._lock = asyncio.Lock()
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="naive-generate")

    def close(self) -> None:
        """Stop accepting work; a generation still running finishes in its thread."""
        self.ready = False
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)

    def load(self) -> None:
        """Load tokenizer and model (blocking; seconds)."""
        started_s = time.perf_counter()
        tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(f"the tokenizer in {self.model_path} has no chat template")
        model = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=TORCH_DTYPES[self.dtype])
        model.eval()
        config = model.config
        self.context_length_tokens = int(
            getattr(config, "max_position_embeddings", None) or getattr(tokenizer, "model_max_length", 2048)
        )
        eos = model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if tokenizer.eos_token_id is not None:
            eos_ids.add(int(tokenizer.eos_token_id))
        self.eos_token_ids = eos_ids
        self.tokenizer = tokenizer
        self.model = model
        self.ready = True
        LOGGER.info(
            "loaded %s (%s, context %d tokens) in %.1f s",
            self.model_path, self.dtype, self.context_length_tokens, time.perf_counter() - started_s,
        )

    def prepare(self, request: ChatCompletionRequest, arrival_s: float) -> PreparedRequest:
        """Apply the chat template and check the token budget (raises :class:`OpenAIError`)."""
        messages = [{"role": message.role, "content": message.text()} for message in request.messages]
        try:
            encoded = self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, return_dict=True, return_tensors="pt"
            )
        except Exception as error:  # jinja raises for roles or orders the template refuses
            raise OpenAIError(400, f"Could not apply the chat template: {error}", param="messages") from error
        input_ids = encoded["input_ids"]
        prompt_tokens = int(input_ids.shape[1])
        context = self.context_length_tokens
        requested = request.requested_max_tokens()
        if prompt_tokens >= context or (requested is not None and prompt_tokens + requested > context):
            asked = f"you requested {prompt_tokens + (requested or 0)} tokens ({prompt_tokens} in the messages, " \
                    f"{requested or 0} in the completion)"
            raise OpenAIError(
                400,
                f"This model's maximum context length is {context} tokens. However, {asked}. "
                "Please reduce the length of the messages or completion.",
                param="messages",
                code="context_length_exceeded",
            )
        max_new_tokens = requested if requested is not None else min(DEFAULT_MAX_TOKENS, context - prompt_tokens)
        return PreparedRequest(
            input_ids=input_ids,
            attention_mask=encoded.get("attention_mask", torch.ones_like(input_ids)),
            prompt_tokens=prompt_tokens,
            max_new_tokens=max_new_tokens,
            temperature=1.0 if request.temperature is None else request.temperature,
            top_p=1.0 if request.top_p is None else request.top_p,
            seed=request.seed,
            stop_strings=tuple(request.stop_strings()),
            arrival_s=arrival_s,
        )

    async def start(self, prepared: PreparedRequest) -> GenerationJob:
        """Wait for the lock (counted as waiting), then start generating; close the job to release."""
        metrics = self.metrics
        assert self._lock is not None, "open() runs in the app's lifespan"
        metrics.num_requests_waiting.inc()
        try:
            await self._lock.acquire()
        finally:
            metrics.num_requests_waiting.dec()
        metrics.request_queue_time_s.observe(time.perf_counter() - prepared.arrival_s)
        metrics.num_requests_running.inc()
        try:
            return GenerationJob(self, prepared)
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        """Give the lock back after a job ended."""
        self.metrics.num_requests_running.dec()
        if self._lock is not None:
            self._lock.release()

    def run_generate(self, prepared: PreparedRequest, streamer: _QueueStreamer, cancel: StoppingCriteria) -> None:
        """Run ``generate`` (in the worker thread), streaming tokens to ``streamer``."""
        try:
            sampling = prepared.temperature > 0.0
            # Explicit values, so a model's own generation_config.json cannot add top-k
            # or another temperature to what the request asked for (top_k=0: off).
            sampling_options = (
                {"temperature": prepared.temperature, "top_p": prepared.top_p, "top_k": 0} if sampling else {}
            )
            pad_token_id = self.tokenizer.pad_token_id
            if pad_token_id is None:
                pad_token_id = min(self.eos_token_ids, default=0)
            if prepared.seed is not None:
                torch.manual_seed(prepared.seed)
            with torch.inference_mode():
                self.model.generate(
                    input_ids=prepared.input_ids,
                    attention_mask=prepared.attention_mask,
                    max_new_tokens=prepared.max_new_tokens,
                    do_sample=sampling,
                    **sampling_options,
                    eos_token_id=sorted(self.eos_token_ids) or None,
                    pad_token_id=pad_token_id,
                    streamer=streamer,
                    stopping_criteria=StoppingCriteriaList([cancel]),
                )
        except BaseException as error:
            LOGGER.exception("generate failed")
            streamer.fail(error)
            raise


# ---------------------------------------------------------------- HTTP


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


async def _start_unless_gone(engine: "NaiveEngine", prepared: PreparedRequest, gone: asyncio.Task) -> GenerationJob | None:
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


async def _close_unless_started(starting: asyncio.Future) -> None:
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


def _parse_chat_request(body: bytes) -> ChatCompletionRequest:
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise OpenAIError(400, f"We could not parse the JSON body of your request: {error}") from None
    if not isinstance(payload, dict):
        raise OpenAIError(400, "The request body must be a JSON object.")
    try:
        return ChatCompletionRequest.model_validate(payload)
    except ValidationError as error:
        message, param = describe_validation_error(error)
        raise OpenAIError(400, message, param=param) from None


def _stream_chunks(
    job: GenerationJob, *, completion_id: str, created: int, model_name: str, include_usage: bool
) -> AsyncIterator[str]:
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


def build_app(
    *,
    model_path: str,
    dtype: str = "bfloat16",
    max_body_bytes: int = 1_000_000,
    served_model_name: str | None = None,
) -> FastAPI:
    """The naive server as a FastAPI app; the model loads in the app's lifespan.

    ``served_model_name`` defaults to ``model_path``; requests may name either.
    """
    engine = NaiveEngine(model_path=model_path, dtype=dtype, served_model_name=served_model_name or model_path)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine.open()
        try:
            if engine.model is None:
                await asyncio.to_thread(engine.load)
            else:  # a second lifespan of the same app (tests): the model is already loaded
                engine.ready = True
            yield
        finally:
            engine.close()

    app = FastAPI(title="Serving Lab naive Transformers server", lifespan=lifespan)
    app.add_middleware(HeadersWithFirstChunk)  # headers leave with the first token's chunk
    app.state.engine = engine

    @app.exception_handler(OpenAIError)
    async def _openai_error(request: Request, error: OpenAIError) -> JSONResponse:
        return error.to_response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        error_type = _ERROR_TYPE_BY_STATUS.get(error.status_code, "invalid_request_error")
        return OpenAIError(error.status_code, str(error.detail), error_type=error_type).to_response()

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
        return OpenAIError(400, f"Invalid request: {error.errors()}").to_response()

    @app.exception_handler(Exception)
    async def _unexpected_error(request: Request, error: Exception) -> JSONResponse:
        LOGGER.exception("unexpected error")
        return OpenAIError(500, f"Internal server error: {error!r}", error_type="server_error").to_response()

    @app.get("/health")
    async def health() -> JSONResponse:
        """200 once the model is loaded."""
        if not engine.ready:
            raise OpenAIError(503, "The model is not loaded yet.", error_type="service_unavailable")
        return JSONResponse({"status": "ok"})

    @app.get("/metrics")
    async def metrics() -> Response:
        """Prometheus text exposition."""
        return Response(content=engine.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    async def list_models() -> dict[str, Any]:
        """The one served model, in OpenAI's list shape."""
        card = ModelCard(id=engine.served_model_name, root=model_path, max_model_len=engine.context_length_tokens)
        return ModelList(data=[card]).model_dump()

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        """OpenAI chat completion, one generation at a time."""
        arrival_s = time.perf_counter()
        if not engine.ready:
            raise OpenAIError(503, "The model is not loaded yet.", error_type="service_unavailable")
        chat_request = _parse_chat_request(await _read_body_limited(request, max_body_bytes))
        if chat_request.model is not None and chat_request.model not in engine.accepted_model_names:
            raise OpenAIError(
                404,
                f"The model '{chat_request.model}' does not exist; this server serves "
                f"'{engine.served_model_name}'.",
                param="model",
                code="model_not_found",
            )
        model_name = chat_request.model or engine.served_model_name
        prepared = await asyncio.to_thread(engine.prepare, chat_request, arrival_s)
        completion_id = new_completion_id()
        created = int(time.time())
        gone = asyncio.create_task(_until_disconnected(request))
        try:
            job = await _start_unless_gone(engine, prepared, gone)
        except BaseException:
            gone.cancel()
            raise
        if job is None:
            gone.cancel()
            return Response(status_code=499)  # nginx's "client closed request": nobody reads it
        if chat_request.stream:
            # The streaming response watches for the disconnect itself (one reader of receive()).
            gone.cancel()
            return _JobStreamingResponse(
                _stream_chunks(
                    job,
                    completion_id=completion_id,
                    created=created,
                    model_name=model_name,
                    include_usage=chat_request.include_usage_in_stream(),
                ),
                on_close=job.aclose,
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )

        gone.add_done_callback(lambda _: job.cancel())
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
        response = ChatCompletionResponse(
            id=completion_id,
            created=created,
            model=model_name,
            choices=[
                ChatCompletionChoice(
                    message=AssistantMessage(content="".join(pieces)), finish_reason=finished.finish_reason
                )
            ],
            usage=Usage.of(prompt_tokens=finished.prompt_tokens, completion_tokens=finished.completion_tokens),
        )
        return JSONResponse(response.model_dump())

    return app


# ---------------------------------------------------------------- CLI


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options of ``python -m services.naive_server``."""
    parser = argparse.ArgumentParser(prog="python -m services.naive_server", description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="Hugging Face model folder (or hub id available offline)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (loopback by default)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--dtype", choices=sorted(TORCH_DTYPES), default="bfloat16")
    parser.add_argument("--served-model-name", default=None, help="name clients use (default: --model)")
    parser.add_argument("--max-body-bytes", type=int, default=1_000_000)
    parser.add_argument(
        "--torch-threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)"
    )
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Serve the app with uvicorn until interrupted."""
    import uvicorn

    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # vLLM exposes no *_created series either; keeps the scrape small and comparable.
    prometheus_client.disable_created_metrics()
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    app = build_app(
        model_path=args.model,
        dtype=args.dtype,
        max_body_bytes=args.max_body_bytes,
        served_model_name=args.served_model_name,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)


if __name__ == "__main__":
    main()
