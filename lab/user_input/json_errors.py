"""A JSON parse error as one line a person can act on: what is wrong and where, in the file's own
line and column (the parser's message ends "... starting at" and leaves the place to its repr)."""

from __future__ import annotations

import json


def json_error_text(error: json.JSONDecodeError) -> str:
    """``Unterminated string starting at line 3, column 14``."""
    return f"{error.msg.removesuffix(' at')} at line {error.lineno}, column {error.colno}"
