"""Run specs, experiment grids and the seed presets."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from pydantic import ValidationError

from lab.backends.vllm import VllmOptions
from lab.specs.schema import (
    ExperimentSpec,
    LoadSpec,
    RunSpec,
    SpecError,
    format_validation_error,
    list_presets,
    load_preset,
    parse_set_option,
)


def test_the_three_seed_presets_exist() -> None:
    assert {"seed-exp1", "seed-exp2", "seed-exp3"} <= set(list_presets())


def test_seed_exp1_is_the_seeds_setup_exactly() -> None:
    spec = load_preset("seed-exp1")
    cells = spec.expand()
    assert len(cells) == 6
    pairs = {(run.backend, run.load.vus) for _, _, run in cells}
    assert pairs == {(b, v) for b in ("naive", "vllm") for v in (1, 8, 32)}
    for _, _, run in cells:
        assert run.load.kind == "constant-vus" and run.load.duration_s == 60
        assert run.max_tokens == 128 and run.workload.kind == "number-story" and run.workload.prompts == 50
    # Backends are the outer loop: each backend starts once per experiment.
    assert [run.backend for _, _, run in cells] == ["naive"] * 3 + ["vllm"] * 3


def test_seed_exp2_and_exp3_settings() -> None:
    exp2 = load_preset("seed-exp2").expand()
    assert {(r.backend, r.workload.prompts, r.load.vus) for _, _, r in exp2} == {
        (b, p, 32) for b in ("vllm", "vllm+cache") for p in (50, 1000)
    }
    assert all(r.cache.policy == "all" for _, _, r in exp2)
    exp3 = load_preset("seed-exp3").expand()
    assert [r.backend for _, _, r in exp3] == ["naive", "vllm", "vllm+cache"]
    assert all(
        r.workload.kind == "sharegpt-chat" and r.workload.sessions == 1000 and r.workload.max_turns == 5
        for _, _, r in exp3
    )


def test_quick_scale_shortens_and_says_how() -> None:
    quick = load_preset("seed-exp1", quick=True)
    assert quick.scale == "quick"
    assert "30 s per cell instead of 60 s" in quick.scale_note
    assert all(run.load.duration_s == 30 for _, _, run in quick.expand())
    # The quick scale keeps each experiment's phenomenon: 32 VUs where the seed used them.
    assert {run.load.peak_vus for _, _, run in quick.expand()} == {1, 8, 32}
    for preset in ("seed-exp2", "seed-exp3"):
        assert {run.load.peak_vus for _, _, run in load_preset(preset, quick=True).expand()} == {32}


def test_overrides_apply_to_base_grid_and_repeats() -> None:
    spec = load_preset(
        "seed-exp1",
        overrides=[("load.duration_s", 5), ("grid.load.vus", [2]), ("grid.backend", ["vllm"]), ("repeats", 3)],
    )
    cells = spec.expand()
    assert len(cells) == 3
    assert [repeat for _, repeat, _ in cells] == [0, 1, 2]
    assert all(run.load.duration_s == 5 and run.load.vus == 2 for _, _, run in cells)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("load.vus", 0, "load.vus"),
        ("load.vus", 100_000, "less than or equal to 1024"),
        ("load.duration_s", -5, "load.duration_s"),
        ("load.duration_s", 10**9, "load.duration_s"),
        ("max_tokens", 0, "max_tokens"),
        ("load.nonsense", 1, "nonsense"),
        ("backend", "tgi", "backend"),
        ("model", "-rf", "model"),
        ("model", "foo;rm -rf /", "model"),
    ],
)
def test_bad_values_give_a_clear_message(key: str, value: object, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        load_preset("seed-exp1", overrides=[(key, value)])


def test_unknown_preset() -> None:
    with pytest.raises(SpecError, match="unknown preset 'nope'; presets: engines-cpu, first-run, seed-exp1"):
        load_preset("nope")


def test_set_option_parsing() -> None:
    assert parse_set_option("load.vus=8") == ("load.vus", 8)
    assert parse_set_option("grid.load.vus=[1,8]") == ("grid.load.vus", [1, 8])
    assert parse_set_option("workload.system_prompt=be brief") == ("workload.system_prompt", "be brief")
    with pytest.raises(SpecError):
        parse_set_option("novalue")


def test_load_kinds_need_their_fields() -> None:
    with pytest.raises(ValidationError, match="at least one stage"):
        LoadSpec(kind="ramping-vus")
    with pytest.raises(ValidationError, match="rate_per_s"):
        LoadSpec(kind="constant-arrival-rate")
    ramp = LoadSpec.model_validate(
        {"kind": "ramping-vus", "stages": [{"duration_s": 10, "target_vus": 4}, {"duration_s": 5, "target_vus": 8}]}
    )
    assert ramp.planned_duration_s == 15 and ramp.peak_vus == 8


def test_vllm_extra_flags_are_allow_listed() -> None:
    assert VllmOptions(extra_args=["--max-num-seqs", "16"]).extra_args == ["--max-num-seqs", "16"]
    with pytest.raises(ValidationError, match="not allowed"):
        VllmOptions(extra_args=["--api-key", "x"])
    with pytest.raises(ValidationError, match="forbidden character"):
        VllmOptions(extra_args=["--max-num-seqs", "1;reboot"])


def test_external_targets_must_be_loopback_unless_allowed() -> None:
    spec = RunSpec(backend="external", target_url="http://127.0.0.1:9000/")
    assert spec.target_url == "http://127.0.0.1:9000"
    for url in ("http://169.254.169.254/", "http://10.0.0.1:8000"):
        with pytest.raises(ValidationError):
            RunSpec(backend="external", target_url=url)
    with pytest.raises(ValidationError, match="target_url"):
        RunSpec(backend="external")


def test_format_validation_error_names_the_field() -> None:
    try:
        RunSpec.model_validate({"load": {"vus": 0}})
    except ValidationError as error:
        text = format_validation_error(error)
    assert text.startswith("load.vus: ")


@hypothesis_settings(max_examples=60, deadline=None)
@given(vus=st.integers(min_value=-10, max_value=5000), duration=st.floats(min_value=-100, max_value=100_000))
def test_spec_validation_accepts_exactly_the_allowed_ranges(vus: int, duration: float) -> None:
    valid = 1 <= vus <= 1024 and 1 <= duration <= 6 * 3600
    try:
        LoadSpec(vus=vus, duration_s=duration)
    except ValidationError:
        assert not valid
    else:
        assert valid


def test_experiment_grid_rejects_an_invalid_cell() -> None:
    with pytest.raises(ValidationError, match="cell vus=0"):
        ExperimentSpec(name="x", grid={"load.vus": [1, 0]})


def test_set_on_a_grid_axis_pins_it() -> None:
    cells = load_preset("seed-exp1", overrides=[("load.vus", 4), ("backend", "vllm")]).expand()
    assert [(run.backend, run.load.vus) for _, _, run in cells] == [("vllm", 4)]


def test_repeat_seeds_stay_in_range() -> None:
    import tempfile
    from pathlib import Path

    from sqlalchemy.orm import Session

    from db import migrations
    from db.engine import make_engine
    from lab.queue import experiments

    engine = make_engine(f"sqlite:///{Path(tempfile.mkdtemp()) / 'x.db'}")
    migrations.upgrade(engine)
    spec = load_preset(
        "seed-exp1",
        overrides=[("random_seed", 2**31 - 1), ("repeats", 2), ("grid.backend", ["naive"]), ("grid.load.vus", [1])],
    )
    with Session(engine) as session:
        seeds = [run.random_seed for run in experiments.enqueue_experiment(session=session, spec=spec).runs]
    assert seeds == [2**31 - 1, 0]


def test_filling_the_cache_first_applies_up_to_its_limit_and_needs_a_known_set_of_requests() -> None:
    def spec(**fields: Any) -> RunSpec:
        return RunSpec.model_validate({"backend": "vllm+cache", "cache": {"fill_first_up_to": 100}, **fields})

    assert spec(workload={"kind": "number-story", "prompts": 50}).fills_cache_first
    assert not spec(workload={"kind": "number-story", "prompts": 1000}).fills_cache_first  # starts cold
    assert not RunSpec.model_validate({"backend": "vllm", "cache": {"fill_first_up_to": 100}}).fills_cache_first
    with pytest.raises(ValueError, match="fill_first_up_to needs a workload with a known set"):
        spec(workload={"kind": "sharegpt-chat"})
    quick = load_preset("seed-exp2", quick=True)
    filled = {(run.backend, run.workload.prompts) for _, _, run in quick.expand() if run.fills_cache_first}
    assert filled == {("vllm+cache", 50)}
