"""scripts/compare_reproductions.py: two reports' claim tables side by side, conflicts counted."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location(
    "compare_reproductions", PROJECT_ROOT / "scripts" / "compare_reproductions.py"
)
assert _spec is not None and _spec.loader is not None
compare_reproductions = importlib.util.module_from_spec(_spec)
sys.modules["compare_reproductions"] = compare_reproductions  # its dataclass looks its module up
_spec.loader.exec_module(compare_reproductions)


def _report(folder: Path, verdicts: dict[str, tuple[str, str]]) -> Path:
    folder.mkdir()
    rows = "\n".join(
        f"| {claim} | figure | 1.0x | {ours} | {verdict} | why |" for claim, (ours, verdict) in verdicts.items()
    )
    (folder / "README.md").write_text(
        "# Reproducing\n\n## Claim by claim\n\n| claim (seed) | figure | seed | ours | verdict | why |\n"
        f"|---|---|---|---|---|---|\n{rows}\n\nRules: ...\n\n## Environment\n\n| a | b |\n|---|---|\n| x | y |\n",
        encoding="utf-8",
    )
    return folder


def test_held_against_partly_is_a_conflict_and_inconclusive_is_not(tmp_path: Path) -> None:
    first = _report(
        tmp_path / "a",
        {"A grows": ("2.0x [1.8x, 2.2x]", "held"), "B shrinks": ("0.5x", "held"), "C": ("1.0x", "inconclusive")},
    )
    second = _report(
        tmp_path / "b",
        {"A grows": ("1.2x [1.1x, 1.3x]", "partly"), "B shrinks": ("0.9x", "inconclusive"), "C": ("1.0x", "held")},
    )
    rows = compare_reproductions.claim_rows(first)
    assert [row.claim for row in rows] == ["A grows", "B shrinks", "C"]  # the Environment table is not read
    text = compare_reproductions.comparison_markdown(rows, compare_reproductions.claim_rows(second), ("one", "two"))
    assert "| A grows | 2.0x [1.8x, 2.2x] | held | 1.2x [1.1x, 1.3x] | partly | **no** |" in text
    assert text.endswith("Conflicts (held in one, partly or did not hold in the other): 1 of 3 claims.")
