"""A backend kind registered by a test alone runs end to end: the CLI starts it as a service
and runs a preset on it through the runner, and the Compare table shows it. The kind is the
stub OpenAI server (tests/stub_openai.py), defined in tests/support/integration_plugins.py:
no file of the lab names it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from db import store
from db.engine import get_engine
from lab import cli
from lab.analysis.compare import RunRecord
from lab.analysis.safe_csv import records_to_csv
from lab.backends import get_backend, register, unregister
from lab.report.seed_tables import our_table
from lab.settings import get_settings
from tests.support.integration_plugins import KIND, StubEngine

pytestmark = pytest.mark.integration


@pytest.fixture()
def stub_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The throwaway kind registered, and the CLI on a private data folder."""
    data_dir = tmp_path / "data"
    monkeypatch.setenv("LAB_DATA_DIR", str(data_dir))
    get_settings.cache_clear()
    register(StubEngine)
    try:
        yield data_dir
    finally:
        unregister(KIND)
        cli.main(["services", "down"])
        get_settings.cache_clear()


def test_a_kind_registered_in_a_test_runs_through_the_cli_the_runner_and_compare(
    stub_kind: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert get_backend(KIND).name == KIND
    assert cli.main(["services", "up", KIND]) == 0
    assert capsys.readouterr().out.startswith(f"{KIND}: http://127.0.0.1:")

    code = cli.main(
        [
            "run",
            "--preset",
            "seed-exp1",
            "--quick",
            "--json",
            "--set",
            f"backend={KIND}",
            "--set",
            "grid.load.vus=[1, 2]",
            "--set",
            "load.duration_s=3",
            "--set",
            "load.graceful_stop_s=5",
            "--set",
            "max_tokens=16",
        ]
    )
    assert code == 0, capsys.readouterr().err

    engine = get_engine(get_settings().resolved_database_url)
    with Session(engine) as session:
        runs = store.list_runs(session=session, newest_first=False)
        records = [RunRecord.of(run) for run in runs]
        environments = [run.environment for run in runs]
    assert [(r["backend"], r["vus"], r["status"]) for r in records] == [(KIND, 1, "done"), (KIND, 2, "done")]
    for record, environment in zip(records, environments, strict=True):
        assert record["requests_ok"] > 0 and record["requests_failed"] == 0
        assert record["output_tok_per_s"] > 0
        # Figures the kind does not export stay unknown, never zero.
        assert record["prefix_cache_hit_rate"] is None and record["server_ttft_avg_s"] is None
        assert environment is not None
        assert environment["services"][KIND]["backend"] == KIND
        assert "uvicorn" in environment["packages"]

    table = our_table("seed-exp1", records)
    assert list(table["server"]) == [KIND, KIND] and list(table["VUs"]) == [1, 2]
    assert KIND in records_to_csv(records)

    # The same kind behind the response cache is a composition, not a kind of its own.
    code = cli.main(
        [
            "run",
            "--preset",
            "seed-exp1",
            "--quick",
            "--json",
            "--set",
            f"backend={KIND}+cache",
            "--set",
            "grid.load.vus=[2]",
            "--set",
            "load.duration_s=3",
            "--set",
            "load.graceful_stop_s=5",
            "--set",
            "max_tokens=16",
            "--set",
            "workload.prompts=2",
        ]
    )
    assert code == 0, capsys.readouterr().err
    with Session(engine) as session:
        cached = RunRecord.of(store.list_runs(session=session, limit=1)[0])
    assert cached["backend"] == f"{KIND}+cache" and cached["response_cache_hit_rate"] > 0.5
