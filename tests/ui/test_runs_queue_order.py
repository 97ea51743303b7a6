"""The Runs page shows the queue in the order workers take it: priority, then age."""

from __future__ import annotations

from sqlalchemy import update
from sqlalchemy.orm import Session

from db import store
from db.models import Run, RunStatus
from tests.support.app_pages import PAGES, open_page, texts
from tests.support.queue import enqueue
from tests.support.seeded_lab import SeededLab


def test_the_queue_lists_a_single_run_before_a_long_experiments_rounds(seed_lab: SeededLab) -> None:
    store.set_run_status(engine=seed_lab.engine, run_id=seed_lab.queued_run_id, status=RunStatus.RUNNING)
    rounds = enqueue(seed_lab.engine, repeats=3)
    with Session(seed_lab.engine) as session:  # as a long experiment queues its rounds
        session.execute(update(Run).where(Run.id.in_(rounds)).values(priority=-10))
        session.commit()
    [single] = enqueue(seed_lab.engine)
    app = open_page(PAGES["Runs"])
    assert not app.exception
    line = next(line for line in texts(app).splitlines() if line.startswith("Next in the queue:"))
    assert line.index(f"#{single} ") < line.index(f"#{rounds[0]} ") < line.index(f"#{rounds[2]} ")
    assert f"#{single} backend=naive vus=1 (priority 0)" in line and "(priority -10)" in line
