"""Reproduction reports compared, pair by pair: ``python -m lab compare-reproductions`` run from
a script (lab/cli/compare_commands.py holds the command; this script goes once lab/cli/entry.py
registers it). Prints Markdown.

    .venv/bin/python scripts/compare_reproductions.py docs/reproduction/quick docs/reproduction/quick-third
    .venv/bin/python scripts/compare_reproductions.py docs/reproduction/quick docs/reproduction/quick-second \\
        docs/reproduction/quick-third --names quick quick-second quick-third --title "The quick reproductions"

With more than two reports, every pair is compared (the first against each later one, and so on).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_ROOT))

from lab.cli.compare_commands import COMMAND, add_compare_command, cmd_compare_reproductions  # noqa: E402 - after the checkout is importable


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab")
    add_compare_command(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args([COMMAND, *(sys.argv[1:] if argv is None else argv)])
    return cmd_compare_reproductions(args)


if __name__ == "__main__":
    sys.exit(main())
