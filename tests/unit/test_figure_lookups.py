"""A figure is found by "find usages", not by grep: outside its declaration (db/figures.py) no
figure is looked up by a string literal. A lookup is a figure's name as a string in a subscript
(``record["req_per_s"]``, ``frame["req_per_s"]``, ``frame[["req_per_s", ...]]``), in ``.get()``
or in ``getattr()``; names generated from the declarations (columns, CSV headers, SQL) are not
literals and do not count."""

from __future__ import annotations

import ast
from pathlib import Path

from db.figures import FIGURE_NAMES
from tests.support.source_files import syntax_tree

PROJECT_ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("lab", "pages", "services", "db")
DECLARATION = PROJECT_ROOT / "db" / "figures.py"


def _figure_literals(node: ast.AST) -> list[str]:
    """The figure names written as string literals in ``node`` (a constant, or a list or tuple of them)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in FIGURE_NAMES:
        return [node.value]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [name for element in node.elts for name in _figure_literals(element)]
    return []


def figure_lookups(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, figure)`` for every string-literal figure lookup in ``tree``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            found += [(node.lineno, name) for name in _figure_literals(node.slice)]
        elif isinstance(node, ast.Call) and node.args:
            function = node.func
            is_get = isinstance(function, ast.Attribute) and function.attr == "get"
            is_getattr = isinstance(function, ast.Name) and function.id in ("getattr", "hasattr")
            if is_get:
                found += [(node.lineno, name) for name in _figure_literals(node.args[0])]
            elif is_getattr and len(node.args) > 1:
                found += [(node.lineno, name) for name in _figure_literals(node.args[1])]
    return found


def lookups_in_tree() -> list[str]:
    return [
        f"{path.relative_to(PROJECT_ROOT)}:{line}: {name}"
        for folder in FOLDERS
        for path in sorted((PROJECT_ROOT / folder).rglob("*.py"))
        if path != DECLARATION
        for line, name in figure_lookups(syntax_tree(path))
    ]


def test_no_figure_is_looked_up_by_a_string_literal() -> None:
    # 135 before the figures were declared once (issue 58).
    assert lookups_in_tree() == []


def test_the_counter_finds_each_kind_of_lookup() -> None:
    source = (
        "record['req_per_s']\n"
        "record.get('latency_p95_s')\n"
        "getattr(run, 'output_tok_per_s')\n"
        "frame[['req_per_s', 'vus']]\n"
        "record['vus']\n"  # not a figure
        "results.req_per_s\n"  # an attribute: what it should be
    )
    assert [name for _, name in figure_lookups(ast.parse(source))] == [
        "req_per_s",
        "latency_p95_s",
        "output_tok_per_s",
        "req_per_s",
    ]
