"""The scale and rounds options of ``run`` and ``reproduce``: --scale (with --quick its alias),
--until-decided with --budget, --precision and --max-cell-s; bad values refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab import cli
from lab.cli.entry import build_parser
from lab.cli.scale_options import scale_and_rounds
from lab.settings import get_settings
from lab.specs.schema import SpecError, UntilDecided


@pytest.fixture
def empty_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("LAB_DATA_DIR", str(tmp_path / "data"))
    get_settings.cache_clear()
    yield tmp_path / "data"
    get_settings.cache_clear()


def parsed(*argv: str) -> tuple[str, UntilDecided | None]:
    return scale_and_rounds(build_parser().parse_args(list(argv)))


def test_scales_are_named_once_and_quick_is_an_alias() -> None:
    assert parsed("reproduce") == ("seed", None)
    assert parsed("reproduce", "--quick") == ("quick", None)
    assert parsed("reproduce", "--scale", "quick") == ("quick", None)
    assert parsed("reproduce", "--scale", "adapted")[0] == "adapted"
    assert parsed("run", "--preset", "seed-exp1", "--quick", "--scale", "quick") == ("quick", None)
    with pytest.raises(SpecError, match="--quick is --scale quick"):
        parsed("reproduce", "--quick", "--scale", "adapted")


def test_until_decided_takes_a_budget_and_a_precision() -> None:
    _, until = parsed("reproduce", "--until-decided", "--budget", "2h")
    assert until == UntilDecided(budget_s=7200)
    _, until = parsed("run", "--preset", "seed-exp1", "--until-decided", "--budget", "90m", "--precision", "0.05")
    assert until == UntilDecided(budget_s=5400, precision=0.05)
    assert parsed("run", "--preset", "seed-exp1", "--until-decided", "--budget", "300")[1] == UntilDecided(budget_s=300)
    assert build_parser().parse_args(["reproduce"]).max_cell_s == 600
    assert build_parser().parse_args(["reproduce", "--max-cell-s", "240"]).max_cell_s == 240


def test_until_decided_and_budget_need_each_other() -> None:
    with pytest.raises(SpecError, match="--until-decided needs --budget"):
        parsed("reproduce", "--until-decided")
    with pytest.raises(SpecError, match="--budget needs --until-decided"):
        parsed("reproduce", "--budget", "2h")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--until-decided", "--budget", "0"], "a budget is a duration above 0"),
        (["--until-decided", "--budget=-2h"], "a budget is a duration above 0"),
        (["--until-decided", "--budget", "soon"], "a budget is a duration above 0"),
        (["--until-decided", "--budget", "2h", "--precision", "0"], "a precision is above 0 and below 1"),
        (["--until-decided", "--budget", "2h", "--precision=-0.1"], "a precision is above 0 and below 1"),
        (["--until-decided", "--budget", "2h", "--precision", "1.5"], "a precision is above 0 and below 1"),
        (["--max-cell-s", "0"], "--max-cell-s is between 1 and 86400"),
        (["--scale", "full"], "invalid choice: 'full'"),
    ],
)
def test_bad_values_are_refused_in_one_line(
    empty_data_dir: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.main(["run", "--preset", "seed-exp1", *argv])
    assert stopped.value.code == 2
    errors = [
        line for line in capsys.readouterr().err.splitlines() if line.startswith("python -m lab") or "error" in line
    ]
    assert len(errors) == 1 and message in errors[0], errors
    assert not (empty_data_dir / "lab.db").exists()


def test_contradicting_options_exit_2_and_queue_nothing(
    empty_data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["reproduce", "--until-decided"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --until-decided needs --budget (e.g. --budget 2h), and --budget needs --until-decided"
    )
    assert cli.main(["run", "--preset", "seed-exp1", "--quick", "--scale", "seed"]) == 2
    assert not (empty_data_dir / "lab.db").exists()
