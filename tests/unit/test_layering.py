"""Layering, read from the source with ``ast``: imports go downward only and lab/ has no cycle."""

from __future__ import annotations

import ast
import functools
import graphlib
import warnings
from pathlib import Path

from tests.support.source_files import syntax_tree

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def imports_of(path: Path, *, type_checking: bool = False) -> frozenset[str]:
    """Every module ``path`` imports, at the top or inside a function (relative ones resolved);
    imports only for type checkers (``if TYPE_CHECKING:``) are not imports at run time, so
    they count only with ``type_checking``."""
    package = ".".join(path.relative_to(PROJECT_ROOT).with_suffix("").parts[:-1])
    tree = syntax_tree(path)
    type_only = (
        set()
        if type_checking
        else {
            id(child)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for statement in node.body
            for child in ast.walk(statement)
        }
    )
    return frozenset(
        name for node in ast.walk(tree) if id(node) not in type_only for name in imported_names(node, package)
    )


def imported_names(node: ast.AST, package: str) -> list[str]:
    """The modules (and names in them) an import statement in ``package`` names, relative ones resolved."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        parts = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*parts, base] if base else parts)
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def modules(folder: str) -> dict[str, Path]:
    return {
        ".".join(path.relative_to(PROJECT_ROOT).with_suffix("").parts).removesuffix(".__init__"): path
        for path in sorted((PROJECT_ROOT / folder).rglob("*.py"))
    }


def offending(folder: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{name} imports {imported}"
        for name, path in modules(folder).items()
        for imported in imports_of(path)
        if imported.split(".")[0] in forbidden or any(imported == f or imported.startswith(f + ".") for f in forbidden)
    )


def test_db_imports_nothing_from_lab_pages_or_services() -> None:
    assert offending("db", ("lab", "pages", "services", "streamlit")) == []


def test_the_domain_never_imports_streamlit_or_the_pages() -> None:
    assert offending("lab", ("streamlit", "pages")) == []


# Packages without type information, each behind one typed module: the rest of the strict code
# (lab, db, services) never sees Any from them.
UNTYPED_BEHIND = {"scipy": "lab.analysis._scipy_stats", "plotly": "lab.report.plotly_figures"}
# Still drawing with plotly itself: the semantic cache's chart, changing with that work (move it to
# lab.report.plotly_figures once it settles).
UNTYPED_NOT_YET_BEHIND = {"lab.report.semantic_cache"}


def test_scipy_and_plotly_are_imported_by_their_typed_modules_only() -> None:
    found = sorted(
        f"{name} imports {imported}"
        for folder in ("lab", "db", "services")
        for name, path in modules(folder).items()
        for imported in imports_of(path, type_checking=True)
        if (package := imported.split(".")[0]) in UNTYPED_BEHIND
        and name != UNTYPED_BEHIND[package]
        and name not in UNTYPED_NOT_YET_BEHIND
    )
    assert found == []


def test_the_report_never_imports_the_cli() -> None:
    assert offending("lab/report", ("lab.cli",)) == []


def test_pages_never_import_the_cli() -> None:
    assert offending("pages", ("lab.cli",)) == []


def test_the_k6_driver_does_not_depend_on_the_service_supervisor() -> None:
    assert not any(
        m.startswith("services.supervisor") for m in imports_of(PROJECT_ROOT / "lab" / "run" / "k6_driver.py")
    )


def test_lab_has_no_import_cycle() -> None:
    """No cycle, imports for type checkers included: a cycle hidden behind TYPE_CHECKING is
    still two modules that cannot be understood (or moved) one without the other."""
    lab = modules("lab")

    def reexport(a: str, b: str) -> bool:
        # A package's __init__ re-exporting its own submodules is not a cycle between modules.
        return a == b.rsplit(".", 1)[0] or b == a.rsplit(".", 1)[0]

    graph = {
        name: {target for imported in imports_of(path, type_checking=True) if (target := imported) in lab}
        - {name}
        - {target for target in lab if reexport(name, target)}
        for name, path in lab.items()
    }
    try:
        graphlib.TopologicalSorter(graph).prepare()  # linear in the graph: it names one cycle if there is any
    except graphlib.CycleError as cycle:
        raise AssertionError(f"import cycle: {' -> '.join(cycle.args[1])}") from None


# Sizes past which a module or a function is worth a second look: a smell detector, not the
# architecture (a module that reads well as one is better than one idea split over five).
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60


def oversized(root: Path = PROJECT_ROOT, folders: tuple[str, ...] = ("lab", "services", "pages", "db")) -> list[str]:
    """Every module over :data:`MAX_MODULE_LINES` and function over :data:`MAX_FUNCTION_LINES`, named."""
    found: list[str] = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            source = path.read_text(encoding="utf-8")
            name = str(path.relative_to(root))
            if len(source.splitlines()) > MAX_MODULE_LINES:
                found.append(f"{name}: {len(source.splitlines())} lines")
            found.extend(
                f"{name}: {node.name}() {node.end_lineno - node.lineno + 1} lines"
                for node in ast.walk(syntax_tree(path))
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and node.end_lineno is not None
                and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
            )
    return found


def test_sizes_past_the_threshold_are_named_as_a_warning() -> None:
    """A module over 500 lines or a function over 60 is named in a warning (pytest's summary),
    never a failure: whether it does one job is a reader's call, not a line count's."""
    for item in oversized():
        warnings.warn(f"{item}: past the size threshold, worth a look (one job?)", SizeWarning, stacklevel=1)


class SizeWarning(UserWarning):
    """A module or function past the size threshold."""


def test_the_size_scan_names_the_module_and_the_function(tmp_path: Path) -> None:
    (tmp_path / "big").mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES + 1))
    (tmp_path / "big" / "module.py").write_text(f"def long_one() -> None:\n{body}\n" + "\n" * MAX_MODULE_LINES)
    assert oversized(tmp_path, ("big",)) == [
        f"big/module.py: {MAX_FUNCTION_LINES + 2 + MAX_MODULE_LINES} lines",
        f"big/module.py: long_one() {MAX_FUNCTION_LINES + 2} lines",
    ]


def package_of(module: str) -> str:
    """The unit the package-level graph is drawn between: ``lab.specs.schema`` is in
    ``lab.specs``; a top-level module (``lab.settings``) is its own unit."""
    return ".".join(module.split(".")[:2])


def package_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every group of packages that import each other round a loop (strongly connected
    components with more than one member, by Tarjan's algorithm), sorted."""
    index: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = lowest[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                connect(target)
                lowest[node] = min(lowest[node], lowest[target])
            elif target in stack:
                lowest[node] = min(lowest[node], index[target])
        if lowest[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(groups)


def test_lab_packages_have_no_import_cycle() -> None:
    """No cycle between lab/'s packages (and its top-level modules), imports for type checkers
    included: a package is a layer only when nothing below it imports it back. Each edge is
    named with the module imports that make it, so a failure says which import to move."""
    lab = modules("lab")
    edges: dict[tuple[str, str], list[str]] = {}
    for name, path in lab.items():
        for imported in imports_of(path, type_checking=True):
            if imported in lab and imported != "lab" and package_of(imported) != package_of(name):
                edges.setdefault((package_of(name), package_of(imported)), []).append(f"{name} -> {imported}")
    graph: dict[str, set[str]] = {package_of(name): set() for name in lab if name != "lab"}
    for source, target in edges:
        graph[source].add(target)
    described = []
    for group in package_cycles(graph):
        # The fewest imports first: a package pair held by one import is most likely the one to move.
        pairs = sorted(((a, b), whys) for (a, b), whys in edges.items() if a in group and b in group)
        pairs.sort(key=lambda pair: len(pair[1]))
        described.append(
            f"{', '.join(group)}: "
            + "; ".join(f"{a} -> {b} by {', '.join(sorted(set(whys)))}" for (a, b), whys in pairs)
        )
    assert described == []


def top_level_imports(path: Path) -> frozenset[str]:
    """The modules ``path`` imports when it is loaded: its module-level imports (those inside a
    function or under ``if TYPE_CHECKING:`` wait for their use)."""
    package = ".".join(path.relative_to(PROJECT_ROOT).with_suffix("").parts[:-1])
    return frozenset(name for node in syntax_tree(path).body for name in imported_names(node, package))


def loaded_with(module: str) -> set[str]:
    """Every module of the project, and every outside package, that loading ``module`` loads."""
    ours = {**modules("lab"), **modules("db"), **modules("services")}
    seen: set[str] = set()
    outside: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parents = [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
        for imported in [*top_level_imports(ours[name]), *parents]:
            if imported in ours:
                todo.append(imported)
            elif imported.split(".")[0] not in {"lab", "db", "services"}:
                outside.add(imported.split(".")[0])
    return outside


def test_the_command_line_starts_without_the_heavy_analysis_libraries() -> None:
    """Every ``python -m lab`` process (each worker, each ``lab run``) loads the CLI's entry to
    parse its arguments: scipy and pandas (1.6 s of a 2.9 s start) wait until a command uses them."""
    assert {"scipy", "pandas", "torch", "plotly", "streamlit"}.isdisjoint(loaded_with("lab.cli.entry"))


def test_no_test_module_imports_another() -> None:
    """Helpers two test modules share live in tests/support/, never in a test module another imports."""
    found = sorted(
        f"{name} imports {imported}"
        for name, path in modules("tests").items()
        for imported in imports_of(path, type_checking=True)
        if any(part.startswith("test_") for part in imported.split(".")[1:3]) and imported.split(".")[0] == "tests"
    )
    assert found == []
