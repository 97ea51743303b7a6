"""What a request and its answer say about a trace line: the answer's length in tokens and
the session the request belongs to."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

SESSION_HEADER = b"x-session-id"
SESSION_FIELD = "session_id"


def _usage_tokens(document: Any, name: str) -> int | None:
    """``usage[name]`` of an answer (``completion_tokens``, ``prompt_tokens``), None when absent."""
    if not isinstance(document, dict):
        return None
    usage = document.get("usage")
    tokens = usage.get(name) if isinstance(usage, dict) else None
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0 else None


def _chunk_text(document: dict[str, Any]) -> bool:
    """Whether a stream chunk carries generated text (one token a chunk, as vLLM sends them)."""
    for choice in document.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        if (isinstance(delta, dict) and delta.get("content")) or choice.get("text"):
            return True
    return False


@dataclass(frozen=True)
class AnswerTokens:
    """What an answer says of its request's lengths (None: it does not say)."""

    prompt: int | None
    output: int | None


def stream_tokens(answer: bytes) -> AnswerTokens:
    """The lengths an SSE answer gives: the usage a final chunk reports, else its output
    counted as the chunks carrying text."""
    counted = 0
    for line in answer.split(b"\n"):
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if not data or data == b"[DONE]":
            continue
        try:
            document = json.loads(data)
        except ValueError:
            continue
        reported = _usage_tokens(document, "completion_tokens")
        if reported is not None:
            return AnswerTokens(_usage_tokens(document, "prompt_tokens"), reported)
        if isinstance(document, dict) and _chunk_text(document):
            counted += 1
    return AnswerTokens(None, counted or None)


def answer_tokens(answer: bytes | None) -> AnswerTokens:
    """The lengths an answer gives: the upstream's ``usage``, or for a stream without one its
    output counted; None where the answer does not say (an error, no answer)."""
    if not answer:
        return AnswerTokens(None, None)
    if answer.lstrip()[:1] == b"{":
        try:
            document = json.loads(answer)
        except ValueError:
            return AnswerTokens(None, None)
        return AnswerTokens(_usage_tokens(document, "prompt_tokens"), _usage_tokens(document, "completion_tokens"))
    return stream_tokens(answer)


def asked_output_tokens(body: dict[str, Any]) -> int | None:
    """The length the request asked for (``max_completion_tokens`` or ``max_tokens``)."""
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def session_id(headers: Iterable[tuple[bytes, bytes]], body: dict[str, Any]) -> str | None:
    """The session the request names: an ``X-Session-Id`` header, else a ``session_id`` body field."""
    for name, value in headers:
        # ASGI servers send names lowercased; the length test spares every other name a lower().
        if value and (name == SESSION_HEADER or (len(name) == len(SESSION_HEADER) and name.lower() == SESSION_HEADER)):
            return value.decode("latin-1")[:200]
    found = body.get(SESSION_FIELD)
    return str(found)[:200] if isinstance(found, (str, int)) and not isinstance(found, bool) else None
