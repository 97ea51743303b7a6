"""``from lab import api``: DataFrames with the CSV export's figures, filters, per-request and
per-second frames, the spec, and an engine that only reads (SQLite here; PostgreSQL in
tests/integration/test_regression_gate.py when a server is available)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from db.models import Run, RunStatus
from lab import api, cli
from lab.settings import get_settings
from tests.support.api_runs import NUMERIC_FIGURES, seed


@pytest.fixture()
def database(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    url = str(engine.url)
    monkeypatch.setenv("LAB_DATABASE_URL", url)
    get_settings.cache_clear()
    yield url
    get_settings.cache_clear()


def test_runs_have_the_csv_exports_columns_and_figures(engine: Engine, database: str, tmp_path: Path) -> None:
    run_ids = seed(engine)
    csv_path = tmp_path / "runs.csv"
    assert cli.main(["runs", "export", "--csv", str(csv_path)]) == 0
    exported = pd.read_csv(csv_path).sort_values("run_id").reset_index(drop=True)
    frame = api.runs()
    assert list(frame.columns) == list(exported.columns)
    assert frame.run_id.tolist() == run_ids
    for figure in NUMERIC_FIGURES:
        pd.testing.assert_series_equal(frame[figure].astype(float), exported[figure].astype(float), obj=figure)
    assert frame.created_at.dt.tz is not None


def test_runs_filters(engine: Engine, database: str) -> None:
    run_ids = seed(engine)
    with Session(engine) as session:
        session.get_one(Run, run_ids[0]).status = RunStatus.FAILED
        session.commit()
    assert api.runs(status="done").run_id.tolist() == run_ids[1:]
    assert api.runs(experiment="api test", backend="external", tag="nb").run_id.tolist() == run_ids
    assert api.runs(experiment=1).run_id.tolist() == run_ids
    assert api.runs(experiment="no such experiment").empty
    assert api.runs(launched_after="2999-01-01").empty
    assert len(api.runs(launched_before="2999-01-01")) == 3
    with pytest.raises(ValueError, match="unknown status 'finished'"):
        api.runs(status="finished")


def test_requests_series_and_spec(engine: Engine, database: str) -> None:
    run_ids = seed(engine)
    frame = api.requests(run_ids[0])
    row = api.runs().iloc[0]
    assert len(frame) == row.requests_ok + row.requests_failed and frame.ok.sum() == row.requests_ok
    assert frame.latency_s.tolist() == pytest.approx([0.1, 0.2, 0.35, 1 / 3], rel=1e-6)
    assert frame.ttft_s.isna().all() and list(frame.columns) == ["ok", "latency_s", "ttft_s", "tpot_s"]
    per_second = api.series(run_ids[0])
    assert per_second.time_s.tolist() == [0, 1, 2] and per_second.attrs["bucket_s"] == 1
    assert api.series(run_ids[0], part="resources").k6_cpu_percent.tolist() == [3.0, 4.0]
    assert api.spec(run_ids[0])["backend"] == "external"
    with pytest.raises(LookupError, match="no run with id 999"):
        api.requests(999)


def test_the_api_only_reads(engine: Engine, database: str, tmp_path: Path) -> None:
    seed(engine)
    api.runs()
    reading = api._engine(database)
    with pytest.raises(api.ReadOnlyError, match="refused a UPDATE statement"), reading.begin() as connection:
        connection.execute(text("UPDATE runs SET notes = 'x'"))
    missing = tmp_path / "none" / "lab.db"
    with pytest.raises(FileNotFoundError, match="no lab database"):
        api.runs(database_url=f"sqlite:///{missing}")
    assert not missing.exists()
