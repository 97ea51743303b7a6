"""Names that resolve: every file, module, class and function a docstring, a comment or a document
names exists in the repository, and nothing points outside it.

What it reads: the docstrings and comments of every Python file (a scan of the text), the
comments of requirements.txt, the Makefile and the shell scripts, and the Markdown documents
(README.md, BENCHMARKS.md, RELIABILITY.md, every README.md under scripts/, benchmarks/ and tests/,
and docs/ but for its records and the lab's generated reports, which keep the words they were
written with). What it checks:

- a path (``lab/run/steps.py``, ``docs/reproduction/``, a link's target) exists, relative to the
  repository root, to a folder above the naming file or to a package; a bare file name with a
  ``.py`` suffix exists somewhere in the tree;
- a dotted name that starts with one of the project's packages (``lab.measurement.results.RunResults``)
  is a module, or a module's top-level name, or a name in one of its classes;
- a module-relative name in double backticks (``steps.RunSteps``) names a module of the tree
  and a name in it (a lowercase name only when the module is beside the naming file: elsewhere
  it may be a setting's key);
- a section named after a document (``docs/results/index.md, "Set-up and test times"``) is a
  heading of it;
- nothing points outside the repository: no ``../`` that leaves it, no absolute path of a machine
  (``/work/...``, ``/home/...``).

Placeholders (``NAME``, ``FILE``, ``<...>``, ``*``, ``...``), URLs, and paths under what git
ignores (``data/``, ``models/``, ``.venv/``, ``site/``) are not names.

    .venv/bin/python scripts/check_names.py          # exit 1 and one line a finding
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("lab", "services", "db", "pages", "benchmarks", "scripts", "tests")
PYTHON_FOLDERS = (*PACKAGES, "streamlit_app.py", "web_app.py")
TOP_LEVEL = (*PACKAGES, "docs", "k6", ".ci")
COMMENTED_FILES = ("requirements.txt", "Makefile", "scripts/setup.sh", "scripts/check.sh", ".ci/run")
DOCUMENTS = ("README.md", "BENCHMARKS.md", "RELIABILITY.md", "docs", "scripts/README.md", "benchmarks/README.md")
# Words kept as first written (records) and reports the lab generates: not checked.
NOT_CHECKED = ("docs/records/", "docs/reproduction/")
IGNORED_PREFIXES = (".venv/", "data/", "models/", "site/", "k6-out/", "test-artifacts/", ".mypy_cache/", ".git/")
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|home|root|Users)/[\w./-]+")
PATH = re.compile(r"(?<![\w/.:~$@-])((?:\.{1,2}/)*(?:[\w.-]+/)+[\w.-]*|[\w-]+\.(?:py|md|js|sh|toml|lua))(?![\w/])")
DOTTED = re.compile(r"(?<![\w./-])((?:" + "|".join(PACKAGES) + r")(?:\.\w+)+)")
SECTION = re.compile(r"([\w./-]+\.md),?\s+\"([^\"]+)\"")
RELATIVE = re.compile(r"``([a-z_][a-z0-9_]*)\.([A-Za-z_]\w*)(?:\.\w+)*``")
TRIPLE_QUOTED = re.compile(r'[rbuf]*("""|\'\'\')(.*?)\1', re.DOTALL)
STRING_LITERAL = re.compile(r"'(?:\\.|[^'\\])*'|\"(?:\\.|[^\"\\])*\"")
URL = re.compile(r"\w+://\S+|[\w.-]+@[\w.-]+|\b[\w.-]+\.(?:org|com|net|io)\b")
FILE_SUFFIXES = (
    *("py", "md", "json", "jsonl", "ndjson", "csv", "html", "txt", "toml", "jinja", "js", "lua", "sh", "gz"),
    *("db", "sql", "sqlite", "log", "lock", "yaml", "yml", "png"),
)
# Pages the site generates at build time (scripts/docs_reference.py), named from docs/.
GENERATED_PAGES = ("reference/", "../reference/", "docs/reference/")
PLACEHOLDER = re.compile(r"[*<>{}$]|\.\.\.|\b[A-Z][A-Z_]{2,}\b|\bN\b")


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.text}"


def _python_files(root: Path) -> list[Path]:
    found: list[Path] = []
    for entry in PYTHON_FOLDERS:
        path = root / entry
        found += sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.is_file() else []
    return [path for path in found if "__pycache__" not in path.parts]


@cache
def syntax_tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def statements(node: ast.AST) -> Iterator[ast.AST]:
    """The node and every statement under it (bodies of classes, functions, ifs, loops, withs and
    trys), never an expression's inside: where docstrings and definitions are, at a tenth of the walk."""
    yield node
    for field in ("body", "orelse", "finalbody", "handlers"):
        for child in getattr(node, field, ()) or ():
            if isinstance(child, ast.AST):
                yield from statements(child)


def python_texts(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every docstring (a triple-quoted string first in its file or right after a
    ``def``/``class`` line) and every comment of a Python file. A comment is what follows a ``#``
    outside the line's string literals; both found by scanning the text (parsing every file took
    most of the check's time)."""
    text = path.read_text(encoding="utf-8")
    for match in TRIPLE_QUOTED.finditer(text):
        before = text[: match.start()].rstrip()
        if (
            before
            and not before.endswith(":")
            and not all(line.lstrip().startswith("#") or not line.strip() for line in before.splitlines())
        ):
            continue  # a long string of the code (a test's planted text), not a docstring
        first = text.count("\n", 0, match.start()) + 1
        for offset, line in enumerate(match.group(2).splitlines()):
            yield first + offset, line
    for number, line in enumerate(text.splitlines(), start=1):
        if "#" in line and '"""' not in line and "'''" not in line:
            code = STRING_LITERAL.sub('""', line)
            if "#" in code:
                yield number, code[code.index("#") :]


def comment_texts(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of the ``#`` comments of a requirements file, a Makefile or a shell script."""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if "#" in line and not line.startswith("#!"):
            yield number, line[line.index("#") :]


def markdown_texts(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of a Markdown document, HTML comments (the figures' pointers) left out."""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        yield number, re.sub(r"<!--.*?-->", " ", line)


@cache
def top_level_names(module: Path) -> frozenset[str]:
    """The names a module defines or imports at its top level, and those its classes define."""
    names: set[str] = set()
    for node in statements(syntax_tree(module)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(target.id for target in targets if isinstance(target, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return frozenset(names)


def module_file(root: Path, parts: list[str]) -> Path | None:
    """The file of a dotted module path (a package's ``__init__.py`` or a folder without one)."""
    base = root.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return base if base.is_dir() else None


def check_dotted(root: Path, name: str) -> str | None:
    """None if ``name`` (``lab.measurement.results.RunResults``) resolves, else why not."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        module = module_file(root, parts[:cut])
        if module is None:
            continue
        rest = parts[cut:]
        if not rest or module.is_dir():
            return None if not rest else f"{name}: no module {'.'.join(parts[: cut + 1])}"
        if rest[0] in top_level_names(module):
            return None
        return f"{name}: {'.'.join(parts[:cut])} has no {rest[0]}"
    return f"{name}: no such module"


@cache
def file_index(root: Path) -> dict[str, tuple[Path, ...]]:
    """Every file and folder of the tree's top-level folders by its name (one walk of the tree)."""
    index: dict[str, list[Path]] = {}
    for folder in TOP_LEVEL:
        if (root / folder).is_dir():
            for path in (root / folder).rglob("*"):
                if "__pycache__" not in path.parts:
                    index.setdefault(path.name, []).append(path)
    return {name: tuple(paths) for name, paths in index.items()}


def files_named(root: Path, name: str) -> tuple[Path, ...]:
    return file_index(root).get(name, ()) + ((root / name,) if (root / name).exists() else ())


def check_path(root: Path, origin: Path, token: str) -> str | None:
    """None if the path resolves (to a file or folder of the repository), else why not."""
    token = token.rstrip(".,:;)")
    if not token or PLACEHOLDER.search(token) or token.startswith(IGNORED_PREFIXES) or token in ("./", "../"):
        return None
    if token.endswith("-") or token.startswith(GENERATED_PAGES):  # a path cut at a line's end; a built page
        return None
    if token.startswith("../"):
        if not token.endswith(("/", *(f".{suffix}" for suffix in FILE_SUFFIXES))):
            return None  # an input tried (``../../etc/passwd``), not a file of ours
        target = (origin.parent / token).resolve()
        if target.is_relative_to(root) and target.exists():
            return None
        if not target.is_relative_to(root) or not (root / token).resolve().is_relative_to(root):
            return f"{token} points outside the repository"  # from its folder, or from the root
        return f"{token} does not exist"
    first = token.split("/")[0]
    if "/" not in token:  # a bare file name: in the naming file's folder, or anywhere in the tree
        if (origin.parent / token).exists() or files_named(root, token):
            return None
        return f"{token} does not exist"
    if first not in TOP_LEVEL and not (root / first).is_file():  # relative to a folder above, or a package
        folders = [*(folder for folder in origin.parents if folder.is_relative_to(root)), *(root / p for p in PACKAGES)]
        if any((folder / token).exists() for folder in folders) or (root / "lab" / token).exists():
            return None
        return None if not token.endswith((".py", ".md")) else f"{token} does not exist"
    return None if (root / token).exists() or (origin.parent / token).exists() else f"{token} does not exist"


def check_relative(root: Path, origin: Path, module: str, name: str) -> str | None:
    """``module.Name`` in double backticks: a module of the naming file's folder or of the tree."""
    if name in FILE_SUFFIXES or module == origin.stem:
        return None  # a file name (``k6.ndjson``), checked as a path; the module's own object (``app.state``)
    beside = origin.parent / f"{module}.py"
    if not beside.is_file() and (module in top_level_names(origin) or installed(module)):
        return None  # an imported name, a library (``httpx.AsyncClient``): not ours to resolve
    existing = [beside] if beside.is_file() else [path for path in files_named(root, f"{module}.py") if path.is_file()]
    if not existing:
        return f"{module}.{name}: no module {module}.py" if name[:1].isupper() else None
    if not beside.is_file() and not name[:1].isupper():
        return None  # a lowercase name of a module elsewhere may be a key (``base.load``)
    if any(name in top_level_names(candidate) for candidate in existing):
        return None
    return f"{module}.{name}: {existing[0].relative_to(root).as_posix()} has no {name}"


def check_section(root: Path, origin: Path, document: str, section: str) -> str | None:
    """``docs/results/index.md, "Set-up and test times"``: the document has a heading that starts with
    the words."""
    candidates = [root / document, origin.parent / document]
    found = next((path for path in candidates if path.is_file()), None)
    if found is None:
        return None  # the path itself is checked (and reported) as a path
    lines = found.read_text(encoding="utf-8").splitlines()
    headings = [line.lstrip("#").strip().lower() for line in lines if line.startswith("#")]
    wanted = section.strip().lower()
    if any(line.startswith(wanted) for line in headings if line):
        return None
    return f'{document} has no section "{section}"'


@cache
def installed(module: str) -> bool:
    """Whether a top-level module of the standard library or the environment has this name."""
    if module in sys.stdlib_module_names:
        return True
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def check_text(root: Path, origin: Path, number: int, text: str, *, python: bool) -> Iterator[Finding]:
    name = origin.relative_to(root).as_posix()
    for match in MACHINE_PATH.finditer(text):
        if "..." in match.group(0):
            continue
        yield Finding(name, number, f"{match.group(0)}: an absolute path of a machine")
    visible = URL.sub(" ", MACHINE_PATH.sub(" ", text))
    for match in DOTTED.finditer(visible):
        if match.group(1).rsplit(".", 1)[-1] in FILE_SUFFIXES or PLACEHOLDER.search(match.group(1)):
            continue  # a file name (``pages.py``), checked as a path; a placeholder
        problem = check_dotted(root, match.group(1).rstrip("."))
        if problem:
            yield Finding(name, number, problem)
    for match in PATH.finditer(DOTTED.sub(" ", visible)):
        token = match.group(1)
        if not python and "/" not in token and not token.endswith(".py"):
            continue
        problem = check_path(root, origin, token)
        if problem:
            yield Finding(name, number, problem)
    for match in SECTION.finditer(visible):
        problem = check_section(root, origin, match.group(1), match.group(2))
        if problem:
            yield Finding(name, number, problem)
    if python:
        for match in RELATIVE.finditer(visible):
            if match.group(1) in PACKAGES:
                continue
            problem = check_relative(root, origin, match.group(1), match.group(2))
            if problem:
                yield Finding(name, number, problem)


def documents(root: Path) -> list[Path]:
    found: list[Path] = []
    for entry in DOCUMENTS:
        path = root / entry
        found += sorted(path.rglob("*.md")) if path.is_dir() else [path] if path.is_file() else []
    found += sorted((root / "tests").rglob("README.md"))
    return [path for path in found if not path.relative_to(root).as_posix().startswith(NOT_CHECKED)]


def check(root: Path = PROJECT_ROOT) -> list[Finding]:
    findings: list[Finding] = []
    for path in _python_files(root):
        for number, text in python_texts(path):
            findings += check_text(root, path, number, text, python=True)
    for entry in COMMENTED_FILES:
        if (root / entry).is_file():
            for number, text in comment_texts(root / entry):
                findings += check_text(root, root / entry, number, text, python=True)
    for path in documents(root):
        for number, text in markdown_texts(path):
            findings += check_text(root, path, number, text, python=False)
    return findings


def main() -> int:
    findings = check()
    for finding in findings:
        print(finding)
    print(f"{len(findings)} finding(s)", file=sys.stderr)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
