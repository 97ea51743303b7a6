"""The code's shape, checked with ``ast``: backend kinds are named only in their registry
(``lab/backends``) and workloads only in theirs (``lab/workloads``): no comparison with a name,
no loop over a literal list of names elsewhere. The lower layers (``db/``, ``services/``)
import nothing from ``lab/``."""

from __future__ import annotations

import ast
from pathlib import Path

from lab.backends import spec_backend_names
from lab.workloads import workload_names
from tests.support.source_files import syntax_tree

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("lab", "services", "db", "pages")


def python_files(*folders: str) -> list[Path]:
    return sorted(path for folder in folders for path in (ROOT / folder).rglob("*.py"))


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _names_in(node: ast.AST, names: set[str]) -> bool:
    """Whether ``node`` is one of ``names`` or a literal tuple/list/set holding one."""
    elements = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return any(isinstance(e, ast.Constant) and isinstance(e.value, str) and e.value in names for e in elements)


def name_comparisons(tree: ast.AST, names: set[str]) -> list[int]:
    """Lines of ``x == "<name>"``, ``x != "<name>"`` and ``x in ("<name>", ...)`` on ``names``."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        for op, right in zip(node.ops, node.comparators, strict=True):
            if isinstance(op, (ast.Eq, ast.NotEq)):
                found = any(isinstance(o, ast.Constant) and _names_in(o, names) for o in (node.left, right))
            elif isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.Tuple, ast.List, ast.Set)):
                found = _names_in(right, names)
            else:
                continue
            if found:
                lines.append(node.lineno)
    return lines


def name_iterations(tree: ast.AST, names: set[str]) -> list[int]:
    """Lines of ``for x in ("<name>", ...)`` and comprehensions over a literal collection of ``names``."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)) and _names_in_collection(node.iter, names):
            lines.append(node.iter.lineno)
    return lines


def _names_in_collection(node: ast.AST, names: set[str]) -> bool:
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and _names_in(node, names)


def names_outside(registry: str, names: set[str]) -> dict[str, list[int]]:
    """Per module outside ``registry``: the lines that compare with or loop over ``names``."""
    found = {}
    for path in python_files(*SCANNED):
        name = relative(path)
        if name.startswith(registry):
            continue
        tree = syntax_tree(path)
        lines = sorted(name_comparisons(tree, names) + name_iterations(tree, names))
        if lines:
            found[name] = lines
    return found


def test_no_backend_name_compared_or_iterated_outside_the_registry() -> None:
    found = names_outside("lab/backends/", set(spec_backend_names()))
    assert not found, f"backend names compared or iterated outside lab/backends (ask the registry): {found}"


def test_no_workload_name_compared_or_iterated_outside_the_registry() -> None:
    found = names_outside("lab/workloads/", set(workload_names()))
    assert not found, f"workload names compared or iterated outside lab/workloads (ask the registry): {found}"


def test_the_check_finds_a_comparison_it_must_find() -> None:
    tree = ast.parse('if kind == "vllm":\n    pass\nif base in ("naive", "x"):\n    pass\nif k != "redis":\n    pass\n')
    assert name_comparisons(tree, {"vllm", "naive"}) == [1, 3]


def test_the_check_finds_a_loop_over_names_it_must_find() -> None:
    tree = ast.parse(
        'for kind in ("naive", "vllm"):\n    pass\nrows = [f(k) for k in ["x", "vllm+cache"]]\n'
        'for kind in ("redis", "x"):\n    pass\nfor name in names:\n    pass\n'
        'found = {k for k in {"llamacpp"}}\n'
    )
    assert name_iterations(tree, {"naive", "vllm", "vllm+cache", "llamacpp"}) == [1, 3, 8]


def test_the_check_finds_a_workload_name_it_must_find() -> None:
    names = set(workload_names())
    assert {"number-story", "sharegpt-chat"} <= names
    tree = ast.parse('if spec.workload == "sharegpt-chat":\n    pass\nfor w in ("number-story", "custom"):\n    pass\n')
    assert name_comparisons(tree, names) == [1] and name_iterations(tree, names) == [3]


def imports_from_lab(path: Path) -> list[str]:
    found = []
    for node in ast.walk(syntax_tree(path)):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and (node.module == "lab" or node.module.startswith("lab."))
        ):
            found.append(f"{relative(path)}:{node.lineno} from {node.module}")
        elif isinstance(node, ast.Import):
            found += [
                f"{relative(path)}:{node.lineno} import {a.name}" for a in node.names if a.name.split(".")[0] == "lab"
            ]
    return found


def test_services_import_nothing_from_lab() -> None:
    found = [line for path in python_files("services") for line in imports_from_lab(path)]
    assert not found, found


def test_db_imports_nothing_from_lab() -> None:
    found = [line for path in python_files("db") for line in imports_from_lab(path)]
    assert not found, found


# Where "redis" or "cache-proxy" spells something other than one of the lab's services.
NOT_A_SERVICE_NAME = {
    "lab/measurement/environment.py": "the redis Python package, whose version a run records",
    "services/cache_proxy/admin.py": "the redis section of the proxy's health answer (its wire format)",
    "services/cache_proxy/resp.py": "the redis:// URL scheme",
    "services/redis_server.py": "the process label of a redis-server made below the catalog (which imports it)",
}


def test_the_labs_own_service_names_and_stop_order_are_written_only_in_the_catalog() -> None:
    """``services/catalog.py`` names the lab's own services (``ServiceKind``) and their stop
    order (``STOP_ORDER``); everyone else uses those, so a rename is one edit."""
    from services.catalog import ServiceKind

    names = {ServiceKind.REDIS.value, ServiceKind.CACHE_PROXY.value}
    spelled = sorted(
        f"{relative(path)}:{node.lineno} {node.value!r}"
        for path in python_files(*SCANNED)
        if relative(path) != "services/catalog.py" and relative(path) not in NOT_A_SERVICE_NAME
        for node in ast.walk(syntax_tree(path))
        if isinstance(node, ast.Constant) and node.value in names
    )
    assert spelled == []
