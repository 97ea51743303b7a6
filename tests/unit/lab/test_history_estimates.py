"""What the pages read of past runs (lab.history): time estimates from runs of the same
configuration, the newest finished run's card, capacity searches still probing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from db import store
from db.models import Run, RunStatus
from lab import history
from lab.queue import experiments
from lab.specs.schema import ExperimentSpec, LoadSpec, RunSpec

MODEL = "models/SmolLM2-135M-Instruct"


def queue(engine: Engine, vus: list[int], duration_s: float = 20.0) -> list[int]:
    spec = ExperimentSpec(
        name="e",
        base=RunSpec(backend="naive", model=MODEL, load=LoadSpec(duration_s=duration_s)),
        grid={"load.vus": vus},
    )
    with Session(engine, expire_on_commit=False) as session:
        return [run.id for run in experiments.enqueue_experiment(session=session, spec=spec).runs]


def specs(engine: Engine, run_ids: list[int]) -> list[dict]:
    with Session(engine) as session:
        return [session.get_one(Run, run_id).spec for run_id in run_ids]


def finish(engine: Engine, run_id: int, *, wall_s: float, startup_s: float) -> None:
    started = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    store.set_run_status(
        engine=engine,
        run_id=run_id,
        status=RunStatus.DONE,
        started_at=started,
        finished_at=started + timedelta(seconds=wall_s),
        environment={"startup": {"seconds": startup_s, "fresh": True}},
    )


def test_without_history_the_estimate_counts_load_half_the_graceful_stop_and_a_start_guess(engine: Engine) -> None:
    ids = queue(engine, [1, 8])
    with Session(engine) as session:
        estimate = history.estimate_runs(session=session, specs=specs(engine, ids))
    per_run = 20 + 0.5 * 30 + history.UNKNOWN_RUN_OVERHEAD_S
    start = 180 * history.UNKNOWN_START_SHARE  # the naive server's readiness timeout
    assert (estimate.runs, estimate.starts, estimate.runs_from_history, estimate.starts_from_history) == (2, 1, 0, 0)
    assert estimate.seconds == 2 * per_run + start


def test_past_runs_of_the_same_configuration_give_the_estimate(engine: Engine) -> None:
    past = queue(engine, [1])
    finish(engine, past[0], wall_s=100.0, startup_s=12.0)  # 88 s once its service was up
    ids = queue(engine, [1, 8])
    with Session(engine) as session:
        estimate = history.estimate_runs(session=session, specs=specs(engine, ids))
    assert (estimate.runs_from_history, estimate.starts_from_history) == (1, 1)
    assert estimate.seconds == 88.0 + (20 + 15 + history.UNKNOWN_RUN_OVERHEAD_S) + 12.0


def test_the_card_is_the_newest_finished_run_with_its_experiments_done_runs(engine: Engine) -> None:
    ids = queue(engine, [1, 2, 4])
    finish(engine, ids[0], wall_s=50.0, startup_s=1.0)
    finish(engine, ids[1], wall_s=60.0, startup_s=1.0)
    with Session(engine) as session:
        assert history.finished_run_card(session=session) is not None
        store.set_run_status(engine=engine, run_id=ids[2], status=RunStatus.FAILED, reason="boom")
        card = history.finished_run_card(session=session)
    assert card is not None
    assert card["run_id"] == ids[2] and card["status"] == "failed"
    assert card["experiment_done_run_ids"] == ids[:2]


def test_no_card_of_an_earlier_launch_while_a_new_one_waits(engine: Engine) -> None:
    (earlier,) = queue(engine, [1])
    finish(engine, earlier, wall_s=50.0, startup_s=1.0)
    with Session(engine) as session:
        assert history.finished_run_card(session=session) is not None
    queue(engine, [2])  # launched after the card's run ended: the live panel shows it alone
    with Session(engine) as session:
        assert history.finished_run_card(session=session) is None
        pending = history.live_state(session=session)["pending_statuses"]
    assert list(pending.values()) == [RunStatus.QUEUED]  # one reading for the sidebar, panel and table


def test_a_capacity_search_between_probes_keeps_the_live_views_on(engine: Engine) -> None:
    with Session(engine) as session:
        experiment = store.enqueue_experiment(session=session, name="cap", preset=None, scale="quick", spec={}, runs=[])
        experiment_id = experiment.id
    store.set_experiment_capacity(
        engine=engine,
        experiment_id=experiment_id,
        capacity={"state": "running", "backends": {"naive": {"probes": [{"load": 1}, {"load": 2}]}}},
    )
    with Session(engine) as session:
        state = history.live_state(session=session)
    assert state["pending"] and state["searches"] == [
        {"id": experiment_id, "name": "cap", "state": "running", "probes": 2}
    ]
    store.set_experiment_capacity(engine=engine, experiment_id=experiment_id, capacity={"state": "done"})
    with Session(engine) as session:
        assert not history.live_state(session=session)["pending"]
