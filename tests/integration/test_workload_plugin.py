"""A workload registered in a test module alone (``tests/ui/test_workload_plugin.py``'s
count-up) runs end to end: the CLI queues a (non-seed) preset on it, the runner prepares its request
file and k6 replays it against the throwaway stub backend kind of
``tests/support/integration_plugins.py``, and the Compare page shows its runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from db import store
from db.engine import get_engine
from lab import backends, cli, workloads
from lab.analysis.compare import RunRecord
from lab.settings import get_settings
from tests.support.app_pages import PAGES, open_page
from tests.support.count_up import KIND, SECTION, CountUp
from tests.support.integration_plugins import KIND as BACKEND
from tests.support.integration_plugins import StubEngine

pytestmark = pytest.mark.integration


@pytest.fixture()
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The throwaway workload and backend kind registered, the CLI on a private data folder."""
    data_dir = tmp_path / "data"
    monkeypatch.setenv("LAB_DATA_DIR", str(data_dir))
    get_settings.cache_clear()
    workloads.register(CountUp)
    backends.register(StubEngine)
    try:
        yield data_dir
    finally:
        cli.main(["services", "down"])
        backends.unregister(BACKEND)
        workloads.unregister(KIND)
        get_settings.cache_clear()


def test_a_workload_registered_in_a_test_runs_through_the_worker_and_shows_in_compare(
    plugins: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(
        [
            "run",
            "--preset",
            "engines-cpu",
            "--quick",
            "--json",
            "--set",
            f'grid.backend=["{BACKEND}"]',
            "--set",
            f"workload.kind={KIND}",
            "--set",
            f"workload.{SECTION}.prompts=2",
            "--set",
            "grid.load.vus=[1]",
            "--set",
            "load.duration_s=3",
            "--set",
            "load.graceful_stop_s=5",
            "--set",
            "max_tokens=16",
        ]
    )
    assert code == 0, capsys.readouterr().err

    with Session(get_engine(get_settings().resolved_database_url)) as session:
        [run] = store.list_runs(session=session)
        record = RunRecord.of(run)
        spec = run.spec
    assert (record["backend"], record["workload"], record["status"]) == (BACKEND, KIND, "done")
    assert record["requests_ok"] > 0 and record["requests_failed"] == 0
    assert spec["workload"][SECTION] == {"prompts": 2, "start": 1}

    # Compare shows the run in its table of cells, with the workload's name, and offers it as CSV.
    app = open_page(PAGES["Compare"])
    shown = [str(value) for frame in app.dataframe for column in frame.value.columns for value in frame.value[column]]
    assert BACKEND in shown and KIND in shown
    assert f",{KIND}," in app.session_state["compare_raw_csv"]
