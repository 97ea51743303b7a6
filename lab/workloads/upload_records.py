"""The small record kept beside each stored upload (its original name, counts, hash): what the
uploads write and what a trace's refusal reads to name the file as the user named it."""

from __future__ import annotations

import json
from pathlib import Path

from lab.workloads.input_files import read_input_text

UPLOAD_META_SUFFIX = ".meta.json"
# A sidecar is a few hundred bytes; anything larger is not one.
UPLOAD_META_MAX_BYTES = 64 * 1024


def upload_original_name(path: Path) -> str | None:
    """The name a stored upload had when it was uploaded (its record's), None without a record."""
    meta_path = path.with_name(path.name + UPLOAD_META_SUFFIX)
    if not meta_path.is_file():
        return None
    try:
        meta = json.loads(read_input_text(meta_path, what="upload record", max_bytes=UPLOAD_META_MAX_BYTES))
        return str(meta["original_name"])
    except (ValueError, KeyError, TypeError):
        return None
