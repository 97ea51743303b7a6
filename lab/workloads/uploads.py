"""Uploaded datasets: checked before they are kept, stored under a generated name, listed.

- :func:`save_upload` validates an uploaded dataset before keeping it and stores it under
  a generated name, atomically;
- :func:`record_upload` writes its bookkeeping sidecar (original name, counts);
- :func:`list_uploads` lists the stored ones for the form.

Every user-facing problem raises :class:`~lab.workloads.datasets.DatasetError` with a
message a user can act on.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from lab.user_input.fields import UploadKind
from lab.user_input.validation import UploadNameError, safe_upload_name
from lab.workloads.datasets import atomic_write_bytes, is_replayable, parse_jsonl_requests
from lab.workloads.input_files import DatasetError, read_input_text
from lab.workloads.sharegpt_reader import ShareGPTReadStats, iter_conversations, text_reader
from lab.workloads.trace_file import parse_trace
from lab.workloads.upload_records import UPLOAD_META_MAX_BYTES, UPLOAD_META_SUFFIX
from services.traces.blocks import MOONCAKE_BLOCK_TOKENS

_UPLOAD_SUFFIXES: dict[str, str] = {"sharegpt": ".json", "jsonl": ".jsonl", "trace": ".trace"}


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
    # The file's SHA-256: the same file uploaded again is the stored one, not a second copy.
    sha256: str = ""
    already_stored: bool = False


@dataclass
class _CheckedContents:
    """What the content check of an upload found (the counts of :class:`SavedUpload`)."""

    items: int
    usable: int
    truncated: bool = False
    dropped_trailing_chars: int = 0
    notes: list[str] = field(default_factory=list)


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
    for conversation in iter_conversations(text_reader(text), stats):
        complete += 1
        if is_replayable(conversation.messages):
            usable += 1
    if stats.elements and not stats.conversations:
        raise DatasetError('not a ShareGPT file: no element has a "conversations" list of {"from", "value"} messages')
    if not usable:
        detail = (
            "it is cut off before the first conversation ends"
            if stats.truncated and not complete
            else ("no conversation starts with a human turn and alternates human/gpt")
        )
        raise DatasetError(f"no usable conversation in the file: {detail}")
    return complete, usable, stats


def _upload_text(data: bytes, display_name: str, max_bytes: int) -> str:
    """The upload as text: within the size cap, not empty, UTF-8, without NUL characters."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise DatasetError("upload data must be bytes")
    size_bytes = len(data)
    if size_bytes > max_bytes:
        raise DatasetError(f"{display_name} is {human_size(size_bytes)}; the upload limit is {human_size(max_bytes)}")
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
    return text


def _check_contents(text: str, kind: UploadKind) -> _CheckedContents:
    """Count what an upload's text holds; raise :class:`DatasetError` when nothing is usable."""
    if kind == "trace":
        # Every rule, the hash ids' count with the block size of Mooncake's traces (the grid's
        # default): a trace made with smaller blocks is told here, with the setting that fixes it.
        trace = parse_trace(text.splitlines(), block_tokens=1)
        checked = _CheckedContents(items=len(trace), usable=len(trace))
        fits = min((item.input_length // len(item.hash_ids) for item in trace if item.hash_ids), default=None)
        if fits is not None and fits < MOONCAKE_BLOCK_TOKENS:
            checked.notes.append(
                f"its hash ids fit blocks of at most {fits} tokens: in the grid set 'Tokens per hash id' to "
                f"{fits} or less (the default, {MOONCAKE_BLOCK_TOKENS}, is Mooncake's)"
            )
        return checked
    if kind != "sharegpt":
        requests = parse_jsonl_requests(text.splitlines())
        return _CheckedContents(items=len(requests), usable=len(requests))
    items, usable, stats = _check_sharegpt_upload(text)
    checked = _CheckedContents(items, usable, stats.truncated, stats.dropped_trailing_chars)
    if checked.truncated:
        checked.notes.append(
            f"the file is cut off: kept {items:,} complete conversations, "
            f"dropped {checked.dropped_trailing_chars:,} trailing characters of an incomplete one"
        )
    if stats.skipped_elements:
        checked.notes.append(f"skipped {stats.skipped_elements:,} elements that are not conversations")
    return checked


def save_upload(*, data: bytes, original_name: str, kind: UploadKind, upload_dir: Path, max_bytes: int) -> SavedUpload:
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
    text = _upload_text(data, display_name, max_bytes)
    try:
        checked = _check_contents(text, kind)
    except DatasetError as error:
        raise DatasetError(f"{display_name}: {error}") from error

    upload_dir = Path(upload_dir)
    digest = hashlib.sha256(bytes(data)).hexdigest()
    same = _stored_with(upload_dir, kind, digest)
    if same is not None:
        checked.notes.append(f"the same file is stored already ({same[1]}): not stored twice")
        stored_path = same[0]
    else:
        stored_path = upload_dir / f"{uuid.uuid4().hex}{_UPLOAD_SUFFIXES[kind]}"
        try:
            atomic_write_bytes(stored_path, bytes(data))
        except OSError as error:
            raise DatasetError(f"cannot store the upload in {upload_dir}: {error.strerror or error}") from error
    return SavedUpload(
        path=stored_path,
        original_name=display_name,
        kind=kind,
        size_bytes=len(data),
        items=checked.items,
        usable=checked.usable,
        truncated=checked.truncated,
        dropped_trailing_chars=checked.dropped_trailing_chars,
        notes=checked.notes,
        sha256=digest,
        already_stored=same is not None,
    )


def _stored_with(upload_dir: Path, kind: UploadKind, digest: str) -> tuple[Path, str] | None:
    """The stored upload of ``kind`` whose record names this SHA-256, with its label; None."""
    for path, label in list_uploads(upload_dir, kind):
        meta_path = Path(path).with_name(Path(path).name + UPLOAD_META_SUFFIX)
        try:
            meta = json.loads(read_input_text(meta_path, what="upload record", max_bytes=UPLOAD_META_MAX_BYTES))
        except (OSError, ValueError, DatasetError):
            continue
        if isinstance(meta, dict) and meta.get("sha256") == digest:
            return Path(path), label
    return None


def record_upload(saved: SavedUpload) -> Path:
    """Write a small sidecar beside an accepted upload (original name, counts, when) for the pages."""
    meta_path = saved.path.with_name(saved.path.name + UPLOAD_META_SUFFIX)
    if saved.already_stored and meta_path.is_file():
        return meta_path  # its record stays the first upload's
    meta = {
        "sha256": saved.sha256,
        "original_name": saved.original_name,
        "kind": saved.kind,
        "size_bytes": saved.size_bytes,
        "items": saved.items,
        "usable": saved.usable,
        "saved_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    meta_path.write_text(json.dumps(meta), encoding="utf-8")
    return meta_path


def list_uploads(upload_dir: Path, kind: UploadKind) -> list[tuple[str, str]]:
    """``(path, label)`` of stored uploads of ``kind`` (``sharegpt``, ``jsonl`` or ``trace``), newest first."""
    suffix = _UPLOAD_SUFFIXES[kind]
    if not upload_dir.is_dir():
        return []
    # Regular files only (is_file): a FIFO or a device placed there is never offered.
    files = [
        p
        for p in upload_dir.iterdir()
        if p.suffix == suffix and not p.name.endswith(UPLOAD_META_SUFFIX) and p.is_file()
    ]
    result = []
    for path in sorted(files, key=lambda p: p.stat().st_mtime, reverse=True):
        meta_path = path.with_name(path.name + UPLOAD_META_SUFFIX)
        label = path.name
        if meta_path.is_file():
            try:
                meta = json.loads(read_input_text(meta_path, what="upload record", max_bytes=UPLOAD_META_MAX_BYTES))
                label = f"{meta['original_name']} ({meta['usable']:,} usable, saved {meta['saved_at']})"
            except (ValueError, KeyError, TypeError):
                pass
        result.append((str(path), label))
    return result
