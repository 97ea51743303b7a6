"""Following a long experiment: its table printed in plain lines off a terminal, redrawn in place by
rich on one, and the follow ends with the experiment's state."""

from __future__ import annotations

import io

from sqlalchemy import Engine

from db.models import LongExperimentState
from lab.context import LabContext
from lab.queue.follow import follow
from lab.settings import Settings
from tests.support.long_runs import Clock, create, drive


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_finished_experiment_is_shown_once_plain_or_live_and_its_state_returned(engine: Engine, tmp_path) -> None:
    long_id = create(engine, repeats=1)
    clock = Clock()
    drive(engine, long_id, lambda engine, run: clock.finish(engine, run, req_per_s=1.0, output_tok_per_s=1.0))
    context = LabContext(settings=Settings(data_dir=tmp_path, database_url=str(engine.url)))
    plain, terminal = io.StringIO(), Terminal()
    assert follow(context, long_id, out=plain, poll_s=0.05) == LongExperimentState.FINISHED
    assert plain.getvalue().count(f"long experiment #{long_id}: stub grid: finished") == 1
    assert follow(context, long_id, out=terminal, poll_s=0.05) == LongExperimentState.FINISHED
    assert f"long experiment #{long_id}: stub grid: finished" in terminal.getvalue()
