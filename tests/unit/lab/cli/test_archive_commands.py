"""``python -m lab archive-reproductions``: its parser, ``--check`` (exit 1 while a file is stale,
0 once written) and its one-line refusal of a folder that does not exist."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from lab.cli import archive_commands
from lab.report import archive


def _readme() -> str:
    return (
        "# Reproducing\n\nGenerated 2026-12-01T17:42:09+00:00 by `python -m lab reproduce --quick` (scale: quick).\n\n"
        "Verdicts: 4 held, 2 partly. The seed's set-up: one RTX 4060.\n\n## Claim by claim\n\n"
        "| claim (seed) | figure | seed | ours | verdict | why |\n|---|---|---|---|---|---|\n"
        "| Chat vLLM ~40x naive. | vLLM over naive req/s | 40.7x | 2.87x [1.02x, 2.38x] | partly | why |\n"
    )


def _archive(tmp_path: Path) -> Path:
    folder = tmp_path / "archive" / "quick"
    folder.mkdir(parents=True)
    (folder / "README.md").write_text(_readme(), encoding="utf-8")
    (folder / "runs.csv").write_text("run_id,backend\n1,vllm\n", encoding="utf-8")
    return tmp_path / "archive"


def _args(folder: Path, *, check: bool, reseal: tuple[Path, ...] = ()) -> argparse.Namespace:
    return argparse.Namespace(archive=folder, check=check, reseal=list(reseal))


def test_the_command_checks_then_writes_and_refuses_a_missing_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _archive(tmp_path)
    assert archive_commands.cmd_archive_reproductions(_args(folder, check=True)) == 1
    assert archive_commands.cmd_archive_reproductions(_args(folder, check=False)) == 0
    assert archive_commands.cmd_archive_reproductions(_args(folder, check=True)) == 0
    # 2.87x beside [1.02x, 2.38x], whose centre is 1.56x: the report got its generated line.
    assert (folder / "quick" / "README.md").read_text(encoding="utf-8").startswith(archive.LINE_MARK)
    assert archive_commands.cmd_archive_reproductions(_args(tmp_path / "none", check=True)) == 2
    out, err = capsys.readouterr()
    assert f"not up to date: {folder / 'README.md'}" in out and f"wrote {folder / 'README.md'}" in out
    # The report had no seal: checked, it is named; written, it is sealed (its body, not the archive's line).
    assert "runs.csv: not sealed" in out and f"sealed {folder / 'quick' / 'runs.csv'}" in out
    assert err.strip() == f"error: {tmp_path / 'none'} is not a folder"


def test_an_edited_report_stays_a_finding_until_it_is_resealed_on_purpose(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _archive(tmp_path)
    assert archive_commands.cmd_archive_reproductions(_args(folder, check=False)) == 0
    runs = folder / "quick" / "runs.csv"
    runs.write_text("run_id,backend\n1,naive\n", encoding="utf-8")
    assert archive_commands.cmd_archive_reproductions(_args(folder, check=False)) == 0  # never seals over it
    assert archive_commands.cmd_archive_reproductions(_args(folder, check=True)) == 1
    assert "runs.csv: differs from the file the lab wrote" in capsys.readouterr().out
    assert archive_commands.cmd_archive_reproductions(_args(folder, check=False, reseal=(runs,))) == 0
    assert archive_commands.cmd_archive_reproductions(_args(folder, check=True)) == 0


def test_the_parser_takes_the_archive_and_check() -> None:
    parser = argparse.ArgumentParser(prog="python -m lab")
    archive_commands.add_archive_command(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["archive-reproductions", "--check"])
    assert args.check and args.archive == archive_commands.DEFAULT_ARCHIVE
    assert f"python -m lab {archive_commands.COMMAND}" == archive.GENERATOR
