"""The lab's own overhead: cells grouped so each backend starts once, the wall-time ratio
stored per experiment and shown in the report; vLLM's thread binding and block size options."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy import inspect, text
from sqlalchemy.orm import Session

from db import migrations
from db.engine import make_engine
from db.models import Experiment, Run
from lab.backends import vllm as vllm_backend
from lab.backends.vllm import VllmBackend, VllmOptions
from lab.queue import experiments
from lab.report.build import overhead_sentence
from lab.report.experiment_meta import ExperimentMeta
from lab.report.tables import scaling_table
from lab.settings import Settings
from lab.specs.schema import ExperimentSpec, load_preset


def interleaved_grid(repeats: int = 2, order: str = "blocks") -> ExperimentSpec:
    """VUs outermost, backend inner: expanded as is, the backends would alternate."""
    return ExperimentSpec.model_validate(
        {
            "name": "interleaved",
            "repeats": repeats,
            "order": order,
            "base": {"backend": "vllm", "load": {"kind": "constant-vus", "vus": 1, "duration_s": 5}, "max_tokens": 8},
            "grid": {"load.vus": [1, 8], "backend": ["naive", "vllm", "vllm+cache"]},
        }
    )


def test_with_block_order_cells_are_grouped_by_backend_with_repeats_together(engine) -> None:
    with Session(engine) as session:
        runs = experiments.enqueue_experiment(session=session, spec=interleaved_grid()).runs
        order = [(run.backend, run.vus, run.repeat_index) for run in sorted(runs, key=lambda r: r.id)]
    assert order == [
        ("naive", 1, 0),
        ("naive", 1, 1),
        ("naive", 8, 0),
        ("naive", 8, 1),
        # vLLM and vLLM behind the cache share one vLLM: one group, grid order inside it.
        ("vllm", 1, 0),
        ("vllm", 1, 1),
        ("vllm+cache", 1, 0),
        ("vllm+cache", 1, 1),
        ("vllm", 8, 0),
        ("vllm", 8, 1),
        ("vllm+cache", 8, 0),
        ("vllm+cache", 8, 1),
    ]


def test_a_new_experiment_starts_with_the_backend_the_queue_ends_with(engine) -> None:
    with Session(engine) as session:
        experiments.enqueue_experiment(session=session, spec=load_preset("seed-exp2", quick=True))  # vLLM last
        runs = experiments.enqueue_experiment(session=session, spec=load_preset("seed-exp3", quick=True)).runs
        assert [run.backend for run in sorted(runs, key=lambda r: r.id)] == ["vllm", "vllm+cache", "naive"]


def test_other_backend_options_are_another_group() -> None:
    spec = ExperimentSpec.model_validate(
        {
            "name": "block sizes",
            "base": {"backend": "vllm", "max_tokens": 8},
            "grid": {"vllm.block_size": [32, 128], "load.vus": [1, 8]},
        }
    )
    _, ordered = experiments.queue_plan(spec)
    # A backend's option section is an attribute of the spec only at run time (its registry adds it).
    runs: list[Any] = [run for _, run in (q.cell for q in ordered)]
    assert [(run.vllm.block_size, run.load.vus) for run in runs] == [(32, 1), (32, 8), (128, 1), (128, 8)]


def test_by_default_repeats_run_in_interleaved_rounds_with_the_seed_recorded(engine) -> None:
    with Session(engine) as session:
        experiment = experiments.enqueue_experiment(
            session=session, spec=interleaved_grid(repeats=3, order="interleaved")
        )
        runs = sorted(experiment.runs, key=lambda r: r.id)
        cells = {(run.backend, run.vus) for run in runs}
        for round_index in range(3):
            in_round = [(run.backend, run.vus) for run in runs[6 * round_index : 6 * round_index + 6]]
            assert sorted(in_round) == sorted(cells)  # every cell once per round
            assert {run.repeat_index for run in runs[6 * round_index : 6 * round_index + 6]} == {round_index}
        seed = experiment.spec["order_seed"]
        assert experiment.spec["order"] == "interleaved" and isinstance(seed, int)
    # The recorded seed replays the same order.
    replay = ExperimentSpec.model_validate(experiment.spec)
    _, plan = experiments.queue_plan(replay)
    assert [(q.cell[1].backend, q.cell[1].load.vus, q.round_index) for q in plan] == [
        (run.backend, run.vus, run.repeat_index) for run in runs
    ]


def _run(start_s: float, end_s: float, measured_s: float | None) -> Run:
    t0 = datetime(2026, 12, 1, tzinfo=UTC)
    return Run(
        started_at=t0 + timedelta(seconds=start_s),
        finished_at=t0 + timedelta(seconds=end_s),
        measured_duration_s=measured_s,
    )


def test_wall_time_ratio_is_first_start_to_last_end_over_measured_seconds() -> None:
    runs = [_run(0, 90, 60), _run(90, 160, 60), _run(160, 170, None)]  # the last one failed before measuring
    assert experiments.wall_time_ratio(runs) == pytest.approx(170 / 120)
    assert experiments.wall_time_ratio([_run(0, 10, None)]) is None


def test_the_worker_stores_the_ratio_on_the_experiment(engine) -> None:
    with Session(engine) as session:
        experiment = experiments.enqueue_experiment(session=session, spec=load_preset("seed-exp3", quick=True))
        experiment_id = experiment.id
        for index, run in enumerate(experiment.runs):
            run.started_at, run.finished_at = (
                _run(30 * index, 30 * index + 30, 20).started_at,
                _run(30 * index, 30 * index + 30, 20).finished_at,
            )
            run.measured_duration_s = 20
        session.commit()
        assert experiments.record_wall_time_ratio(session=session, experiment_id=experiment_id) == pytest.approx(1.5)
    with Session(engine) as session:
        assert session.get_one(Experiment, experiment_id).wall_time_ratio == pytest.approx(1.5)


# The schema version just before the wall-time column existed (later migrations may follow).
BEFORE_WALL_TIME = migrations.MIGRATIONS.index(migrations._experiment_wall_time_ratio)


def test_the_migration_adds_the_column_and_keeps_experiments(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'old.db'}")
    migrations.upgrade(engine)
    with engine.begin() as connection:  # a database from before: no column, version one less
        connection.execute(text("ALTER TABLE experiments DROP COLUMN wall_time_ratio"))
        connection.execute(text("UPDATE schema_version SET version = :v"), {"v": BEFORE_WALL_TIME})
    with Session(engine) as session:
        session.execute(
            text(
                "INSERT INTO experiments (name, scale, spec, created_at) VALUES ('old', 'full', '{}', "
                "'2026-11-29 00:00:00')"
            )
        )
        session.commit()
    assert migrations.upgrade(engine) == BEFORE_WALL_TIME
    with engine.connect() as connection:
        assert "wall_time_ratio" in {c["name"] for c in inspect(connection).get_columns("experiments")}
        assert connection.execute(text("SELECT count(*) FROM experiments")).scalar() == 1


def test_the_report_shows_the_ratio_per_experiment_and_overall() -> None:
    meta: dict[str, ExperimentMeta] = {
        "seed-exp1": {"ids": [1], "wall_s": 130.0, "measured_s": 100.0},
        "seed-exp2": {"ids": [2], "wall_s": 110.0, "measured_s": 100.0},
    }
    assert list(scaling_table(meta)["wall time / measured"]) == ["1.30", "1.10"]
    sentence = overhead_sentence(meta)
    assert sentence is not None and "wall-time ratio of 1.20" in sentence
    assert overhead_sentence({"seed-exp1": {"ids": [1]}}) is None


# -- vLLM's CPU options ---------------------------------------------------------------------------


@pytest.fixture()
def cpu_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_backend, "gpu_available", lambda: False)


def _launch(**options: object):
    return VllmBackend().launch(model="m", options=VllmOptions.model_validate(options), settings=Settings())


def test_best_block_size_on_cpu_is_32_and_recorded_in_the_command(cpu_host: None) -> None:
    argv = _launch().argv
    assert argv[argv.index("--block-size") + 1] == "32"
    assert _launch(block_size=128).argv[-1] == "128"


def test_vllms_own_block_size_on_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_backend, "gpu_available", lambda: True)
    assert "--block-size" not in _launch().argv
    assert "VLLM_CPU_OMP_THREADS_BIND" not in _launch().env


def test_block_sizes_the_cpu_refuses_are_a_clear_error(cpu_host: None) -> None:
    with pytest.raises(ValidationError, match="multiples of 32"):
        VllmOptions(block_size=16)


def test_thread_binding_and_kv_cache_are_set_from_best(cpu_host: None) -> None:
    env = _launch().env
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == vllm_backend.BEST_THREADS_BIND
    assert env["VLLM_CPU_KVCACHE_SPACE"] == str(vllm_backend.BEST_KV_CACHE_GIB)
    assert "VLLM_CPU_NUM_OF_RESERVED_CPU" not in env
    env = _launch(threads_bind="0-1", kv_cache_gib=4, reserved_cpus=0).env
    assert (env["VLLM_CPU_OMP_THREADS_BIND"], env["VLLM_CPU_KVCACHE_SPACE"], env["VLLM_CPU_NUM_OF_RESERVED_CPU"]) == (
        "0-1",
        "4",
        "0",
    )


@pytest.mark.parametrize("bad", ["0;reboot", "0-1|", "all", ""])
def test_a_thread_binding_that_is_not_a_cpu_list_is_refused(bad: str) -> None:
    with pytest.raises(ValidationError):
        VllmOptions(threads_bind=bad)
