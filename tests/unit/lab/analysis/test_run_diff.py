"""The settings diff and the pairs of cells a ratio may compare (lab.analysis.run_diff)."""

from __future__ import annotations

from lab.analysis.run_diff import cell_pairs, differing_settings, flatten_spec, settings_diff


def spec(vus: int = 1, max_tokens: int = 32, seed: int = 1234, backend: str = "naive") -> dict:
    return {
        "backend": backend,
        "max_tokens": max_tokens,
        "random_seed": seed,
        "load": {"vus": vus, "duration_s": 20.0, "stages": []},
        "naive": {"dtype": "bfloat16"},
    }


def record(run_id: int, tok: float, repeat: int = 0, status: str = "done") -> dict:
    return {
        "run_id": run_id,
        "status": status,
        "output_tok_per_s": tok,
        "req_per_s": tok / 10,
        "experiment_id": 1,
        "repeat_index": repeat,
    }


def test_flatten_spec_uses_dotted_paths_and_keeps_lists_whole() -> None:
    flat = flatten_spec(spec())
    assert flat["load.vus"] == 1 and flat["naive.dtype"] == "bfloat16" and flat["load.stages"] == ()


def test_the_diff_names_every_differing_setting_but_not_the_seed() -> None:
    runs = [(5, spec(vus=2, max_tokens=128, seed=1)), (6, spec(vus=1, max_tokens=32, seed=2))]
    assert differing_settings([s for _, s in runs]) == ["max_tokens", "load.vus"]
    rows = settings_diff(runs)
    assert rows == [{"setting": "max_tokens", 5: 128, 6: 32}, {"setting": "load.vus", 5: 2, 6: 1}]


def test_a_setting_present_in_one_spec_only_differs() -> None:
    with_option = {**spec(), "vllm": {"dtype": "auto"}}
    assert differing_settings([spec(), with_option]) == ["vllm.dtype"]


def test_runs_differing_in_two_settings_get_no_ratio() -> None:
    pairs = cell_pairs(
        [record(5, 10.0), record(6, 20.0)],
        [spec(vus=2, max_tokens=128), spec(vus=1, max_tokens=32)],
        ["output_tok_per_s"],
    )
    assert len(pairs) == 1 and not pairs[0].comparable and pairs[0].ratios == ()
    assert {name for name, _, _ in pairs[0].differences} == {"max_tokens", "load.vus"}


def test_runs_differing_in_one_setting_get_the_ratio_higher_over_lower() -> None:
    pairs = cell_pairs([record(1, 10.0), record(2, 30.0)], [spec(vus=8), spec(vus=1)], ["output_tok_per_s"])
    (pair,) = pairs
    assert pair.comparable and pair.differences == (("load.vus", 1, 8),)
    ratio = pair.ratios[0].ratio
    assert pair.ratios[0].figure == "output_tok_per_s" and ratio is not None and abs(ratio - 1 / 3) < 1e-9


def test_repeats_with_their_own_seeds_form_one_cell() -> None:
    records = [record(1, 10.0, 0), record(2, 12.0, 1), record(3, 20.0, 0), record(4, 22.0, 1)]
    specs = [spec(vus=1, seed=1), spec(vus=1, seed=2), spec(vus=2, seed=1), spec(vus=2, seed=2)]
    (pair,) = cell_pairs(records, specs, ["output_tok_per_s"])
    assert pair.first.run_ids == [1, 2] and pair.second.run_ids == [3, 4]
    found = pair.ratios[0]
    # Paired by round: the geometric mean of 20/10 and 22/12, the centre of its own interval.
    assert found.ratio is not None and abs(found.ratio - (2.0 * 22 / 12) ** 0.5) < 1e-9
    assert found.ci95_low is not None and found.ci95_high is not None
    assert abs(found.ratio - (found.ci95_low * found.ci95_high) ** 0.5) < 1e-9


def test_runs_not_done_are_left_out() -> None:
    assert (
        cell_pairs(
            [record(1, 10.0), record(2, 30.0, status="failed")], [spec(vus=8), spec(vus=1)], ["output_tok_per_s"]
        )
        == []
    )


def test_comparable_pairs_come_first() -> None:
    specs = [spec(vus=1), spec(vus=2), spec(vus=1, max_tokens=64, backend="vllm")]
    pairs = cell_pairs([record(1, 1.0), record(2, 2.0), record(3, 3.0)], specs, ["output_tok_per_s"])
    assert [pair.comparable for pair in pairs] == [True, False, False]
