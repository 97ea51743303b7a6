"""Every ``# noqa`` and ``# type: ignore`` in the tree names what it silences and says why, on
the same line (ruff and mypy already refuse one that silences nothing)."""

from __future__ import annotations

import re
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("lab", "services", "db", "pages", "benchmarks", "scripts", "tests")
SUPPRESSION = re.compile(r"#\s*(noqa|type:\s*ignore)\b(?P<rest>.*)$")
# The codes, then a reason after " - ", "  # " or in parentheses.
WITH_CODE_AND_REASON = re.compile(r"^(: ?[A-Z][A-Z0-9, ]*[0-9]|\[[a-z, -]+\])\s*(-|#|\()\s*\S")


def suppressions_without_reason(paths: list[Path], root: Path) -> list[str]:
    found = []
    for path in paths:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            match = SUPPRESSION.search(line)
            if match and not WITH_CODE_AND_REASON.match(match.group("rest")):
                found.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    return found


def test_every_suppression_names_its_code_and_its_reason() -> None:
    paths = [path for folder in FOLDERS for path in sorted((PROJECT_ROOT / folder).rglob("*.py"))]
    paths = [path for path in paths if path != Path(__file__).resolve()]  # its planted examples
    paths += [PROJECT_ROOT / "streamlit_app.py", PROJECT_ROOT / "web_app.py"]
    assert suppressions_without_reason(paths, PROJECT_ROOT) == []


def test_a_bare_or_unexplained_suppression_is_found(tmp_path: Path) -> None:
    source = tmp_path / "planted.py"
    source.write_text(
        "a = 1  # noqa\n"
        "b = 2  # type: ignore\n"
        "c = 3  # noqa: F401\n"
        "d = 4  # type: ignore[attr-defined]\n"
        "e = 5  # noqa: F401 - re-exported\n"
        "f = 6  # type: ignore[attr-defined]  # the stub lacks it\n",
        encoding="utf-8",
    )
    found = suppressions_without_reason([source], tmp_path)
    assert [entry.split(":")[1] for entry in found] == ["1", "2", "3", "4"]
