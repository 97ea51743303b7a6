"""The naive server's engine: one model, one ``generate`` at a time in a worker thread.

:class:`NaiveEngine` holds the model, its tokenizer, the one-at-a-time lock and the
metrics; :meth:`NaiveEngine.start` waits for the lock and returns a :class:`GenerationJob`
whose :meth:`~GenerationJob.events` yields text deltas as tokens arrive, then one
:class:`Finished`. Requests waiting on the lock show as ``vllm:num_requests_waiting``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from services.naive_server.detokenizer import IncrementalDetokenizer
from services.naive_server.errors import GenerationFailed, OpenAIError
from services.naive_server.metrics import NaiveServerMetrics
from services.openai_protocol import ChatCompletionRequest, CompletionRequest, FinishReason, GenerationRequest

LOGGER = logging.getLogger(__name__)

TORCH_DTYPES: dict[str, torch.dtype] = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


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


class _QueueStreamer(BaseStreamer):  # type: ignore[misc]  # transformers is not analysed: its classes are Any
    """Hands each new token from the ``generate`` thread to the event loop, with its time."""

    def __init__(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[tuple[str, Any, float]]) -> None:
        self._loop = loop
        self._queue = queue
        self._prompt_seen = False

    def _send(self, kind: str, payload: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: the server is shutting down
            self._loop.call_soon_threadsafe(self._queue.put_nowait, (kind, payload, time.perf_counter()))

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


class _CancelCriteria(StoppingCriteria):  # type: ignore[misc]  # transformers is not analysed: its classes are Any
    """Stops ``generate`` at the next token once its event is set (stop string, disconnect)."""

    def __init__(self, event: threading.Event) -> None:
        self._event = event

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return torch.full((input_ids.shape[0],), self._event.is_set(), dtype=torch.bool, device=input_ids.device)


class GenerationJob:
    """One running ``generate``: it holds the engine's lock until :meth:`aclose`."""

    def __init__(self, engine: NaiveEngine, prepared: PreparedRequest) -> None:
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
                metrics.time_per_output_token_s.observe((previous_token_s - first_token_s) / (completion_tokens - 1))
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
            getattr(config, "max_position_embeddings", None) or getattr(tokenizer, "model_max_length", None) or 2048
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
            self.model_path,
            self.dtype,
            self.context_length_tokens,
            time.perf_counter() - started_s,
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
        return self._within_budget(
            request, input_ids, encoded.get("attention_mask", torch.ones_like(input_ids)), arrival_s, "messages"
        )

    def prepare_completion(self, request: CompletionRequest, arrival_s: float) -> PreparedRequest:
        """Tokenise the prompt as it is (no chat template; token ids are taken as given) and
        check the token budget (raises :class:`OpenAIError`)."""
        prompt = request.prompt
        if isinstance(prompt, str):
            encoded = self.tokenizer(prompt, return_tensors="pt")
            input_ids = encoded["input_ids"]
            if input_ids.shape[1] == 0:
                raise OpenAIError(400, "The prompt holds no token.", param="prompt")
        else:
            vocabulary_size = int(self.model.get_input_embeddings().num_embeddings)
            if any(not 0 <= token < vocabulary_size for token in prompt):
                raise OpenAIError(
                    400, f"Token ids in the prompt must be from 0 to {vocabulary_size - 1}.", param="prompt"
                )
            input_ids = torch.tensor([prompt], dtype=torch.long)
        return self._within_budget(request, input_ids, torch.ones_like(input_ids), arrival_s, "prompt")

    def _within_budget(
        self,
        request: GenerationRequest,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        arrival_s: float,
        prompt_param: str,
    ) -> PreparedRequest:
        """The prepared request, once prompt and budget fit the context (else a 400 naming
        ``prompt_param``, the field that holds the prompt)."""
        prompt_tokens = int(input_ids.shape[1])
        context = self.context_length_tokens
        requested = request.requested_max_tokens()
        if prompt_tokens >= context or (requested is not None and prompt_tokens + requested > context):
            asked = (
                f"you requested {prompt_tokens + (requested or 0)} tokens ({prompt_tokens} in the {prompt_param}, "
                f"{requested or 0} in the completion)"
            )
            raise OpenAIError(
                400,
                f"This model's maximum context length is {context} tokens. However, {asked}. "
                f"Please reduce the length of the {prompt_param} or completion.",
                param=prompt_param,
                code="context_length_exceeded",
            )
        max_new_tokens = (
            requested if requested is not None else min(request.default_max_tokens, context - prompt_tokens)
        )
        return PreparedRequest(
            input_ids=input_ids,
            attention_mask=attention_mask,
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
