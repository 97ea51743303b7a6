"""Workload data: chat sessions from conversations, custom JSONL requests, request files.

- :func:`build_chat_sessions` picks N sessions (deterministic from a random seed) and expands
  each into its turns the way the seed's experiment 3 did: turn i sends
  ``[system] + the conversation up to and including the i-th user message``, with the
  assistant messages taken from the dataset.
- :func:`load_custom_requests` reads a JSONL file of chat requests, checked line by line.
- :func:`write_requests_file` writes what ``k6/chat_replay.js`` reads: a JSON array of
  sessions, each an array of turns, each turn a request object ``{"messages": [...],
  ...}``.

Reading ShareGPT files is :mod:`lab.workloads.sharegpt_reader`'s job, checking and
keeping uploads :mod:`lab.workloads.uploads`'s; both build on this module's types.
Every user-facing problem raises :class:`DatasetError` with a message a user can act on.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Required, TypedDict, cast

from lab.workloads.input_files import DatasetError, open_input_text

CHAT_ROLES = frozenset({"system", "user", "assistant", "tool"})
MAX_CUSTOM_REQUESTS = 1_000_000
MAX_REQUEST_MAX_TOKENS = 1_000_000

Message = dict[str, str]
Turn = list[Message]
Session = list[Turn]


class ChatRequest(TypedDict, total=False):
    """One chat request as ``k6/chat_replay.js`` sends it: its messages and the settings a custom
    request may carry, checked by :func:`parse_jsonl_requests` (a custom file's other fields pass
    through unchecked and untyped)."""

    messages: Required[list[Message]]
    max_tokens: int
    temperature: float
    top_p: float
    stream: bool


@dataclass
class Conversation:
    """One ShareGPT conversation, speakers mapped to chat roles (unknown speakers skipped)."""

    id: str
    messages: list[Message]
    source_speakers: tuple[str, ...] = ()
    """The ``from`` field of every entry in the file, unmapped and unfiltered, in order."""


# --------------------------------------------------------------------------- chat sessions


def is_replayable(messages: Sequence[Message], *, max_turns: int | None = None) -> bool:
    """Whether a conversation can be replayed as a chat session.

    Its non-empty, non-system messages must start with a user message and alternate
    user/assistant, with at least one and at most ``max_turns`` user messages.
    """
    dialogue = [m for m in messages if m["role"] != "system" and m["content"].strip()]
    if not dialogue or dialogue[0]["role"] != "user":
        return False
    for index, message in enumerate(dialogue):
        if message["role"] != ("user" if index % 2 == 0 else "assistant"):
            return False
    user_turns = (len(dialogue) + 1) // 2
    return max_turns is None or user_turns <= max_turns


def build_chat_sessions(
    conversations: Iterable[Conversation],
    *,
    sessions: int,
    max_turns: int,
    system_prompt: str | None,
    random_seed: int,
    max_session_chars: int | None = None,
) -> list[Session]:
    """Pick ``sessions`` chat sessions and expand each into the requests of its turns.

    Eligible conversations (:func:`is_replayable` with ``max_turns``; empty messages
    dropped; optionally at most ``max_session_chars`` characters of dialogue) are sampled
    without replacement with ``random.Random(random_seed)``, so the same input and random seed give
    the same sessions. Turn i of a session is ``[system] + the dialogue up to and
    including its i-th user message`` (the assistant messages come from the dataset; the
    conversation's own system messages are replaced by ``system_prompt``, or dropped when
    it is None). Returns fewer sessions when fewer are eligible; raises
    :class:`DatasetError` when none is.
    """
    if sessions < 1:
        raise DatasetError("sessions must be at least 1")
    if max_turns < 1:
        raise DatasetError("max_turns must be at least 1")
    eligible: list[list[Message]] = []
    for conversation in conversations:
        if not is_replayable(conversation.messages, max_turns=max_turns):
            continue
        dialogue = [
            {"role": m["role"], "content": m["content"]}
            for m in conversation.messages
            if m["role"] != "system" and m["content"].strip()
        ]
        if max_session_chars is not None and sum(len(m["content"]) for m in dialogue) > max_session_chars:
            continue
        eligible.append(dialogue)
    if not eligible:
        raise DatasetError(
            f"no conversation in the dataset can be replayed with at most {max_turns} turns "
            "(each must start with a user message and alternate user/assistant)"
        )
    picked = random.Random(random_seed).sample(eligible, min(sessions, len(eligible)))
    system: list[Message] = [{"role": "system", "content": system_prompt}] if system_prompt else []
    result: list[Session] = []
    for dialogue in picked:
        turns: Session = []
        for index, message in enumerate(dialogue):
            if message["role"] == "user":
                turns.append([dict(m) for m in system] + [dict(m) for m in dialogue[: index + 1]])
        result.append(turns)
    return result


# --------------------------------------------------------------------------- custom JSONL


def _check_request(request: Any, line_number: int) -> ChatRequest:
    """Validate one chat request object from line ``line_number``; return it."""
    where = f"line {line_number}"
    if not isinstance(request, dict):
        raise DatasetError(f'{where}: expected a JSON object with "messages", got {type(request).__name__}')
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        raise DatasetError(f'{where}: "messages" must be a non-empty list of {{role, content}} objects')
    for index, message in enumerate(messages, start=1):
        if not isinstance(message, dict):
            raise DatasetError(f"{where}: message {index} must be an object with role and content")
        role = message.get("role")
        if role not in CHAT_ROLES:
            raise DatasetError(
                f"{where}: message {index} has role {role!r}; allowed roles: {', '.join(sorted(CHAT_ROLES))}"
            )
        if not isinstance(message.get("content"), str):
            raise DatasetError(f"{where}: message {index} content must be a string")
    if not any(m["role"] == "user" for m in messages):
        raise DatasetError(f"{where}: needs at least one user message")
    max_tokens = request.get("max_tokens")
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= MAX_REQUEST_MAX_TOKENS
    ):
        raise DatasetError(f"{where}: max_tokens must be an integer from 1 to {MAX_REQUEST_MAX_TOKENS:,}")
    for name, low, high in (("temperature", 0.0, 2.0), ("top_p", 0.0, 1.0)):
        value = request.get(name)
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if value is not None and (not is_number or not low <= value <= high):
            raise DatasetError(f"{where}: {name} must be a number from {low:g} to {high:g}")
    if "stream" in request and not isinstance(request["stream"], bool):
        raise DatasetError(f"{where}: stream must be true or false")
    return cast(ChatRequest, request)  # its fields checked above


def parse_jsonl_requests(lines: Iterable[str]) -> list[ChatRequest]:
    """The checked chat requests of JSONL ``lines`` (blank ones skipped), errors naming the line."""
    requests: list[ChatRequest] = []
    for line_number, line in enumerate(lines, start=1):
        if line_number == 1:
            line = line.lstrip("\ufeff")
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except json.JSONDecodeError as error:
            raise DatasetError(
                f"line {line_number}: not valid JSON ({error.msg.removesuffix(' at')} at column {error.colno})"
            ) from error
        except RecursionError as error:
            raise DatasetError(f"line {line_number}: nested too deeply to read") from error
        except ValueError as error:
            raise DatasetError(f"line {line_number}: unreadable value ({error})") from error
        requests.append(_check_request(request, line_number))
        if len(requests) > MAX_CUSTOM_REQUESTS:
            raise DatasetError(f"more than {MAX_CUSTOM_REQUESTS:,} requests; split the file")
    if not requests:
        raise DatasetError('the file holds no requests (one JSON object with "messages" per line)')
    return requests


def load_custom_requests(path: Path | str) -> list[ChatRequest]:
    """Read a JSONL file of chat requests, one JSON object per line (blank lines skipped).

    Each object needs ``messages``: a non-empty list of ``{"role", "content"}`` with role
    system/user/assistant/tool, content a string, and at least one user message.
    Optional ``max_tokens``, ``temperature``, ``top_p``, ``stream`` are type-checked;
    other fields pass through. Raises :class:`DatasetError` naming the line number.
    """
    file_path = Path(path)
    try:
        # A regular file under the size limit only, read with a bound (never a FIFO or a device).
        with open_input_text(file_path, what="request file") as handle:
            return parse_jsonl_requests(handle)
    except UnicodeDecodeError as error:
        raise DatasetError(f"{file_path.name} is not UTF-8 text: {error.reason} at byte {error.start}") from error


def custom_requests_as_sessions(requests: Sequence[ChatRequest]) -> list[list[ChatRequest]]:
    """Custom requests as sessions for :func:`write_requests_file`: one single-turn session each."""
    return [[request.copy()] for request in requests]


# --------------------------------------------------------------------------- request files


def _turn_object(turn: Turn | ChatRequest) -> ChatRequest:
    """A turn as the request object k6 sends: a message list becomes ``{"messages": ...}``."""
    if isinstance(turn, dict):
        return turn
    return {"messages": turn}


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=".tmp-", suffix=path.suffix, dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_requests_file(sessions: Sequence[Sequence[Turn | ChatRequest]], path: Path | str) -> Path:
    """Write the request file ``k6/chat_replay.js`` reads; return its path.

    The file is a JSON array of sessions, each an array of turns, each turn a request
    object ``{"messages": [...]}`` (a turn given as a message list is wrapped; a turn
    given as a :class:`ChatRequest`, such as a custom request with ``max_tokens``, is written as is).
    Sessions without turns are left out. The write is atomic (temporary file + rename).
    """
    file_path = Path(path)
    # k6/chat_replay.js refuses empty sessions; a session without turns carries no request.
    payload = [[_turn_object(turn) for turn in session] for session in sessions if session]
    if not payload:
        raise DatasetError("no requests to write: the workload has no sessions")
    atomic_write_bytes(file_path, json.dumps(payload, ensure_ascii=False).encode("utf-8"))
    return file_path
