"""A/A checks, drift, machine speed and provenance over a reproduction's runs."""

import pytest

from lab.analysis.reproducibility import aa_checks, drift_factor, machine_speed_by_run, provenance_of


def run(run_id: int, preset_started: str, req_per_s: float, **extra) -> dict:
    return {
        "run_id": run_id,
        "status": "done",
        "backend": "vllm",
        "model": "m",
        "workload": "number-story",
        "load_kind": "constant-vus",
        "vus": 32,
        "prompts": 50,
        "duration_s": 60,
        "max_tokens": 128,
        "experiment_id": int(preset_started[0]),
        "repeat_index": run_id % 3,
        "started_at": preset_started,
        "req_per_s": req_per_s,
        **extra,
    }


def test_identical_cells_in_two_experiments_are_an_aa_check_and_a_drift_is_found() -> None:
    same = {
        "seed-exp1": [run(1, "1-a", 2.30), run(2, "1-b", 2.35), run(3, "1-c", 2.33)],
        "seed-exp2": [run(4, "2-a", 2.31), run(5, "2-b", 2.29), run(6, "2-c", 2.36)],
    }
    [check] = aa_checks(same)
    assert check.interval.ci95_low is not None and check.interval.ci95_high is not None
    assert check.interval.ci95_low < 1 < check.interval.ci95_high and not check.drifted
    assert drift_factor([check]) == 1.0
    # The seed-scale case: 2.33 then 1.79 req/s, four minutes later.
    moved = {
        "seed-exp1": same["seed-exp1"],
        "seed-exp2": [run(4, "2-a", 1.79), run(5, "2-b", 1.70), run(6, "2-c", 1.88)],
    }
    [check] = aa_checks(moved)
    assert check.drifted and check.earlier_experiment == "seed-exp1"
    assert drift_factor([check]) == pytest.approx(2.327 / 1.79, rel=0.01)


def test_other_cells_are_no_aa_check() -> None:
    records = {"seed-exp1": [run(1, "1-a", 2.3)], "seed-exp2": [run(2, "2-a", 2.3, vus=8)]}
    assert aa_checks(records) == []


def test_machine_speed_is_relative_to_the_median_run() -> None:
    records = [
        run(1, "1", 1, machine_calibration_before_s=1.0, machine_calibration_after_s=1.0),
        run(2, "1", 1, machine_calibration_before_s=1.0, machine_calibration_after_s=1.1),
        run(3, "1", 1, machine_calibration_before_s=2.0, machine_calibration_after_s=2.0),
    ]
    speed = machine_speed_by_run(records)
    assert speed[2] == pytest.approx(1.05 / 1.05)
    assert speed[3] == pytest.approx(0.525)


def test_provenance_lists_commits_and_dirty_runs() -> None:
    clean = provenance_of([{"run_id": 1, "lab_git_commit": "abc123"}, {"run_id": 2, "lab_git_commit": "abc123"}])
    assert clean.one_clean_commit and "Every run came from lab commit abc123" in clean.sentence()
    mixed = provenance_of(
        [
            {"run_id": 1, "lab_git_commit": "abc123"},
            {"run_id": 2, "lab_git_commit": "def456-dirty", "lab_git_dirty": True},
        ]
    )
    assert not mixed.one_clean_commit
    assert "2 lab commits (abc123, def456)" in mixed.sentence() and "#2" in mixed.sentence()


def test_an_aa_check_too_wide_to_tell_widens_by_its_ratio():
    from lab.analysis.reproducibility import AACheck
    from lab.analysis.statistics import RatioInterval

    def check(ratio, low, high):
        return AACheck(
            "cell", "seed-exp1", "seed-exp2", "req_per_s", RatioInterval(ratio, low, high, 3, 3, "paired log")
        )

    busy = check(2.93, 0.07, 132.1)
    assert busy.too_wide and not busy.drifted and busy.drift_factor == pytest.approx(2.93)
    quiet = check(0.94, 0.80, 1.09)
    assert not quiet.too_wide and quiet.drift_factor == 1.0
    assert drift_factor([quiet, busy]) == pytest.approx(2.93)


def test_the_aa_check_compares_the_backends_steady_rate_where_every_run_has_one() -> None:
    """The seed-scale reproduction of b062e68: k6's req/s 0.74, 0.41, 0.41 against 0.39, 0.40,
    0.39 (whole batches of 32 inside or outside the graceful stop); vLLM's token rate in the load
    window 95.7, 84.5, 90.6 against 77.6, 87.7, 87.3."""
    steady = {"steady_source": "server counters"}
    records = {
        "seed-exp1": [
            run(4, "1-a", 0.736, steady_output_tok_per_s=95.7, repeat_index=0, **steady),
            run(7, "1-b", 0.411, steady_output_tok_per_s=84.5, repeat_index=1, **steady),
            run(16, "1-c", 0.411, steady_output_tok_per_s=90.6, repeat_index=2, **steady),
        ],
        "seed-exp2": [
            run(19, "2-a", 0.389, steady_output_tok_per_s=77.6, repeat_index=0, **steady),
            run(26, "2-b", 0.400, steady_output_tok_per_s=87.7, repeat_index=1, **steady),
            run(29, "2-c", 0.389, steady_output_tok_per_s=87.3, repeat_index=2, **steady),
        ],
    }
    [check] = aa_checks(records)
    assert check.figure == "steady_output_tok_per_s" and not check.too_wide and not check.drifted
    assert check.interval.ratio == pytest.approx(0.93, abs=0.02)
    [on_k6] = aa_checks(records, figure="req_per_s")
    assert on_k6.too_wide  # 0.76x [0.31x, 1.85x]
    records["seed-exp2"][0] = run(
        19, "2-a", 0.389, steady_output_tok_per_s=77.6, repeat_index=0, steady_source="client series"
    )
    [mixed] = aa_checks(records)
    assert mixed.figure == "req_per_s"
