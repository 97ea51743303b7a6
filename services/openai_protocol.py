"""Pydantic models for the OpenAI chat-completions and completions protocol, as far as the lab uses it.

Shared by the naive Transformers server and the Redis cache proxy. Requests keep fields
this module does not name (``extra="allow"``), so a proxy can forward them untouched;
responses carry exactly the fields OpenAI clients and k6 scripts read.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

DEFAULT_MAX_TOKENS = 128
# OpenAI's and vLLM's default for /v1/completions: one client sees the same length on every backend.
COMPLETIONS_DEFAULT_MAX_TOKENS = 16
FinishReason = Literal["stop", "length"]


# ---------------------------------------------------------------- requests


class ChatMessage(BaseModel):
    """One message of a conversation; ``content`` may be text or OpenAI content parts."""

    model_config = ConfigDict(extra="allow")

    role: str = Field(min_length=1)
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None

    def text(self) -> str:
        """The message's text: content parts of type ``text`` joined, ``''`` for none."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(str(part.get("text", "")) for part in self.content if part.get("type", "text") == "text")


class StreamOptions(BaseModel):
    """``stream_options``: only ``include_usage`` has a meaning here."""

    model_config = ConfigDict(extra="allow")

    include_usage: bool = False


class GenerationRequest(BaseModel):
    """What both generating endpoints take: the model, the budget, sampling, stops, streaming."""

    model_config = ConfigDict(extra="allow")

    # The budget when the request names none (never past the model's context).
    default_max_tokens: ClassVar[int] = DEFAULT_MAX_TOKENS

    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(default=1, ge=1, le=1)

    @field_validator("stop")
    @classmethod
    def _stop_strings_not_empty(cls, value: str | list[str] | None) -> str | list[str] | None:
        if value is None:
            return None
        strings = [value] if isinstance(value, str) else value
        if any(not text for text in strings):
            raise ValueError("stop strings must not be empty")
        if len(strings) > 4:
            raise ValueError("at most 4 stop strings are allowed")
        return value

    def stop_strings(self) -> list[str]:
        """``stop`` as a list (empty when unset)."""
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def requested_max_tokens(self) -> int | None:
        """``max_tokens``; ``None`` when unset."""
        return self.max_tokens

    def include_usage_in_stream(self) -> bool:
        """True when a streamed answer must end with a usage chunk."""
        return bool(self.stream_options and self.stream_options.include_usage)


class ChatCompletionRequest(GenerationRequest):
    """The body of ``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)

    def requested_max_tokens(self) -> int | None:
        """``max_completion_tokens`` or else ``max_tokens``; ``None`` when neither is set."""
        if self.max_completion_tokens is not None:
            return self.max_completion_tokens
        return self.max_tokens


class CompletionRequest(GenerationRequest):
    """The body of ``POST /v1/completions``: one prompt, as text or token ids (a list of one of
    either is taken too, as the OpenAI SDK may send it); ``echo``, ``suffix``, ``logprobs`` and
    ``best_of`` only at their defaults (refused otherwise, never ignored)."""

    default_max_tokens: ClassVar[int] = COMPLETIONS_DEFAULT_MAX_TOKENS

    prompt: str | list[int]
    echo: bool = False
    suffix: str | None = None
    logprobs: int | None = None
    best_of: int | None = Field(default=None, ge=1, le=1)

    @field_validator("prompt", mode="before")
    @classmethod
    def _one_prompt(cls, value: Any) -> Any:
        """Text or token ids; a list of one of either becomes that one."""
        if isinstance(value, list) and value and isinstance(value[0], str | list):
            if len(value) != 1:
                raise ValueError("this server completes one prompt per request")
            value = value[0]
        if not value:
            raise ValueError("the prompt must not be empty")
        is_token_ids = isinstance(value, list) and all(type(token) is int for token in value)
        if not isinstance(value, str) and not is_token_ids:
            raise ValueError("the prompt must be text or a list of token ids")
        return value

    @model_validator(mode="after")
    def _only_supported_options(self) -> CompletionRequest:
        if self.echo:
            raise ValueError("echo is not supported by this server")
        if self.suffix is not None:
            raise ValueError("suffix is not supported by this server")
        if self.logprobs is not None:
            raise ValueError("logprobs are not supported by this server")
        return self


# ---------------------------------------------------------------- responses


class Usage(BaseModel):
    """Token counts of one completion."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int

    @classmethod
    def of(cls, *, prompt_tokens: int, completion_tokens: int) -> Usage:
        """Usage with ``total_tokens`` filled in."""
        return cls(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens,
        )


class AssistantMessage(BaseModel):
    """The message of a non-streamed choice."""

    role: Literal["assistant"] = "assistant"
    content: str


class ChatCompletionChoice(BaseModel):
    """One choice of a non-streamed completion."""

    index: int = 0
    message: AssistantMessage
    finish_reason: FinishReason | None
    logprobs: None = None


class ChatCompletionResponse(BaseModel):
    """A non-streamed ``chat.completion``."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatCompletionChoice]
    usage: Usage


class DeltaMessage(BaseModel):
    """What one streamed chunk adds to the message."""

    role: Literal["assistant"] | None = None
    content: str | None = None


class ChatCompletionChunkChoice(BaseModel):
    """One choice of a streamed chunk."""

    index: int = 0
    delta: DeltaMessage
    finish_reason: FinishReason | None = None
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    """A streamed ``chat.completion.chunk``; the usage chunk has ``choices == []``."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatCompletionChunkChoice]
    usage: Usage | None = None

    def to_sse(self) -> str:
        """The chunk as one server-sent event (``data: {...}\\n\\n``)."""
        exclude = {"usage"} if self.usage is None else set()
        # Deltas leave out the fields they do not set, as OpenAI's do.
        payload = self.model_dump(exclude=exclude)
        for choice in payload["choices"]:
            choice["delta"] = {key: value for key, value in choice["delta"].items() if value is not None}
        return sse_event(payload)


class CompletionChoice(BaseModel):
    """One choice of a ``text_completion``, whole or streamed (``finish_reason`` None until the last)."""

    index: int = 0
    text: str
    finish_reason: FinishReason | None = None
    logprobs: None = None


class CompletionResponse(BaseModel):
    """A ``text_completion``: the whole answer, or one streamed chunk of it (then ``usage`` is
    only on the last chunk, whose ``choices`` is ``[]``, when the request asked for it)."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None

    def to_sse(self) -> str:
        """The chunk as one server-sent event (``data: {...}\\n\\n``), without ``usage`` when unset."""
        return sse_event(self.model_dump(exclude={"usage"} if self.usage is None else set()))


class ModelCard(BaseModel):
    """One entry of ``GET /v1/models``."""

    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=lambda: int(time.time()))
    owned_by: str = "serving-lab"
    root: str | None = None
    max_model_len: int | None = None


class ModelList(BaseModel):
    """``GET /v1/models``."""

    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorDetail(BaseModel):
    """The ``error`` object of an OpenAI error response."""

    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    """``{"error": {...}}``."""

    error: ErrorDetail


# ---------------------------------------------------------------- helpers

SSE_DONE = "data: [DONE]\n\n"


def sse_event(payload: dict[str, Any]) -> str:
    """One server-sent event carrying ``payload`` as compact JSON."""
    return f"data: {json.dumps(payload, ensure_ascii=False, separators=(',', ':'))}\n\n"


def new_completion_id(prefix: str = "chatcmpl") -> str:
    """A fresh ``chatcmpl-...`` id (``cmpl`` for a text completion, as OpenAI names them)."""
    return f"{prefix}-{uuid.uuid4().hex}"


def error_body(message: str, *, error_type: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """An OpenAI-shaped error body as a plain dict."""
    return ErrorResponse(error=ErrorDetail(message=message, type=error_type, param=param, code=code)).model_dump()


def describe_validation_error(error: ValidationError) -> tuple[str, str | None]:
    """A readable message and the offending parameter for a request that failed validation."""
    first = error.errors()[0]
    location = ".".join(str(part) for part in first.get("loc", ()))
    message = first.get("msg", "invalid request")
    count = error.error_count()
    more = f" (and {count - 1} more error{'s' if count > 2 else ''})" if count > 1 else ""
    if location:
        return f"Invalid value for '{location}': {message}{more}", location
    return f"Invalid request: {message}{more}", None
