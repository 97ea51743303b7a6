"""Baselines, spec files and the regression gate through the CLI, in-process: runs are
finished by a stand-in for the queue (figures set directly), so no process is started.
The same gate against real k6 runs is tests/integration/test_regression_gate.py."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from db import baselines as baseline_store
from db.engine import get_engine
from db.models import Run, RunStatus
from lab import cli
from lab.cli import run_commands
from lab.settings import get_settings
from lab.specs.spec_files import load_spec_file

TARGET = "http://127.0.0.1:9"


def spec_document(*, repeats: int = 3, vus: int = 2, **extra: object) -> dict:
    return {
        "name": "gate",
        "base": {
            "backend": "external",
            "target_url": TARGET,
            "model": "stub",
            "max_tokens": 8,
            "warmup_requests": 0,
            "load": {"vus": vus, "duration_s": 3},
        },
        "repeats": repeats,
        **extra,
    }


@pytest.fixture()
def lab_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Engine]:
    monkeypatch.setenv("LAB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("LAB_DATABASE_URL", raising=False)
    get_settings.cache_clear()
    yield get_engine(get_settings().resolved_database_url)
    get_settings.cache_clear()


def write_spec(tmp_path: Path, name: str = "gate.json", **changes: Any) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(spec_document(**changes)))
    return path


def finishing_with(engine: Engine, values: list[float], status: str = RunStatus.DONE) -> Callable[..., None]:
    """A stand-in for wait_for_submitted_runs: the runs end ``status`` with these output tok/s, in order."""

    def finish(context: object, run_ids: list[int], *, local: bool, quiet: bool = False) -> None:
        with Session(engine) as session:
            for run_id, value in zip(run_ids, values, strict=True):
                run = session.get_one(Run, run_id)
                run.status, run.output_tok_per_s, run.requests_ok = status, value, 10
            session.commit()

    return finish


def run_count(engine: Engine) -> int:
    with Session(engine) as session:
        count = session.scalar(select(func.count()).select_from(Run))
        assert count is not None
        return count


def run_spec(
    tmp_path: Path,
    engine: Engine,
    monkeypatch: pytest.MonkeyPatch,
    values: list[float],
    *argv: str,
    spec: Path | None = None,
) -> int:
    monkeypatch.setattr(run_commands, "wait_for_submitted_runs", finishing_with(engine, values))
    return cli.main(["run", "--spec", str(spec or write_spec(tmp_path)), *argv])


def test_a_baseline_then_the_gate_passes_fails_and_cannot_decide(
    tmp_path: Path, lab_engine: Engine, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_spec(tmp_path, lab_engine, monkeypatch, [100.0, 101.0, 99.0]) == 0
    assert cli.main(["runs", "baseline", "experiment:1"]) == 0
    assert "experiment #1 is now the baseline of 1 configuration(s)" in capsys.readouterr().out
    gate = ["--baseline", "auto", "--fail-on-regression", "output_tok_per_s=5"]
    assert run_spec(tmp_path, lab_engine, monkeypatch, [100.5, 99.5, 100.0], *gate) == 0
    assert "ok output_tok_per_s: " in capsys.readouterr().out
    assert run_spec(tmp_path, lab_engine, monkeypatch, [50.0, 51.0, 49.0], *gate) == 3
    out = capsys.readouterr().out
    assert "REGRESSION output_tok_per_s: -50.0% [95% CI" in out and "gate FAILED: regression" in out
    # --json: the same verdicts as data.
    assert run_spec(tmp_path, lab_engine, monkeypatch, [50.0, 51.0, 49.0], *gate, "--json") == 3
    document = json.loads(capsys.readouterr().out)
    assert document["gate"]["exit_code"] == 3 and document["gate"]["verdicts"][0]["outcome"] == "regression"
    assert len(document["runs"]) == 3
    # One run a side: it says it cannot decide, with its own exit code.
    one = write_spec(tmp_path, "one.json", repeats=1)
    assert run_spec(tmp_path, lab_engine, monkeypatch, [100.0], spec=one) == 0
    assert cli.main(["runs", "baseline", str(run_count(lab_engine))]) == 0
    assert run_spec(tmp_path, lab_engine, monkeypatch, [50.0], *gate, spec=one) == 4
    out = capsys.readouterr().out
    assert "CANNOT DECIDE output_tok_per_s: -50.0%; too few runs to tell (n=1 vs 1; needs 3 a side)" in out
    assert "gate CANNOT DECIDE" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--baseline", "auto", "--fail-on-regression", "tok_per_s=5"], "unknown figure 'tok_per_s'"),
        (["--baseline", "auto", "--fail-on-regression", "output_tok_per_s=lots"], "is not a number: 'lots'"),
        (["--fail-on-regression", "output_tok_per_s=5"], "--fail-on-regression needs --baseline"),
        (["--baseline", "auto"], "--baseline needs at least one --fail-on-regression"),
        (
            ["--baseline", "experiment:2", "--fail-on-regression", "output_tok_per_s=5"],
            "experiment #2 is a baseline of another configuration than the spec (it differs in load.vus: 4 vs 2)",
        ),
        (["--baseline", "3", "--fail-on-regression", "output_tok_per_s=5"], "run #3 is failed, not done"),
        (["--baseline", "run:99", "--fail-on-regression", "output_tok_per_s=5"], "no run with id 99"),
        (["--baseline", "exp:1", "--fail-on-regression", "output_tok_per_s=5"], "names no run or experiment"),
    ],
)
def test_bad_gate_input_is_refused_in_one_line_and_queues_nothing(
    tmp_path: Path,
    lab_engine: Engine,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    assert run_spec(tmp_path, lab_engine, monkeypatch, [100.0], spec=write_spec(tmp_path, "b.json", repeats=1)) == 0
    other = write_spec(tmp_path, "other.json", repeats=1, vus=4)
    assert run_spec(tmp_path, lab_engine, monkeypatch, [100.0], spec=other) == 0
    monkeypatch.setattr(run_commands, "wait_for_submitted_runs", finishing_with(lab_engine, [0.0], RunStatus.FAILED))
    assert cli.main(["run", "--spec", str(write_spec(tmp_path, "c.json", repeats=1))]) == 1
    capsys.readouterr()
    before = run_count(lab_engine)
    assert run_spec(tmp_path, lab_engine, monkeypatch, [1.0], *argv) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: ") and message in error and len(error.splitlines()) == 1, error
    assert run_count(lab_engine) == before


def test_auto_without_a_marked_baseline_is_refused(
    tmp_path: Path, lab_engine: Engine, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        run_spec(
            tmp_path, lab_engine, monkeypatch, [1.0], "--baseline", "auto", "--fail-on-regression", "latency_p95_s=10"
        )
        == 2
    )
    assert "no baseline is marked for the spec's configuration" in capsys.readouterr().err
    assert run_count(lab_engine) == 0


@pytest.mark.parametrize(
    ("content", "name", "message"),
    [
        ({**spec_document(), "bogus": 1}, "a.json", "spec file a.json: unknown key 'bogus' (a spec file has: name,"),
        (
            {**spec_document(), "base": {**spec_document()["base"], "load": {"vus": 2, "speed": 3}}},
            "b.json",
            "spec file b.json: base.load.speed: unknown key",
        ),
        ({**spec_document(), "repeats": 0}, "c.json", "repeats: Input should be greater than or equal to 1"),
        ("[1, 2]", "d.json", "must hold a table of settings at the top, not a list"),
        (
            "{not json",
            "e.json",
            "is not valid JSON (Expecting property name enclosed in double quotes at line 1, column 2)",
        ),
        ("name = ", "f.toml", "is not valid TOML"),
        ("{}", "g.yaml", "use a .json or .toml file"),
    ],
)
def test_bad_spec_files_are_refused_in_one_line(
    tmp_path: Path, lab_engine: Engine, capsys: pytest.CaptureFixture[str], content: object, name: str, message: str
) -> None:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    assert cli.main(["run", "--spec", str(path)]) == 2
    error = capsys.readouterr().err
    assert message in error and len(error.splitlines()) == 1, error
    assert run_count(lab_engine) == 0


def test_a_toml_spec_file_reads_like_the_json_one(tmp_path: Path) -> None:
    toml = tmp_path / "gate.toml"
    toml.write_text(
        f'name = "gate"\nrepeats = 3\n[base]\nbackend = "external"\ntarget_url = "{TARGET}"\n'
        'model = "stub"\nmax_tokens = 8\nwarmup_requests = 0\n[base.load]\nvus = 2\nduration_s = 3\n'
    )
    assert load_spec_file(toml) == load_spec_file(write_spec(tmp_path))


def test_a_preset_copied_to_a_file_is_a_spec_file(tmp_path: Path) -> None:
    from lab.specs.schema import PRESETS_DIR, load_preset

    copy = tmp_path / "mine.json"
    copy.write_text((PRESETS_DIR / "seed-exp1.json").read_text())
    loaded = load_spec_file(copy, quick=True)
    assert loaded.model_dump(exclude={"preset"}) == load_preset("seed-exp1", quick=True).model_dump(exclude={"preset"})


def test_an_exported_run_spec_queues_the_same_run_spec(
    tmp_path: Path, lab_engine: Engine, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_spec(tmp_path, lab_engine, monkeypatch, [1.0, 2.0, 3.0]) == 0
    exported = tmp_path / "run2.json"
    assert cli.main(["runs", "spec", "2", "--output", str(exported)]) == 0
    assert run_spec(tmp_path, lab_engine, monkeypatch, [1.0], spec=exported) == 0
    with Session(lab_engine) as session:
        original, again = session.get_one(Run, 2).spec, session.get_one(Run, 4).spec
    assert set(original) == set(again)
    for field in original:
        assert again[field] == original[field], field
    # An experiment's file reruns the experiment: the same runs, seeds and order.
    capsys.readouterr()
    assert cli.main(["runs", "spec", "experiment:1"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["repeats"] == 3 and document["base"]["target_url"] == TARGET
    assert cli.main(["runs", "spec", "experiment:9"]) == 2
    assert cli.main(["runs", "spec", "2", "--output", str(tmp_path / "x.toml")]) == 2


def test_marking_replaces_and_clearing_removes_the_baseline(
    tmp_path: Path, lab_engine: Engine, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_spec(tmp_path, lab_engine, monkeypatch, [1.0, 2.0, 3.0]) == 0
    assert cli.main(["runs", "baseline", "experiment:1"]) == 0
    assert cli.main(["runs", "baseline", "run:2"]) == 0
    with Session(lab_engine) as session:
        [row] = baseline_store.list_baselines(session=session)
        assert row.run_ids == [2] and row.run_id == 2 and row.experiment_id is None
    assert cli.main(["runs", "baselines", "--json"]) == 0
    capsys.readouterr()
    assert cli.main(["runs", "baseline", "experiment:1", "--clear"]) == 0
    with Session(lab_engine) as session:
        assert baseline_store.list_baselines(session=session) == []


def test_the_migration_adds_the_baselines_table_to_an_older_database(engine: Engine) -> None:
    from sqlalchemy import inspect, text

    from db import migrations

    with engine.begin() as connection:
        connection.execute(text("DROP TABLE baselines"))
        connection.execute(
            text("UPDATE schema_version SET version = :v"), {"v": migrations.MIGRATIONS.index(migrations._baselines)}
        )
    assert migrations.upgrade(engine) == migrations.MIGRATIONS.index(migrations._baselines)
    with engine.connect() as connection:
        assert inspect(connection).has_table("baselines")
        assert migrations.current_version(connection) == migrations.LATEST_VERSION


def test_a_missing_spec_file_is_refused_in_one_line(
    tmp_path: Path, lab_engine: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["run", "--spec", str(tmp_path / "nowhere.json")]) == 2
    error = capsys.readouterr().err
    assert "spec file not found" in error and "nowhere.json" in error and len(error.splitlines()) == 1
