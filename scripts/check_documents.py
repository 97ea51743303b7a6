"""Documents checked against their data: every measured figure in README.md, BENCHMARKS.md,
RELIABILITY.md and docs/ names its source, and a figure whose source the checkout holds reads as it does there.

Pointers are HTML comments (invisible on GitHub):

    <!-- src: PATH -->                   a report, a runs.csv or a benchmark's output file
    <!-- src: PATH where=COL:VALUE,COL:VALUE col=COL -->   a runs.csv's cells (see below)
    <!-- src: commit SHA PATH -->        a file as a past commit holds it (output not kept now)
    <!-- not-data: WHY -->               settings, targets or arithmetic: not measured figures

Where a pointer applies:

- at the end of a line (a sentence or a table row): that line;
- on a line of its own just above a table: every row of the table;
- on a line of its own just below a heading: the whole section (to the next heading of the
  same or a higher level).

A *figure* is a number with a unit of measurement right after it: ``req/s``, ``tok/s``, ``%``,
``x`` (a ratio), ``ms``, ``s``, ``min``, ``GiB``, ``MiB``, ``GFLOP/s``. Numbers in code spans,
code blocks, HTML comments, headings and links are not figures. A figure outside every
pointer fails the check.

A figure under a file pointer must equal a number of its source after rounding to the
decimals the document shows (``2,201`` matches ``2201.35``; ``67.1%`` matches ``0.671`` or
``67.12``). Selectors narrow a source: in a CSV, ``where=backend:vllm,vus:1`` keeps the matching rows and
``col=output_tok_per_s`` one column (the numbers are then those cells and their mean); in any
other file, ``line="| 50 | vLLM + Redis |"`` keeps the lines that contain the text (quote a
value with spaces).
Exact pointers name one source value per number, so a figure cannot pass by equalling some
other number of the file:

    <!-- src: FILE.json key=PATH;PATH;... -->   each number of the line, in order, is one value
    <!-- src: FILE.csv key=[run_id=2].req_per_s -->   a CSV's cell: its row by its fields, then its column

Outside the dated records (docs/records/, which keep their words and the pointers they were
written with, and are sealed), every pointer must be exact: a loose ``src: PATH``, a selector
that keeps several numbers, or a ``commit`` pointer is itself a finding.

Under a ``key`` pointer every number of the line counts (a count, a unitless cell, an interval's
bounds, a sign), and the line must hold exactly as many numbers as the pointer has paths. A path
is dotted (``hit_path.average.lab.req_per_s``, ``ci95.0`` for a list's first item) and picks one
row of a list by its fields (``rows[peer=GuideLLM 0.8.1,figure=ttft_avg_s].ratio``: exactly one
row must match; quote the pointer's words with spaces); ``=8`` stands for a number written as a
setting, not data. A ``line=`` selector must match exactly one line of its source
(``occurrence=N`` picks the Nth), and the figures must appear in that line in the same order.
A page rendered by ``scripts/render_results.py`` (its first line says so) must equal its
rendering from the data: any line that differs is a finding.
A ``commit`` pointer is not re-read (no git in the fast tier): it says where a figure no
longer kept in the checkout was first written. ``<!-- generated: ... -->`` at the top of a
file (a comparison) marks it as generated from data, and a README.md with a runs.csv beside it
is a report the lab wrote from its runs: the checkout cannot write either again, so each is
checked against its seal (``SHA256SUMS`` beside it, lab.report.seal: any edit by hand is a
finding), and the archive's index against what ``lab archive-reproductions`` writes.

    .venv/bin/python scripts/check_documents.py          # exit 1 and one line a finding
"""

from __future__ import annotations

import csv
import importlib.util
import json
import re
import shlex
import statistics
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = ("README.md", "BENCHMARKS.md", "RELIABILITY.md", "docs")
# Reports and comparisons the lab writes from data: sources themselves.
GENERATED_MARK = "<!-- generated:"
RECORD_NAME = re.compile(r"\d{4}-\d{2}-\d{2}-[a-z0-9-]+\.md")
# Pages this project renders from its data files: checked by rendering them again.
RENDERED_MARK = "<!-- generated: scripts/render_results.py"

UNIT = r"(?:req/s|tok/s|GFLOP/s|%|x(?![\w])|ms\b|s\b|min\b|GiB\b|MiB\b)"
FIGURE = re.compile(r"(?<![\w.,/#-])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?\s?(" + UNIT + ")")
_BARE = r"(\d[\d,]*(?:\.\d+)?)"
_INTERVAL = re.compile(_BARE + r"\s?\[\s*" + _BARE + r",\s*" + _BARE + r"\s*\]\s?(" + UNIT + ")")
POINTER = re.compile(r"<!--\s*(src|not-data):\s*(.*?)\s*-->")
_HIDDEN = (
    re.compile(r"<!--.*?-->"),  # comments (pointers themselves)
    re.compile(r"`[^`]*`"),  # code spans
    re.compile(r"\]\([^)]*\)"),  # link targets
    re.compile(
        r"\b95%(?=\s*$|\s*(?:\w+\s+)?(?:confidence|CI|interval|bound))", re.MULTILINE
    ),  # the interval's level, not a figure
)


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.text}"


@dataclass(frozen=True)
class Pointer:
    kind: str  # "src" or "not-data"
    body: str
    line: int

    def source(self, document: Path, root: Path) -> tuple[Path | None, dict[str, str], str | None]:
        """(the file, its selectors, an error) of a ``src`` pointer; no file for a commit pointer."""
        words = self.body.split()
        if not words:
            return None, {}, "a src pointer names no file"
        if words[0] == "commit":  # free words may follow (why the output is not kept)
            if len(words) < 3 or not re.fullmatch(r"[0-9a-f]{7,40}", words[1]):
                return None, {}, f"'src: {self.body}': a commit pointer is 'commit SHA PATH'"
            return None, {}, None
        try:
            words = shlex.split(self.body)
        except ValueError as error:
            return None, {}, f"'src: {self.body}': {error}"
        selectors = dict(word.split("=", 1) for word in words[1:] if "=" in word)
        for candidate in (root / words[0], document.parent / words[0]):
            if candidate.is_file():
                return candidate, selectors, None
        return None, selectors, f"source {words[0]} does not exist"


def figures(line: str) -> list[tuple[str, int, str]]:
    """The figures of a line: (the number as written, its decimals, its unit)."""
    visible = line
    for pattern in _HIDDEN:
        visible = pattern.sub(" ", visible)
    # "2,201 [2,067, 2,344] req/s": the figure and both bounds carry the unit written after them.
    visible = _INTERVAL.sub(r"\1 \4 [\2 \4, \3 \4]", visible)
    return [
        (whole + (fraction or ""), len(fraction) - 1 if fraction else 0, unit)
        for whole, fraction, unit in FIGURE.findall(visible)
    ]


@lru_cache(maxsize=256)
def _file_numbers(path: Path) -> tuple[float, ...]:
    text = path.read_text(encoding="utf-8", errors="replace")
    return tuple(float(n.replace(",", "")) for n in re.findall(r"-?\d[\d,]*(?:\.\d+)?(?:[eE]-?\d+)?", text))


def source_numbers(path: Path, selectors: dict[str, str]) -> tuple[float, ...]:
    """The numbers a figure under this pointer may equal."""
    if path.suffix != ".csv":
        if "line" not in selectors:
            return _file_numbers(path)
        kept = [line for line in path.read_text(encoding="utf-8").splitlines() if selectors["line"] in line]
        return tuple(float(n.replace(",", "")) for n in re.findall(r"-?\d[\d,]*(?:\.\d+)?", "\n".join(kept)))
    rows = list(csv.DictReader(path.open(encoding="utf-8")))
    for condition in filter(None, selectors.get("where", "").split(",")):
        column, _, value = condition.partition(":")
        rows = [row for row in rows if row.get(column) == value]
    columns = [selectors["col"]] if "col" in selectors else list(rows[0]) if rows else []
    numbers = []
    for column in columns:
        cells = []
        for row in rows:
            try:
                cells.append(float(row.get(column) or "nan"))
            except ValueError:
                continue
        cells = [cell for cell in cells if cell == cell]
        numbers += cells + ([statistics.fmean(cells)] if cells else [])
    return tuple(numbers)


def line_numbers(visible: str) -> list[tuple[str, float, int, bool]]:
    """Every number of a line as written: (its text, its value with its sign, its decimals,
    whether a percent sign follows). A number inside a word (``p99``, ``SmolLM2``, ``135M``) is
    not one; ``x1.082`` and ``1.082x`` are; a dash is a sign only where no number precedes it."""
    found = []
    for match in re.finditer(r"([+\-\u2212]?)(\d{1,3}(?:,\d{3})+(?!\d)|\d+)(\.\d+)?(\s?%)?", visible):
        sign, whole, fraction, percent = match.groups()
        before = visible[: match.start()]
        after = visible[match.end() :]
        previous = before[-1:] or " "
        if (previous.isalnum() and previous not in "x\u00d7") or previous in "._/#\\":
            continue
        if (after[:1].isalpha() and after[:1] != "x") or (after[:1] == "." and after[1:2].isdigit()):
            continue
        if sign and before[-1:].isdigit():  # "0.58-0.71": a range, not a negative number
            sign = ""
        value = float(whole.replace(",", "") + (fraction or ""))
        text = match.group(0).strip()
        found.append(
            (text, -value if sign in ("-", "\u2212") else value, len(fraction) - 1 if fraction else 0, bool(percent))
        )
    return found


def resolve_key(document: Any, path: str) -> float:
    """One value of a JSON document by its path: dotted names, list indices and ``[field=value,...]``
    (exactly one row of a list must match). Raises ValueError with what went wrong."""
    value = document
    for match in re.finditer(r"\[([^\]]*)\]|([^.\[\]]+)", path):
        selector, name = match.groups()
        if selector is not None:
            wanted = dict(condition.split("=", 1) for condition in selector.split(",") if "=" in condition)
            rows = [
                row
                for row in (value if isinstance(value, list) else [])
                if isinstance(row, dict) and all(str(row.get(field)) == text for field, text in wanted.items())
            ]
            if len(rows) != 1:
                raise ValueError(f"[{selector}] matches {len(rows)} rows, not one")
            value = rows[0]
        elif isinstance(value, list) and name.isdigit() and int(name) < len(value):
            value = value[int(name)]
        elif isinstance(value, dict) and name in value:
            value = value[name]
        else:
            raise ValueError(f"no {name!r} in {path!r}")
    if isinstance(value, str):  # a CSV cell
        try:
            value = float(value)
        except ValueError:
            raise ValueError(f"{path!r} is not a number") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{path!r} is not a number")
    return float(value)


def equal_as_written(value: float, decimals: int, percent: bool, source: float) -> bool:
    """Whether a number as written equals a source value after rounding to its decimals (a share
    stored as 0.983 reads 98.3%)."""
    tolerance = 0.5 * 10**-decimals + 1e-9
    return abs(source - value) <= tolerance or (percent and abs(source * 100 - value) <= tolerance)


@lru_cache(maxsize=64)
def _json_document(path: Path) -> Any:
    """A JSON file, or a CSV file as its list of rows (``[run_id=2].req_per_s`` picks a cell)."""
    if path.suffix == ".csv":
        with path.open(encoding="utf-8") as rows:
            return list(csv.DictReader(rows))
    return json.loads(path.read_text(encoding="utf-8"))


def check_keyed(visible: str, source: Path, keys: str) -> list[str]:
    """A line under a ``key`` pointer: every number, in order, equals its own source value."""
    paths = keys.split(";")
    numbers = line_numbers(visible)
    if len(numbers) != len(paths):
        shown = ", ".join(text for text, *_ in numbers)
        return [f"{len(numbers)} numbers ({shown}) for {len(paths)} keys of {source.name}"]
    problems = []
    for (text, value, decimals, percent), path in zip(numbers, paths, strict=True):
        if path.startswith("="):  # a setting written as a number: it must read as stated
            expected = float(path[1:])
        else:
            try:
                expected = resolve_key(_json_document(source), path)
            except ValueError as error:
                problems.append(f"{text}: {error}")
                continue
        if not equal_as_written(value, decimals, percent, expected):
            problems.append(f"{text} is not {path} of {source.name} ({expected:g})")
    return problems


def selected_lines(path: Path, selectors: dict[str, str]) -> tuple[list[str], str | None]:
    """The lines a ``line=`` selector keeps, and an error unless exactly one (or the ``occurrence``) is."""
    kept = [line for line in path.read_text(encoding="utf-8").splitlines() if selectors["line"] in line]
    if "occurrence" in selectors:
        index = int(selectors["occurrence"]) - 1
        return (kept[index : index + 1], None) if 0 <= index < len(kept) else ([], "no such occurrence")
    if len(kept) != 1:
        return kept, f"line={selectors['line']!r} matches {len(kept)} lines of {path.name}, not one"
    return kept, None


def in_order(found: list[tuple[str, int, str]], source_line: str) -> bool:
    """Whether the figures appear in the source line in the same order (each after the last)."""
    numbers = [float(n.replace(",", "")) for n in re.findall(r"-?\d[\d,]*(?:\.\d+)?", source_line)]
    position = 0
    for figure, decimals, unit in found:
        while position < len(numbers) and not matches(figure, decimals, unit, (numbers[position],)):
            position += 1
        if position == len(numbers):
            return False
        position += 1
    return True


def check_rendered(path: Path, root: Path) -> list[Finding]:
    """A page scripts/render_results.py renders: every line that differs from its rendering."""
    spec = importlib.util.spec_from_file_location("render_results", root / "scripts" / "render_results.py")
    if spec is None or spec.loader is None or not (root / "scripts" / "render_results.py").is_file():
        return [Finding(path.name, 1, "rendered page, but scripts/render_results.py is missing")]
    renderer = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("render_results", renderer)
    spec.loader.exec_module(renderer)
    name = path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name
    pages = {page.name: render for page, render in renderer.PAGES.items() if page.parent.name == path.parent.name}
    if path.name not in pages:
        return [Finding(name, 1, "no renderer for this page")]
    expected = pages[path.name](root).splitlines()
    actual = path.read_text(encoding="utf-8").splitlines()
    findings = [
        Finding(name, number, f"differs from its rendering from the data: {line.strip()[:80]!r}")
        for number, (line, want) in enumerate(zip(actual, expected, strict=False), start=1)
        if line != want
    ]
    if len(actual) != len(expected):
        findings.append(Finding(name, min(len(actual), len(expected)) + 1, "the rendering has another number of lines"))
    return findings


def matches(number: str, decimals: int, unit: str, candidates: tuple[float, ...]) -> bool:
    """Whether a figure as written equals a source number after rounding to its decimals."""
    value = float(number.replace(",", ""))
    tolerance = 0.5 * 10**-decimals + 1e-9
    scales = (1.0, 100.0) if unit == "%" else (1.0,)  # a share stored as 0.671 reads 67.1%
    return any(abs(candidate * scale - value) <= tolerance for candidate in candidates for scale in scales)


def _coverage(lines: list[str]) -> Iterator[tuple[int, Pointer | None]]:
    """Each line's number (from 1) with the pointer that covers it, None for none."""
    section: list[tuple[int, Pointer]] = []  # (heading level, pointer)
    table: Pointer | None = None
    pending_table: Pointer | None = None
    for index, line in enumerate(lines):
        stripped = line.strip()
        heading = re.match(r"^(#+)\s", stripped)
        own = POINTER.fullmatch(stripped)
        if heading:
            level = len(heading.group(1))
            section = [(lvl, p) for lvl, p in section if lvl < level]
            table = pending_table = None
            if index + 1 < len(lines) and (below := POINTER.fullmatch(lines[index + 1].strip())):
                section.append((level, Pointer(below.group(1), below.group(2), index + 2)))
            yield index + 1, None
            continue
        if own:
            if index and not re.match(r"^#+\s", lines[index - 1].strip()):
                pending_table = Pointer(own.group(1), own.group(2), index + 1)
            yield index + 1, None
            continue
        if stripped.startswith("|"):
            table = table or pending_table
        else:
            table = None
            if stripped:
                pending_table = None
        inline = POINTER.search(re.sub(r"`[^`]*`", " ", line))  # a pointer shown in a code span is an example
        pointer = Pointer(inline.group(1), inline.group(2), index + 1) if inline else None
        yield index + 1, pointer or table or (section[-1][1] if section else None)


def check_document(path: Path, root: Path = PROJECT_ROOT) -> list[Finding]:
    """Every figure of one document without a pointer, or differing from its source."""
    text = path.read_text(encoding="utf-8")
    name = path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name
    if text.startswith(RENDERED_MARK):
        return check_rendered(path, root)
    if text.lstrip().startswith(GENERATED_MARK) or (path.name == "README.md" and (path.parent / "runs.csv").is_file()):
        return []
    lines = text.splitlines()
    findings: list[Finding] = []
    in_code = False
    # A dated record keeps its words and its pointers as written (its seal guards them); every
    # other document ties each figure to one value of its source (a key= pointer).
    frozen = path.parent.name == "records" and RECORD_NAME.fullmatch(path.name) is not None
    for number, pointer in _coverage(lines):
        line = lines[number - 1]
        if line.strip().startswith("```"):
            in_code = not in_code
            continue
        if in_code or line.lstrip().startswith("#"):
            continue
        found = figures(line)
        keyed = pointer is not None and pointer.kind == "src" and " key=" in f" {pointer.body}"
        if not found and not keyed:
            continue
        if pointer is None:
            shown = ", ".join(f"{n}{'' if u in '%x' else ' '}{u}" for n, _, u in found[:3])
            findings.append(Finding(name, number, f"figure without a source pointer: {shown}"))
            continue
        if pointer.kind == "not-data":
            continue
        source, selectors, error = pointer.source(path, root)
        if "key" not in selectors and not frozen:
            findings.append(
                Finding(name, number, f"a loose pointer ({pointer.body[:60]}): name each figure's value (key=)")
            )
            continue
        if error:
            findings.append(Finding(name, number, error))
            continue
        if source is None:  # a commit pointer
            continue
        if "key" in selectors:
            visible = line
            for pattern in _HIDDEN:
                visible = pattern.sub(" ", visible)
            findings += [Finding(name, number, problem) for problem in check_keyed(visible, source, selectors["key"])]
            continue
        if "line" in selectors and source.suffix != ".csv":
            kept, problem = selected_lines(source, selectors)
            if problem or not in_order(found, kept[0]):
                findings.append(Finding(name, number, problem or f"figures not in order in {pointer.body}"))
            continue
        candidates = source_numbers(source, selectors)
        for figure, decimals, unit in found:
            if not matches(figure, decimals, unit, candidates):
                findings.append(Finding(name, number, f"{figure}{unit} is not in {pointer.body} (after rounding)"))
    return findings


def documents(root: Path = PROJECT_ROOT) -> list[Path]:
    """README.md, BENCHMARKS.md, RELIABILITY.md and every Markdown file under docs/."""
    found: list[Path] = []
    for entry in DOCUMENTS:
        path = root / entry
        found += sorted(path.rglob("*.md")) if path.is_dir() else [path] if path.is_file() else []
    return found


def check_sealed_documents(root: Path) -> list[Finding]:
    """The documents written once and never again: the reports and comparisons under
    docs/reproduction/ (the checkout cannot write them again) and the dated records under
    docs/records/ (they keep their words), each file against its seal (lab.report.seal); and the
    archive's index and its reports' top lines against what ``lab archive-reproductions`` writes."""
    reproductions = root / "docs" / "reproduction"
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from lab.report.archive import archive_texts, stale_files
    from lab.report.seal import all_problems, seal_problems

    def name(path: Path) -> str:
        return path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name

    findings = [Finding(name(path), 1, why) for path, why in all_problems(reproductions)]
    records = root / "docs" / "records"
    if records.is_dir():  # dated records keep their words: sealed when written (make results)
        kept = sorted(path for path in records.glob("*.md") if RECORD_NAME.fullmatch(path.name))
        findings += [
            Finding(name(path), 1, why)
            for path, why in seal_problems(
                records, kept, sealed_by="make results", rule="the record as written (write a new record instead)"
            )
        ]
    archive = reproductions / "archive"
    if archive.is_dir():
        findings += [
            Finding(name(path), 1, "differs from what `python -m lab archive-reproductions` writes from the reports")
            for path in stale_files(archive_texts(archive))
        ]
    return findings


def check(root: Path = PROJECT_ROOT) -> list[Finding]:
    return [finding for path in documents(root) for finding in check_document(path, root)] + (
        check_sealed_documents(root)
    )


def main() -> int:
    findings = check()
    for finding in findings:
        print(finding)
    print(f"{len(findings)} finding(s) in {len(documents())} documents", file=sys.stderr)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
