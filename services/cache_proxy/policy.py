"""The proxy's keying and storing decisions, pure (unit-tested without any network).

What a request asks of the cache (:func:`decide_cache_mode`, from its ``Cache-Control``
lines and the policy), whether an upstream answer may be stored
(:func:`response_allows_storing`, :func:`is_cacheable_json_answer`) and whether a stream
completed (:func:`summarize_sse`). The key itself is :mod:`services.cache_proxy.keys`.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from services.cache_proxy.keys import is_credential_header, is_deterministic_request

POLICIES = ("all", "deterministic")
# What happens to a request carrying credentials (see CREDENTIAL_MODES_HELP).
CREDENTIAL_MODES = ("bypass", "per-credential")
CREDENTIAL_MODES_HELP = (
    "requests carrying credentials (Authorization, Proxy-Authorization, Cookie, api-key, x-api-key, any header "
    "whose name holds auth/key/token/secret/cookie/session, or a query string): 'bypass' (default) sends them "
    "upstream uncached, so the upstream checks every credential every time; 'per-credential' caches them in a "
    "separate entry per credential, keyed by an HMAC of the credential with this proxy's secret (a revoked "
    "credential keeps getting its own cached answers until they expire). Requests without credentials, such "
    "as the lab's own load, are cached either way."
)
CACHED_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})


class CacheMode(enum.Enum):
    """What the proxy does with a cacheable-path request."""

    LOOKUP = "lookup"  # read the cache, on a miss call upstream and store
    REFRESH = "refresh"  # Cache-Control: no-cache: skip the read, call upstream, store
    BYPASS = "bypass"  # no-store, or the policy says no: neither read nor store


class BypassReason(enum.Enum):
    """Why a request on a cacheable path was neither looked up nor stored (a label of
    ``lab_cache_bypasses_total``)."""

    CREDENTIALS = "credentials"  # it carries credentials and --credentials is bypass
    NO_STORE = "no_store"  # Cache-Control: no-store
    POLICY = "policy"  # --policy deterministic and the request samples
    UNKEYABLE_BODY = "unkeyable_body"  # not a JSON object, NaN, repeated keys...
    CACHE_OFF = "cache_off"  # --cache off


def bypass_reason(cache_control: str | bytes | None) -> BypassReason:
    """Why :func:`decide_cache_mode` bypassed a request: its ``no-store``, else the policy."""
    return BypassReason.NO_STORE if "no-store" in parse_cache_control(cache_control) else BypassReason.POLICY


def credential_bypass_notice(headers: Iterable[tuple[bytes, bytes]], query_string: bytes) -> str:
    """The proxy's one log line on its first credential bypass: which credentials the request
    carried (names, never values), that every such request goes uncached, and the setting that
    caches them. The OpenAI SDKs send ``Authorization`` on every request, even with a dummy key."""
    names = sorted({name.lower().decode("latin-1") for name, _ in headers if is_credential_header(name.lower())})
    carried = " and ".join(part for part in (", ".join(names), "a query string" if query_string else "") if part)
    return (
        f"a request carrying credentials ({carried}) went upstream uncached: with --credentials bypass (the "
        "default) every request carrying credentials does, and OpenAI SDK clients send Authorization on every "
        "request. Start the proxy with --credentials per-credential to cache them, one entry per credential. "
        '(Said once; lab_cache_bypasses_total{reason="credentials"} in /metrics counts them.)'
    )


class XCache(bytes, enum.Enum):
    """Values of the ``X-Cache`` response header."""

    HIT = b"HIT"
    SEMANTIC = b"SEMANTIC"  # a paraphrase's stored answer (services.cache_proxy.semantic)
    MISS = b"MISS"
    BYPASS = b"BYPASS"
    ERROR = b"ERROR"


def parse_cache_control(value: str | bytes | None) -> frozenset[str]:
    """Directive names of a ``Cache-Control`` header, lower-case (``"no-cache, max-age=0"``
    -> ``{"no-cache", "max-age"}``)."""
    if not value:
        return frozenset()
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    return frozenset(part.split("=", 1)[0].strip().lower() for part in value.split(",") if part.strip())


def request_cache_control(headers: Iterable[tuple[bytes, bytes]]) -> bytes:
    """Every ``Cache-Control`` request header line, joined as one comma list."""
    lines = [value for name, value in headers if name == b"cache-control"]
    return lines[0] if len(lines) == 1 else b",".join(lines)


# Response directives that forbid a shared cache to store the answer (RFC 9111 5.2.2).
# Not "no-cache": SSE servers send it to stop intermediaries buffering a stream (the lab's
# naive server does), and honouring it would leave every stream uncached.
_RESPONSE_DIRECTIVES_NOT_STORED = frozenset({"no-store", "private"})


def response_allows_storing(headers: Iterable[tuple[str, str]]) -> bool:
    """False when the upstream's answer says it must not sit in a shared cache:
    ``Cache-Control`` no-store or private (any line), or a ``Set-Cookie`` (a per-user
    answer)."""
    for name, value in headers:
        lowered = name.lower()
        if lowered == "set-cookie":
            return False
        if lowered == "cache-control" and parse_cache_control(value) & _RESPONSE_DIRECTIVES_NOT_STORED:
            return False
    return True


def decide_cache_mode(*, body: Mapping[str, Any], cache_control: str | bytes | None, policy: str) -> CacheMode:
    """Decide whether a request is looked up, refreshed or bypassed.

    ``no-store`` bypasses; the ``deterministic`` policy bypasses requests that may differ
    between calls; ``no-cache`` refreshes; everything else is looked up.
    """
    directives = parse_cache_control(cache_control)
    if "no-store" in directives:
        return CacheMode.BYPASS
    if policy == "deterministic" and not is_deterministic_request(body):
        return CacheMode.BYPASS
    if "no-cache" in directives:
        return CacheMode.REFRESH
    return CacheMode.LOOKUP


def is_cacheable_json_answer(status_code: int, body: bytes) -> bool:
    """True for a 2xx JSON answer holding a non-empty ``choices`` list."""
    if not 200 <= status_code < 300:
        return False
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(document, dict) and isinstance(document.get("choices"), list) and bool(document["choices"])


def is_storable_stream(status_code: int, headers: Iterable[tuple[str, str]], whole: bytes, *, is_sse: bool) -> bool:
    """True for a whole passed-through answer a shared cache may keep: a 2xx the upstream
    lets us store, and an SSE stream that completed or a cacheable JSON answer."""
    if not 200 <= status_code < 300 or not response_allows_storing(headers):
        return False
    return summarize_sse(whole).is_complete if is_sse else is_cacheable_json_answer(status_code, whole)


class SseEnd:
    """Finds, chunk by chunk, where an SSE stream's ``data: [DONE]`` event is complete (its
    blank line has arrived): the moment a client has the whole answer.

    Only the current line is kept, and only its first few bytes (a ``[DONE]`` line is short),
    so a long line costs nothing; newlines are ``\\n`` or ``\\r\\n``, as OpenAI servers send.
    """

    # Longer lines cannot be "data: [DONE]", whatever their spaces.
    _LINE_BYTES_KEPT = 64

    def __init__(self) -> None:
        self._line = bytearray()
        self._line_too_long = False
        self._done_line_seen = False

    def feed(self, chunk: bytes) -> bool:
        """Take the next chunk; True when the ``[DONE]`` event ends in it (once)."""
        start = 0
        while True:
            newline = chunk.find(b"\n", start)
            if newline < 0:
                self._keep(chunk[start:])
                return False
            self._keep(chunk[start:newline])
            if self._line_ends():
                return True
            start = newline + 1

    def _keep(self, piece: bytes) -> None:
        if not self._line_too_long:
            self._line += piece
            if len(self._line) > self._LINE_BYTES_KEPT:
                self._line_too_long = True
                self._line.clear()

    def _line_ends(self) -> bool:
        line = bytes(self._line).strip()
        too_long = self._line_too_long
        self._line.clear()
        self._line_too_long = False
        if too_long:
            self._done_line_seen = False
            return False
        if not line:  # a blank line dispatches the event
            ended, self._done_line_seen = self._done_line_seen, False
            return ended
        self._done_line_seen = line.startswith(b"data:") and line[5:].strip() == b"[DONE]"
        return False


@dataclass
class SseSummary:
    """What a chat/completions SSE stream said, assembled."""

    text: str = ""
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    chunk_count: int = 0
    saw_choices: bool = False
    saw_error: bool = False
    done: bool = False

    @property
    def is_complete(self) -> bool:
        """True when the stream ended with ``[DONE]``, carried choices and no error."""
        return self.done and self.saw_choices and not self.saw_error


def summarize_sse(raw: bytes) -> SseSummary:
    """Assemble an OpenAI-style SSE stream: text, finish reason, usage, completeness.

    Works for chat (``delta.content``) and completions (``text``) chunks.
    """
    summary = SseSummary()
    for line in raw.split(b"\n"):
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            summary.done = True
            continue
        try:
            chunk = json.loads(payload)
        except (ValueError, UnicodeDecodeError):
            summary.saw_error = True
            continue
        if not isinstance(chunk, dict):
            continue
        summary.chunk_count += 1
        if "error" in chunk:
            summary.saw_error = True
        if chunk.get("usage"):
            summary.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            summary.saw_choices = True
            delta = choice.get("delta") or {}
            piece = delta.get("content") if isinstance(delta, dict) else None
            if piece is None:
                piece = choice.get("text")
            if isinstance(piece, str):
                summary.text += piece
            if choice.get("finish_reason"):
                summary.finish_reason = choice["finish_reason"]
    return summary
