"""A published report's seal: the SHA-256 of each file as the lab wrote it, so an edit by hand shows.

A reproduction report (README.md, report.html, runs.csv, charts/) is written by the code that took
its runs, and a comparison of reports by ``lab compare-reproductions``; neither can be written again
from the checkout (the runs' database is not committed, an older report's code is an older commit),
so the documents check cannot re-render them. It checks their seal instead: a ``SHA256SUMS`` file
in the report's folder (in ``sha256sum`` format, so ``sha256sum -c SHA256SUMS`` verifies it too,
except for a README.md carrying the archive's generated line), written by the report writer, and by
``lab archive-reproductions`` for a report or comparison that has none yet. A file that differs
from its seal is a finding; the seal is never rewritten over a difference (``--reseal`` is a
deliberate act, for a comparison made again).

A report's README.md is sealed without the one line ``lab archive-reproductions`` keeps at the top
of an archived report (:func:`lab.report.archive.without_generated_line`): the index may change
that line as reports come and go, never the report under it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

SEAL_NAME = "SHA256SUMS"


def _published_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    if path.name != "README.md":
        return data
    from lab.report.archive import without_generated_line  # the archive's line, as the archive reads it

    return without_generated_line(data.decode("utf-8")).encode("utf-8")


def digest(path: Path) -> str:
    """The SHA-256 of ``path`` as published (a README.md without the archive's line)."""
    return hashlib.sha256(_published_bytes(path)).hexdigest()


def read_seal(folder: Path) -> dict[str, str]:
    """The seal of ``folder``: file (relative, POSIX) -> its SHA-256; empty when there is none."""
    seal = folder / SEAL_NAME
    if not seal.is_file():
        return {}
    entries = {}
    for line in seal.read_text(encoding="utf-8").splitlines():
        if line.strip():
            hexdigest, name = line.split(maxsplit=1)
            entries[name.lstrip("*")] = hexdigest
    return entries


def write_seal(folder: Path, files: Iterable[Path], *, keep: bool = True) -> Path:
    """Seal ``files`` (under ``folder``) in ``folder``/SHA256SUMS; ``keep``: the entries of other
    files already there stay (a comparison added beside others)."""
    entries = read_seal(folder) if keep else {}
    for path in files:
        entries[path.relative_to(folder).as_posix()] = digest(path)
    seal = folder / SEAL_NAME
    seal.write_text("".join(f"{entries[name]}  {name}\n" for name in sorted(entries)), encoding="utf-8")
    return seal


def report_files(folder: Path) -> list[Path]:
    """The files of a report folder a seal covers: the files directly in it (README.md, report.html,
    runs.csv, an older report's PNGs) and its charts/ folder; not its other folders (an archive, an
    earlier report kept beside it), which are sealed as their own."""
    charts = folder / "charts"
    return sorted(
        [path for path in folder.iterdir() if path.is_file() and path.name != SEAL_NAME]
        + ([path for path in charts.rglob("*") if path.is_file()] if charts.is_dir() else [])
    )


def seal_problems(
    folder: Path,
    files: Iterable[Path],
    *,
    sealed_by: str = "python -m lab archive-reproductions",
    rule: str = "the file the lab wrote",
) -> list[tuple[Path, str]]:
    """Each of ``files`` that its folder's seal does not cover or that differs from it, and why
    (``sealed_by``: the command that seals a new file there; ``rule``: what the seal holds)."""
    entries = read_seal(folder)
    problems = []
    for path in files:
        name = path.relative_to(folder).as_posix()
        if name not in entries:
            problems.append((path, f"not sealed (no line in {SEAL_NAME}): run `{sealed_by}`"))
        elif entries[name] != digest(path):
            problems.append((path, f"differs from {rule} ({SEAL_NAME}): it is not edited by hand"))
    missing = sorted(name for name in entries if not (folder / name).is_file())
    problems += [(folder / name, f"sealed in {SEAL_NAME} but missing") for name in missing]
    return problems


COMPARISON_MARK = "<!-- generated: python -m lab compare-reproductions"


def sealed_units(reproductions: Path) -> list[tuple[Path, list[Path]]]:
    """What is sealed under ``reproductions`` (docs/reproduction): each report folder (a README.md
    with a runs.csv beside it) with its files, and each folder's comparisons (Markdown files
    ``lab compare-reproductions`` wrote) with that folder."""
    units: list[tuple[Path, list[Path]]] = []
    for readme in sorted(reproductions.rglob("README.md")):
        if (readme.parent / "runs.csv").is_file():
            units.append((readme.parent, report_files(readme.parent)))
    comparisons: dict[Path, list[Path]] = {}
    for path in sorted(reproductions.rglob("*.md")):
        if path.read_text(encoding="utf-8").startswith(COMPARISON_MARK):
            comparisons.setdefault(path.parent, []).append(path)
    return units + sorted(comparisons.items())


def seal_unsealed(reproductions: Path) -> list[Path]:
    """Seal every report file and comparison under ``reproductions`` that has no seal line yet
    (one a report writer older than the seal left, or a comparison just made); a file that differs
    from its line is left for the check to name, never sealed over. Returns the files sealed."""
    sealed = []
    for folder, files in sealed_units(reproductions):
        entries = read_seal(folder)
        new = [path for path in files if path.relative_to(folder).as_posix() not in entries]
        if new:
            write_seal(folder, new)
            sealed += new
    return sealed


def all_problems(reproductions: Path) -> list[tuple[Path, str]]:
    """Every file under ``reproductions`` that differs from its seal, has none, or is sealed and gone."""
    return [problem for folder, files in sealed_units(reproductions) for problem in seal_problems(folder, files)]
