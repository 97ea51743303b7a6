"""``python -m lab compare-reproductions``: its parser, its one-line refusals, and the Markdown it
prints for two reports (every differing verdict, and the command and code that made it)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from lab.cli import compare_commands
from lab.measurement import environment


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lab")
    compare_commands.add_compare_command(parser.add_subparsers(dest="command", required=True))
    return parser


def _report(folder: Path, verdicts: dict[str, tuple[str, str]]) -> Path:
    folder.mkdir()
    rows = "\n".join(
        f"| {claim} | figure | 1.0x | {ours} | {verdict} | why |" for claim, (ours, verdict) in verdicts.items()
    )
    (folder / "README.md").write_text(
        "# Reproducing\n\n## Claim by claim\n\n| claim (seed) | figure | seed | ours | verdict | why |\n"
        f"|---|---|---|---|---|---|\n{rows}\n\nRules: ...\n\n## Environment\n\n| a | b |\n|---|---|\n"
        "| lab git commit | 9033924 |\n",
        encoding="utf-8",
    )
    return folder


def test_two_reports_print_every_differing_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(environment, "provenance", lambda: environment.Provenance("0123456789abcdef", False, None))
    first = _report(tmp_path / "quick", {"Prefix cache hits.": ("62.8%", "held"), "Cache is free.": ("0.90x", "held")})
    second = _report(
        tmp_path / "rerun", {"Prefix cache hits.": ("73.6%", "held"), "Cache is free.": ("1.05x", "inconclusive")}
    )
    args = _parser().parse_args(["compare-reproductions", str(first), str(second)])
    assert compare_commands.cmd_compare_reproductions(args) == 0
    text = capsys.readouterr().out
    assert text.startswith("<!-- generated: python -m lab compare-reproductions (figures copied from the reports")
    assert "# Reproductions compared, claim by claim" in text
    assert (
        f"Made by `python -m lab compare-reproductions {first} {second}` with the code of lab commit 0123456789ab"
        in text
    )
    assert "## quick against rerun" in text
    assert "Verdicts that differ: 1 of 2 claims." in text


def test_fewer_than_two_reports_or_a_name_short_are_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one = _parser().parse_args(["compare-reproductions", str(tmp_path / "a")])
    assert compare_commands.cmd_compare_reproductions(one) == 2
    short = _parser().parse_args(["compare-reproductions", "a", "b", "--names", "only-one"])
    assert compare_commands.cmd_compare_reproductions(short) == 2
    assert capsys.readouterr().err.splitlines() == ["error: give two reports or more", "error: give one name a report"]
