"""The adapted scale from stored history, and one more round of chosen cells."""

from __future__ import annotations

from sqlalchemy.orm import Session

from lab.queue import experiments
from lab.queue.rounds import adapted_spec, cell_history, round_run_columns, round_seconds
from lab.specs.schema import ExperimentSpec, load_preset
from tests.support.queue import finish_run


def test_the_adapted_scale_lengthens_only_the_cells_history_says_cannot_measure(engine) -> None:
    spec = load_preset("seed-exp2", overrides=[("repeats", 1)])
    with Session(engine) as session:
        history = experiments.enqueue_experiment(session=session, spec=spec)
        ids = {run.cell_label: run.id for run in history.runs}
    # What this machine measured before: direct vLLM at 0.39 req/s, the cache at 30 req/s.
    for label, run_id in ids.items():
        rate = 30.0 if "cache" in label else 0.3925
        finish_run(engine, run_id, req_per_s=rate, latency_avg_s=32 / rate if rate < 1 else 1.0)
    with Session(engine) as session:
        history_of_first_cell = cell_history(session, spec.distinct_cells()[0][1])
        assert history_of_first_cell is not None and history_of_first_cell.req_per_s == 0.3925
        adapted = adapted_spec(session, spec, max_cell_s=600)
    assert adapted.scale == "adapted"
    cells = adapted.cell_scales
    assert cells["backend=vllm+cache prompts=50"].duration_s == 180  # 128 s to fill, with the margin
    assert "storing 50 answers takes at least 127 s" in cells["backend=vllm+cache prompts=50"].why
    thousand = cells["backend=vllm+cache prompts=1000"]
    assert thousand.duration_s == 60 and "at least 2,548 s" in thousand.over_cap
    # The direct cells complete under 30 requests at 0.39 req/s: lengthened alike, so the A/A
    # check against experiment 1's identical cell compares the same configuration.
    assert cells["backend=vllm prompts=50"].duration_s == cells["backend=vllm prompts=1000"].duration_s
    expanded = {label: run_spec.load.duration_s for label, _, run_spec in adapted.expand()}
    assert expanded["backend=vllm+cache prompts=50"] == 180


def test_one_more_round_runs_only_the_chosen_cells_with_the_next_repeat_index(engine) -> None:
    spec = load_preset("seed-exp1", quick=True, overrides=[("repeats", 2)])
    with Session(engine) as session:
        experiment = experiments.enqueue_experiment(session=session, spec=spec)
        experiment_id = experiment.id
        first = {run.cell_label: run.id for run in experiment.runs if run.repeat_index == 0}
    finish_run(engine, first["backend=vllm vus=1"])
    chosen = {"backend=naive vus=1", "backend=vllm vus=1"}
    with Session(engine) as session:
        stored = ExperimentSpec.model_validate(session.get_one(type(experiment), experiment_id).spec)
        runs = round_run_columns(stored, 2, chosen)
        assert {run["cell_label"] for run in runs} == chosen and {run["repeat_index"] for run in runs} == {2}
        seeds = {run["cell_label"]: run["random_seed"] for run in runs}
        assert seeds["backend=vllm vus=1"] == (stored.base.random_seed + 2) % 2**31
        # Predicted seconds: the finished cell's wall time, the other's planned seconds.
        assert round_seconds(session, experiment_id, chosen) == 90 + spec.base.load.duration_s


def test_history_counts_runs_of_the_same_model_from_another_checkout(engine, tmp_path) -> None:
    """A reproduction runs from a worktree: its model folder's path differs from the runs stored
    from the main checkout, and their history must still count (the model matched by name)."""
    folders = {
        where: tmp_path / where / "models" / name
        for where, name in (("clone", "SmolLM2-135M-Instruct"), ("lab", "SmolLM2-135M-Instruct"), ("other", "Another"))
    }
    for folder in folders.values():
        folder.mkdir(parents=True)
    spec = load_preset("seed-exp1", quick=True, overrides=[("repeats", 1)])

    def with_model(where: str) -> ExperimentSpec:
        return spec.model_copy(update={"base": spec.base.model_copy(update={"model": str(folders[where])})})

    elsewhere = with_model("clone")
    with Session(engine) as session:
        stored = experiments.enqueue_experiment(session=session, spec=elsewhere)
        run_ids = [run.id for run in stored.runs]
    for run_id in run_ids:
        finish_run(engine, run_id, req_per_s=0.1, latency_avg_s=10.0)
    here, other_model = with_model("lab"), with_model("other")
    with Session(engine) as session:
        found = cell_history(session, here.distinct_cells()[0][1])
        assert found is not None and found.req_per_s == 0.1
        assert cell_history(session, other_model.distinct_cells()[0][1]) is None
