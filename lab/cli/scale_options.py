"""The command line's scale and rounds options, shared by ``run`` and ``reproduce``: ``--scale``
(``--quick`` the same as ``--scale quick``), ``--max-cell-s``, ``--until-decided``, ``--budget``
and ``--precision``, each refused in one line when out of range."""

from __future__ import annotations

import argparse
import math

from lab.analysis.measurability import DEFAULT_MAX_CELL_S
from lab.specs.schema import SCALES, SpecError, UntilDecided


def budget_seconds(text: str) -> float:
    """An argparse type: a positive duration, "2h", "90m", "300s" or plain seconds."""
    stripped = text.strip().lower()
    units = {"h": 3600.0, "m": 60.0, "s": 1.0}
    number, unit = (stripped[:-1], units[stripped[-1]]) if stripped[-1:] in units else (stripped, 1.0)
    try:
        seconds = float(number) * unit
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0 or seconds > 7 * 24 * 3600:
        raise argparse.ArgumentTypeError(
            f"a budget is a duration above 0 and at most 7 days, e.g. 2h, 90m or 300s, not {text[:40]!r}"
        )
    return seconds


def share(text: str) -> float:
    """An argparse type: a precision above 0 and below 1 (0.1 = +-10%)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"a precision is above 0 and below 1 (0.1 = +-10%), not {text[:40]!r}")
    return value


def cell_seconds(text: str) -> float:
    """An argparse type: the longest a cell may run under the adapted scale, in seconds."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 1 <= value <= 24 * 3600:
        raise argparse.ArgumentTypeError(f"--max-cell-s is between 1 and 86400 seconds, not {text[:40]!r}")
    return value


def add_scale_and_rounds(parser: argparse.ArgumentParser, *, precision: bool) -> None:
    """--scale (with --quick, the same as --scale quick), --max-cell-s, --until-decided, --budget (and --precision)."""
    parser.add_argument(
        "--scale",
        choices=SCALES,
        default=None,
        help="seed (the seed's lengths), adapted "
        "(cells the seed's length cannot measure here run longer, up to --max-cell-s) or quick",
    )
    parser.add_argument("--quick", action="store_true", help="the same as --scale quick")
    parser.add_argument(
        "--max-cell-s",
        type=cell_seconds,
        default=DEFAULT_MAX_CELL_S,
        help="adapted scale: the longest a cell may run (600 s by default)",
    )
    parser.add_argument(
        "--until-decided",
        action="store_true",
        help="after the planned rounds, add rounds of "
        "the undecided cells until decided or --budget is spent (intervals valid under repeated looks)",
    )
    parser.add_argument("--budget", type=budget_seconds, help="with --until-decided: the wall time allowed, e.g. 2h")
    if precision:
        parser.add_argument(
            "--precision",
            type=share,
            default=0.10,
            help="with --until-decided: a ratio is "
            "decided when its interval excludes 1 or its half-width is under this share (0.1)",
        )


def scale_and_rounds(args: argparse.Namespace) -> tuple[str, UntilDecided | None]:
    """The scale and the until-decided settings the arguments ask for; SpecError when they contradict."""
    if args.quick and args.scale not in (None, "quick"):
        raise SpecError(f"--quick is --scale quick; it contradicts --scale {args.scale}")
    scale = "quick" if args.quick else (args.scale or "seed")
    if args.until_decided != (args.budget is not None):
        raise SpecError("--until-decided needs --budget (e.g. --budget 2h), and --budget needs --until-decided")
    if not args.until_decided:
        return scale, None
    return scale, UntilDecided(budget_s=args.budget, precision=getattr(args, "precision", 0.10))
