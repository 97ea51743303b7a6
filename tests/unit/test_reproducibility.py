"""A/A checks, drift, machine speed and provenance over a reproduction's runs."""

import pytest

from lab.analysis.reproducibility import aa_checks, drift_factor, machine_speed_by_run, provenance_of, runs_off_median


def run(run_id: int, preset_started: str, req_per_s: float, **extra) -> dict:  # noqa: ANN003
    return {"run_id": run_id, "status": "done", "backend": "vllm", "model": "m", "workload": "number-story",
            "load_kind": "constant-vus", "vus": 32, "prompts": 50, "duration_s": 60, "max_tokens": 128,
            "experiment_id": int(preset_started[0]), "repeat_index": run_id % 3, "started_at": preset_started,
            "req_per_s": req_per_s, **extra}


def test_identical_cells_in_two_experiments_are_an_aa_check_and_a_drift_is_found() -> None:
    same = {"seed-exp1": [run(1, "1-a", 2.30), run(2, "1-b", 2.35), run(3, "1-c", 2.33)],
            "seed-exp2": [run(4, "2-a", 2.31), run(5, "2-b", 2.29), run(6, "2-c", 2.36)]}
    [check] = aa_checks(same)
    assert check.interval.ci95_low < 1 < check.interval.ci95_high and not check.drifted
    assert drift_factor([check]) == 1.0
    # The seed-scale case: 2.33 then 1.79 req/s, four minutes later.
    moved = {"seed-exp1": same["seed-exp1"],
             "seed-exp2": [run(4, "2-a", 1.79), run(5, "2-b", 1.70), run(6, "2-c", 1.88)]}
    [check] = aa_checks(moved)
    assert check.drifted and check.earlier_experiment == "seed-exp1"
    assert drift_factor([check]) == pytest.approx(2.327 / 1.79, rel=0.01)


def test_other_cells_are_no_aa_check() -> None:
    records = {"seed-exp1": [run(1, "1-a", 2.3)], "seed-exp2": [run(2, "2-a", 2.3, vus=8)]}
    assert aa_checks(records) == []


def test_machine_speed_names_runs_off_the_median() -> None:
    records = [run(1, "1", 1, machine_calibration_before_s=1.0, machine_calibration_after_s=1.0),
               run(2, "1", 1, machine_calibration_before_s=1.0, machine_calibration_after_s=1.1),
               run(3, "1", 1, machine_calibration_before_s=2.0, machine_calibration_after_s=2.0)]
    speed = machine_speed_by_run(records)
    assert speed[2] == pytest.approx(1.05 / 1.05)
    assert runs_off_median(records, speed) == [(3, pytest.approx(0.525))]


def test_provenance_lists_commits_and_dirty_runs() -> None:
    clean = provenance_of([{"run_id": 1, "lab_git_commit": "abc123"}, {"run_id": 2, "lab_git_commit": "abc123"}])
    assert clean.one_clean_commit and "Every run came from lab commit abc123" in clean.sentence()
    mixed = provenance_of([{"run_id": 1, "lab_git_commit": "abc123"},
                           {"run_id": 2, "lab_git_commit": "def456-dirty", "lab_git_dirty": True}])
    assert not mixed.one_clean_commit
    assert "2 lab commits (abc123, def456)" in mixed.sentence() and "#2" in mixed.sentence()


def test_an_aa_check_too_wide_to_tell_widens_by_its_ratio():
    from lab.analysis.reproducibility import AACheck
    from lab.analysis.statistics import RatioInterval

    def check(ratio, low, high):
        return AACheck("cell", "seed-exp1", "seed-exp2", "req_per_s", RatioInterval(ratio, low, high, 3, 3, "paired log"))

    busy = check(2.93, 0.07, 132.1)
    assert busy.too_wide and not busy.drifted and busy.drift_factor == pytest.approx(2.93)
    quiet = check(0.94, 0.80, 1.09)
    assert not quiet.too_wide and quiet.drift_factor == 1.0
    assert drift_factor([quiet, busy]) == pytest.approx(2.93)
