"""Reproduction reports compared, pair by pair: every verdict that differs (not only "held"
against "did not hold"), with both intervals and whether they overlap, whether the machines
differ in their CPU features and resolved settings, and the difference attributed to them where
they do (lab/report/comparison.py). Prints Markdown.

    .venv/bin/python scripts/compare_reproductions.py docs/reproduction/quick docs/reproduction/quick-third
    .venv/bin/python scripts/compare_reproductions.py docs/reproduction/quick docs/reproduction/quick-second \\
        docs/reproduction/quick-third --names quick quick-second quick-third --title "The quick reproductions"

With more than two reports, every pair is compared (the first against each later one, and so on).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_ROOT))

from lab.measurement.environment import provenance  # noqa: E402 - after the checkout is importable
from lab.report.comparison import compare, comparison_markdown, read_reproduction  # noqa: E402 - same


def document(folders: list[Path], names: list[str], *, title: str, command: str, code: str, note: str = "") -> str:
    """Every pair of ``folders`` compared, under ``title``, saying which code made it."""
    reproductions = [read_reproduction(folder, name) for folder, name in zip(folders, names, strict=True)]
    parts = [
        "<!-- generated: scripts/compare_reproductions.py (figures copied from the reports compared) -->",
        f"# {title}",
        "",
        f"Made by `{command}` with the code of lab commit {code} (lab/report/comparison.py): each report itself "
        "was written by the commit that took its runs. A verdict differs when the two reports judge a claim "
        'differently in any way, not only "held" against "did not hold".' + (f" {note}" if note else ""),
    ]
    for first, second in itertools.combinations(reproductions, 2):
        parts += ["", f"## {first.name} against {second.name}", "", comparison_markdown(compare(first, second))]
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", type=Path, nargs="+", help="report folders (or their README.md), two or more")
    parser.add_argument("--names", nargs="+", help="one name a report (default: the folder names)")
    parser.add_argument("--title", default="Reproductions compared, claim by claim")
    parser.add_argument("--note", default="", help="where a report not in the checkout came from")
    args = parser.parse_args(argv)
    if len(args.reports) < 2:
        parser.error("give two reports or more")
    names = args.names or [path.name if path.is_dir() else path.parent.name for path in args.reports]
    if len(names) != len(args.reports):
        parser.error("give one name a report")
    code_of = provenance()
    code = (code_of.commit or "unknown")[:12] + (" with uncommitted changes" if code_of.dirty else "")
    shown = [str(path) for path in args.reports]
    command = "scripts/compare_reproductions.py " + " ".join(shown)
    text = document(args.reports, names, title=args.title, command=command, code=code, note=args.note)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
