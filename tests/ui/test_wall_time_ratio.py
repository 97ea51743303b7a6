"""Run detail names the experiment's wall-time ratio (the lab's overhead) once it is stored."""

from __future__ import annotations

from sqlalchemy.orm import Session

from db.models import Run
from tests.support.app_pages import PAGES, open_page, texts
from tests.support.seeded_lab import SeededLab


def test_run_detail_shows_the_experiments_wall_time_ratio(seed_lab: SeededLab) -> None:
    run_id = seed_lab.done_run_ids[0]
    assert "wall time" not in texts(open_page(PAGES["Run detail"], run=str(run_id)))
    with Session(seed_lab.engine) as session:
        experiment = session.get_one(Run, run_id).experiment
        assert experiment is not None
        experiment.wall_time_ratio = 1.234
        session.commit()
    assert "(wall time 1.23x its measured seconds)" in texts(open_page(PAGES["Run detail"], run=str(run_id)))
