"""Two reproduction reports, claim by claim: each claim's figure and verdict side by side, and
whether they conflict (held in one, partly or did not hold in the other).

Reads the "Claim by claim" table of each report's README.md (what a reader of the two reports
sees), so it also compares a report written by older code; prints Markdown.

    .venv/bin/python scripts/compare_reproductions.py docs/reproduction/quick docs/reproduction/quick-second \\
        --names first second
    .venv/bin/python scripts/compare_reproductions.py OLD_README.md docs/reproduction --names block interleaved
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

HELD = "held"
# A conflict: one report holds a claim the other judges against it. Inconclusive and "not
# measurable here" are no conflict: they say the figure cannot decide.
AGAINST = ("partly", "did not hold", "did not hold here (hardware)")


@dataclass(frozen=True)
class ClaimRow:
    claim: str
    ours: str
    verdict: str


def claim_rows(report: Path) -> list[ClaimRow]:
    """The rows of the report's "Claim by claim" table (``report``: its folder or its README.md)."""
    readme = report / "README.md" if report.is_dir() else report
    lines = readme.read_text(encoding="utf-8").splitlines()
    try:
        start = lines.index("## Claim by claim")
    except ValueError:
        raise SystemExit(f"{readme}: no 'Claim by claim' section") from None
    header: list[str] | None = None
    rows: list[ClaimRow] = []
    for line in lines[start + 1 :]:
        if line.startswith("## "):
            break
        if not line.startswith("|") or line.startswith("|---"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        if header is None:
            header = cells
            continue
        row = dict(zip(header, cells, strict=False))
        rows.append(ClaimRow(claim=row["claim (seed)"], ours=row["ours"], verdict=row["verdict"]))
    return rows


def conflicts(first: str, second: str) -> bool:
    return (first == HELD and second in AGAINST) or (second == HELD and first in AGAINST)


def comparison_markdown(first: list[ClaimRow], second: list[ClaimRow], names: tuple[str, str]) -> str:
    by_claim = {row.claim: row for row in second}
    lines = [
        f"| claim | {names[0]}: ours | {names[0]} | {names[1]}: ours | {names[1]} | agree |",
        "|---|---|---|---|---|---|",
    ]
    count = 0
    for row in first:
        other = by_claim.get(row.claim)
        if other is None:
            lines.append(f"| {row.claim} | {row.ours} | {row.verdict} | – | not in the report | – |")
            continue
        conflict = conflicts(row.verdict, other.verdict)
        count += conflict
        lines.append(
            f"| {row.claim} | {row.ours} | {row.verdict} | {other.ours} | {other.verdict} | "
            f"{'**no**' if conflict else 'yes'} |"
        )
    lines += ["", f"Conflicts (held in one, partly or did not hold in the other): {count} of {len(first)} claims."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first", type=Path, help="a report folder or its README.md")
    parser.add_argument("second", type=Path)
    parser.add_argument("--names", nargs=2, default=("first", "second"))
    args = parser.parse_args(argv)
    print(comparison_markdown(claim_rows(args.first), claim_rows(args.second), tuple(args.names)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
