"""What the semantic tier compares, pure (unit-tested without a model or a network).

A request is split in two: the text that is embedded and compared by meaning, and everything
else, which must match exactly. "Everything else" is the request's exact cache key
(:func:`services.cache_proxy.keys.cache_key`: model, sampling settings, max tokens, tools, the
upstream, the path, the namespace and, under ``--credentials per-credential``, the requester's
HMAC) computed over the body with the embedded text replaced by a marker: the *group* key. A
stored answer is served for a paraphrase only from the same group.

What is embedded (:data:`EMBED_SCOPES`):

- ``last_user_turn``: the content of the conversation's last user message; every earlier
  message, the system prompt included, is part of the group, so it must match exactly.
- ``conversation``: every message as ``role: content`` lines; only the other fields group.

A completions request embeds its ``prompt`` (a string) either way. A request whose text is
not plain text (a content part that is not text, a list of prompts) gets no semantic key: the
exact tier alone answers it.

A stored vector lives in Redis beside its entry (:func:`vector_key`) as one value
(:func:`encode_vector_record`): a JSON header line (group, entry key, model, dimensions) and
the float32 bytes, written with the entry's TTL so both expire together.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from services.cache_proxy.keys import cache_key, key_prefix
from services.cache_proxy.policy import summarize_sse

EMBED_SCOPES = ("last_user_turn", "conversation")
# Stands in for the embedded text in the group key.
EMBEDDED_TEXT_MARKER = "\x00semantic-cache:embedded-text\x00"
VECTOR_RECORD_VERSION = 1


class SemanticRequest(NamedTuple):
    """A request as the semantic tier sees it: its group key and the text it embeds."""

    group: str
    text: str


def content_text(content: Any) -> str | None:
    """A message content as plain text: a string, or a list of text parts joined; None for
    anything else (an image part, a number)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content:
        texts = [part.get("text") for part in content if isinstance(part, dict) and part.get("type") == "text"]
        strings = [text for text in texts if isinstance(text, str)]
        if len(strings) == len(content):
            return "\n".join(strings)
    return None


def _split_chat(messages: list[Any], embed: str) -> tuple[str, Any] | None:
    """(embedded text, messages with that text replaced) of a chat request, or None."""
    if not messages or not all(isinstance(message, dict) for message in messages):
        return None
    if embed == "conversation":
        lines = []
        for message in messages:
            text = content_text(message.get("content"))
            if text is None:
                return None
            lines.append(f"{message.get('role')}: {text}")
        return "\n".join(lines), EMBEDDED_TEXT_MARKER
    users = [index for index, message in enumerate(messages) if message.get("role") == "user"]
    last_user = users[-1] if users else None
    if last_user is None:
        return None
    text = content_text(messages[last_user].get("content"))
    if text is None:
        return None
    replaced = [dict(message) for message in messages]
    replaced[last_user]["content"] = EMBEDDED_TEXT_MARKER
    return text, replaced


def semantic_request(
    body: Mapping[str, Any], *, path: str, upstream_identity: str, namespace: str, requester: str | None, embed: str
) -> SemanticRequest | None:
    """The group key and embedded text of ``body`` (see the module docstring); None when the
    request has no plain text to embed. ``embed``: one of :data:`EMBED_SCOPES`."""
    if embed not in EMBED_SCOPES:
        raise ValueError(f"embed must be one of {EMBED_SCOPES}, not {embed!r}")
    stripped = dict(body)
    if isinstance(body.get("messages"), list):
        split = _split_chat(body["messages"], embed)
        if split is None:
            return None
        text, stripped["messages"] = split
    elif isinstance(body.get("prompt"), str):
        text, stripped["prompt"] = body["prompt"], EMBEDDED_TEXT_MARKER
    else:
        return None
    if not text.strip():
        return None
    # The scope joins the path: the two scopes never share a group.
    group = cache_key(
        upstream_identity=upstream_identity,
        path=f"{path}#semantic:{embed}",
        body=stripped,
        namespace=namespace,
        requester=requester,
    )
    return SemanticRequest(group.rsplit(":", 1)[-1], text)


def vector_key(entry_key: str, namespace: str) -> str:
    """The Redis key of an entry's vector: under the namespace's prefix, so ``/cache/flush``
    removes it with the entry."""
    return key_prefix(namespace) + "vec:" + entry_key.rsplit(":", 1)[-1]


def vector_prefix(namespace: str) -> str:
    """The prefix every vector key of ``namespace`` starts with (scanned at start)."""
    return key_prefix(namespace) + "vec:"


class VectorRecord(NamedTuple):
    """A stored vector: its group, the entry it stands for, the model that made it, the vector."""

    group: str
    entry_key: str
    model: str
    vector: np.ndarray


def encode_vector_record(record: VectorRecord) -> bytes:
    """A vector record as one Redis value: a JSON header line, then the float32 bytes."""
    header = {
        "version": VECTOR_RECORD_VERSION,
        "group": record.group,
        "key": record.entry_key,
        "model": record.model,
        "dimensions": int(record.vector.shape[0]),
    }
    return json.dumps(header).encode() + b"\n" + np.asarray(record.vector, dtype=np.float32).tobytes()


def decode_vector_record(value: bytes) -> VectorRecord | None:
    """A stored vector record, or None for a value that is not one (another version, a
    truncated write, another program's value)."""
    header_bytes, newline, payload = value.partition(b"\n")
    if not newline:
        return None
    try:
        header = json.loads(header_bytes)
        dimensions = int(header["dimensions"])
        if header.get("version") != VECTOR_RECORD_VERSION or len(payload) != 4 * dimensions:
            return None
        vector = np.frombuffer(payload, dtype=np.float32)
        return VectorRecord(str(header["group"]), str(header["key"]), str(header["model"]), vector)
    except (ValueError, KeyError, TypeError):
        return None


def answer_text(payload: bytes, *, is_stream: bool) -> str | None:
    """The generated text of a stored or fresh answer (a JSON answer's first choice, or an SSE
    stream assembled); None when it holds none."""
    if is_stream:
        summary = summarize_sse(payload)
        return summary.text if summary.saw_choices else None
    try:
        document = json.loads(payload)
        choice = document["choices"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    if not isinstance(choice, dict):
        return None
    message = choice.get("message")
    text = message.get("content") if isinstance(message, dict) else choice.get("text")
    return text if isinstance(text, str) else None
