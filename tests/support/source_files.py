"""The lab's source parsed once per test process: the shape tests (layering, registries, sizes)
walk every module's syntax tree, several tests each."""

from __future__ import annotations

import ast
import functools
from pathlib import Path


@functools.cache
def syntax_tree(path: Path) -> ast.Module:
    """``path``'s syntax tree, parsed on first use (callers only read it)."""
    return ast.parse(path.read_text(encoding="utf-8"), str(path))
