"""The pages through a real PostgreSQL outage (pages/view/outage.py): the run's private cluster is
stopped while Run detail follows a queued run, then started again. The page says the database
is not answering in one line, and is itself again once the cluster is back."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from db.engine import get_engine
from lab.settings import get_settings
from tests.integration.conftest import PostgresCluster
from tests.support.seeded_lab import PROJECT_ROOT, seed_database

pytestmark = pytest.mark.integration

NOT_ANSWERING = "database is not answering"


def outage_lines(app: AppTest) -> list[str]:
    return [item.value for item in app.warning if NOT_ANSWERING in item.value]


def test_run_detail_through_a_postgresql_outage(
    postgres_cluster: PostgresCluster, outage_database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = postgres_cluster
    try:
        monkeypatch.setenv("LAB_DATA_DIR", str(tmp_path))
        monkeypatch.setenv("LAB_DATABASE_URL", outage_database_url)
        monkeypatch.chdir(PROJECT_ROOT)
        get_settings.cache_clear()
        seeded = seed_database(get_engine(outage_database_url))
        app = AppTest.from_file(str(PROJECT_ROOT / "streamlit_app.py"), default_timeout=60)
        app.switch_page("pages/run_detail.py")
        app.query_params["run"] = str(seeded.queued_run_id)
        app.run()
        assert not app.exception and not outage_lines(app)

        assert cluster.stop().returncode == 0
        app.run()
        assert not app.exception, [item.message for item in app.exception]
        assert len(outage_lines(app)) == 1, [item.value for item in app.warning]

        assert cluster.start().returncode == 0
        for _ in range(3):  # a pooled connection from before the outage may fail once more
            app.run()
            if not outage_lines(app):
                break
        assert not app.exception and not outage_lines(app)
        assert f"Run #{seeded.queued_run_id}" in " ".join(item.value for item in app.subheader)
    finally:
        get_settings.cache_clear()
        get_engine(outage_database_url).dispose()  # before the fixture drops the database
