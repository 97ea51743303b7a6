"""The code's shape, checked with ``ast``: backend kinds are named only in the registry
(``lab/backends``), and the lower layers (``db/``, ``services/``) import nothing from ``lab/``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from lab.backends import spec_backend_names

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("lab", "services", "db", "pages")
# Tables that set our figures beside the seed's published ones: the seed's rows are keyed
# by its backend names, which are data there, not a dispatch on kinds.
# The seed's published tables name the seed's three set-ups; only these modules rebuild them.
SEED_COMPARISON_MODULES = {"lab/analysis/compare.py", "lab/report/tables.py", "lab/report/claims.py"}


def python_files(*folders: str) -> list[Path]:
    return sorted(path for folder in folders for path in (ROOT / folder).rglob("*.py"))


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def backend_name_comparisons(tree: ast.AST, names: set[str]) -> list[int]:
    """Lines of ``x == "<name>"``, ``x != "<name>"`` and ``x in ("<name>", ...)`` on backend names."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        for op, right in zip(node.ops, node.comparators):
            operands = [node.left, right]
            if isinstance(op, (ast.Eq, ast.NotEq)):
                constants = [o.value for o in operands if isinstance(o, ast.Constant)]
            elif isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.Tuple, ast.List, ast.Set)):
                constants = [e.value for e in right.elts if isinstance(e, ast.Constant)]
            else:
                continue
            if any(isinstance(value, str) and value in names for value in constants):
                lines.append(node.lineno)
    return lines


def test_no_comparison_on_a_backend_name_outside_the_registry() -> None:
    names = set(spec_backend_names())
    found = {}
    for path in python_files(*SCANNED):
        name = relative(path)
        if name.startswith("lab/backends/") or name in SEED_COMPARISON_MODULES:
            continue
        lines = backend_name_comparisons(ast.parse(path.read_text(), name), names)
        if lines:
            found[name] = lines
    assert not found, f"backend names compared outside lab/backends (look the kind up in the registry): {found}"


def test_the_check_finds_a_comparison_it_must_find() -> None:
    tree = ast.parse('if kind == "vllm":\n    pass\nif base in ("naive", "x"):\n    pass\nif k != "redis":\n    pass\n')
    assert backend_name_comparisons(tree, {"vllm", "naive"}) == [1, 3]


def imports_from_lab(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and (node.module == "lab" or node.module.startswith("lab.")):
            found.append(f"{relative(path)}:{node.lineno} from {node.module}")
        elif isinstance(node, ast.Import):
            found += [f"{relative(path)}:{node.lineno} import {a.name}" for a in node.names if a.name.split(".")[0] == "lab"]
    return found


def test_services_import_nothing_from_lab() -> None:
    found = [line for path in python_files("services") for line in imports_from_lab(path)]
    assert not found, found


def test_db_imports_nothing_from_lab() -> None:
    found = [line for path in python_files("db") for line in imports_from_lab(path)]
    assert not found, found
