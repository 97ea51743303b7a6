"""A Mooncake trace read and checked: one request a JSON line, refused in one line naming
the line number and the rule it breaks.

A line holds ``timestamp`` (ms from the start of the replay), ``input_length`` and
``output_length`` (tokens) and ``hash_ids`` (one id per prompt block of ``block_tokens``
tokens, chained as in Mooncake: id k stands for block k together with every block before
it), and optionally ``session_id``, and ``input_text`` or ``messages``: a line with text is
sent as it is (AIPerf's fixed schedule) and needs neither ``input_length`` nor ``hash_ids``.

The file goes through the lab's file gate (:mod:`lab.workloads.input_files`: a regular file
under ``LAB_INPUT_FILE_MAX_BYTES``) like any request file; its sha256 is read on the way, so
a spec can name the exact trace it replays.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from lab.workloads.input_files import DatasetError, open_input_binary
from lab.workloads.upload_records import upload_original_name
from services.traces.blocks import MOONCAKE_BLOCK_TOKENS  # one definition: the proxy records in these blocks

REQUIRED_FIELDS = ("timestamp", "output_length")
# Hard maximums of a line's values: past them a value is absurd, not long, and is refused at the door
# (a trace longer than the run is cut at its duration and a prompt over the context is clipped, below these).
MAX_TIMESTAMP_MS = 7 * 24 * 3600 * 1000  # a week of replay
MAX_LENGTH_TOKENS = 1 << 20  # a million tokens: more than any model's context
# Needed unless the line carries its own text (input_text or messages).
TOKEN_FIELDS = ("input_length", "hash_ids")


class TraceError(DatasetError):
    """A trace the lab will not replay; the message names the line and the rule."""


@dataclass(frozen=True)
class TraceRequest:
    """One line of a trace. ``text`` is the line's ``input_text`` or its ``messages`` as JSON
    (sent as they are); None for a prompt the lab builds from ``hash_ids``."""

    line: int
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]
    session_id: str | None = None
    text: str | None = None

    @property
    def messages(self) -> list[dict[str, Any]] | None:
        """The chat messages the line carries (``input_text`` as one user message); None when built."""
        if self.text is None:
            return None
        parsed = json.loads(self.text)
        return parsed if isinstance(parsed, list) else [{"role": "user", "content": parsed}]


def _whole(line: int, name: str, value: Any, *, minimum: int, maximum: int = MAX_LENGTH_TOKENS) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not float(value).is_integer():
        raise TraceError(f"line {line}: {name} must be a whole number, not {json.dumps(value)[:40]}")
    if value < minimum:
        rule = "lengths must be at least 1" if minimum == 1 else f"{name} must be at least {minimum}"
        raise TraceError(f"line {line}: {name} is {int(value)} ({rule})")
    if value > maximum:
        raise TraceError(f"line {line}: {name} is {value:.3g}, over the limit of {maximum:,}")
    return int(value)


def _no_constant(name: str) -> Any:
    """json's hook for NaN and Infinity, which are not JSON: refused, never read as numbers."""
    raise ValueError(f"{name} is not a JSON number")


def _text_of(line: int, item: dict[str, Any]) -> str | None:
    """The line's own text as JSON (a string or a messages list), None when it has none."""
    if "messages" in item:
        messages = item["messages"]
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise TraceError(f"line {line}: messages must be a non-empty list of chat messages")
        return json.dumps(messages, ensure_ascii=False)
    if "input_text" in item:
        if not isinstance(item["input_text"], str) or not item["input_text"]:
            raise TraceError(f"line {line}: input_text must be a non-empty string")
        return json.dumps(item["input_text"], ensure_ascii=False)
    return None


def _hash_ids(line: int, value: Any, input_length: int, block_tokens: int) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise TraceError(f"line {line}: hash_ids must be a list of whole numbers")
    needed = math.ceil(input_length / block_tokens)
    if len(value) > needed:
        fits = input_length // len(value)
        raise TraceError(
            f"line {line}: {len(value)} hash ids, but input_length {input_length} needs at most {needed} "
            f"(blocks of {block_tokens} tokens); "
            + (
                f"'Tokens per hash id' (trace.block_tokens) of {fits} or less fits this line"
                if fits >= 1
                else "more hash ids than tokens: no block size fits this line"
            )
        )
    return tuple(value)


def parse_line(line: int, raw: str, block_tokens: int) -> TraceRequest:
    """One trace line as a request; :class:`TraceError` naming the line and the rule otherwise."""
    try:
        item = json.loads(raw, parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        raise TraceError(f"line {line}: not JSON ({error.msg.removesuffix(' at')} at column {error.colno})") from None
    except ValueError as error:  # NaN or Infinity
        raise TraceError(f"line {line}: not JSON ({error})") from None
    except RecursionError:
        raise TraceError(f"line {line}: nested too deep to read") from None
    if not isinstance(item, dict):
        raise TraceError(f"line {line}: not a JSON object")
    text = _text_of(line, item)
    for name in REQUIRED_FIELDS + (() if text is not None else TOKEN_FIELDS):
        if name not in item:
            raise TraceError(
                f"line {line}: missing field {name!r} (a line needs timestamp, input_length, output_length and "
                "hash_ids, or input_text/messages instead of the last two)"
            )
    timestamp = item["timestamp"]
    if isinstance(timestamp, bool) or not isinstance(timestamp, (int, float)) or not 0 <= timestamp <= MAX_TIMESTAMP_MS:
        raise TraceError(
            f"line {line}: timestamp must be a number of ms from the start, from 0 to {MAX_TIMESTAMP_MS:,} (a week)"
        )
    input_length = _whole(line, "input_length", item["input_length"], minimum=1) if "input_length" in item else 0
    output_length = _whole(line, "output_length", item["output_length"], minimum=1)
    hash_ids = _hash_ids(line, item["hash_ids"], input_length, block_tokens) if text is None else ()
    session = item.get("session_id")
    return TraceRequest(
        line=line,
        timestamp_ms=float(timestamp),
        input_length=input_length,
        output_length=output_length,
        hash_ids=hash_ids,
        session_id=None if session is None else str(session),
        text=text,
    )


def parse_trace(lines: Iterable[str], *, block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> list[TraceRequest]:
    """Every request of a trace's lines (blank lines skipped), timestamps never going backwards."""
    requests: list[TraceRequest] = []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        request = parse_line(number, raw, block_tokens)
        if requests and request.timestamp_ms < requests[-1].timestamp_ms:
            previous = requests[-1]
            raise TraceError(
                f"line {number}: timestamp {request.timestamp_ms:g} is earlier than line {previous.line}'s "
                f"{previous.timestamp_ms:g} (timestamps must not go backwards)"
            )
        requests.append(request)
    if not requests:
        raise TraceError("the trace has no requests (one JSON object a line)")
    return requests


@dataclass(frozen=True)
class TraceFile:
    """A trace as read: its requests and the sha256 of the bytes they came from."""

    requests: tuple[TraceRequest, ...]
    sha256: str


def read_trace(path: Path | str, *, block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> TraceFile:
    """The trace at ``path`` through the file gate (regular file, size limit), checked line by
    line; every refusal is one line starting with the file's name."""
    status = os.stat(path) if Path(path).exists() else None
    key = (str(path), status.st_mtime_ns, status.st_size, status.st_ino) if status else None
    try:
        if key is None:
            return _read(str(path), block_tokens)
        return _read_cached(key, block_tokens)
    except TraceError as error:
        raise TraceError(f"trace {_shown_name(Path(path))}: {error}") from None


def _shown_name(path: Path) -> str:
    """The name the user gave an uploaded trace (its stored name is generated), else the file's."""
    return upload_original_name(path) or path.name


@lru_cache(maxsize=8)
def _read_cached(key: tuple[str, int, int, int], block_tokens: int) -> TraceFile:
    # Keyed by the file's identity and change time: spec validation reads the trace each time
    # a spec is checked, and a trace of 20,000 lines takes a fraction of a second to parse.
    return _read(key[0], block_tokens)


def _read(path: str, block_tokens: int) -> TraceFile:
    with open_input_binary(path, what="trace file") as handle:
        data = handle.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise TraceError(f"line {line}: not UTF-8 text") from None
    requests = parse_trace(text.splitlines(), block_tokens=block_tokens)
    return TraceFile(tuple(requests), hashlib.sha256(data).hexdigest())


def trace_sha256(path: Path | str) -> str:
    """The sha256 of the trace file's bytes, read through the file gate."""
    digest = hashlib.sha256()
    with open_input_binary(path, what="trace file") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
