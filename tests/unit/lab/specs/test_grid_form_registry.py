"""The grid form offers what the registries hold: llama.cpp, external targets, synthetic
prompts, and the options each backend kind declares (a throwaway kind registered here)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Literal

import pytest
from pydantic import Field

from lab.backends import Backend, backend_names, register, unregister
from lab.settings import get_settings
from lab.specs.grid_form import GridForm, check_grid_form, is_external
from lab.specs.options import backend_inputs, settable_options, workload_inputs
from lab.user_input.base import StrictModel
from lab.user_input.fields import OptionField
from lab.workloads import workload_names


def form(**values) -> GridForm:
    return GridForm(model=get_settings().default_model, **values)


def test_external_is_decided_by_the_registry():
    assert is_external("external") and is_external("external+cache")
    assert not is_external("llamacpp") and not is_external("vllm+cache")
    assert not is_external("no-such-engine")


def test_synthetic_fields_become_the_workload_section():
    spec, errors = check_grid_form(
        form(
            backends=["llamacpp", "vllm"],
            workload="synthetic",
            workload_options={
                "synthetic.input_tokens_mean": 256,
                "synthetic.shared_prefix_tokens": 128,
                "synthetic.prompts": 20,
            },
        )
    )
    assert errors == {}
    run = spec.expand()[0][2]
    assert run.workload.kind == "synthetic"
    section = run.workload.options()
    assert (section.input_tokens_mean, section.shared_prefix_tokens, section.prompts) == (256, 128, 20)
    assert spec.grid["backend"] == ["llamacpp", "vllm"]


def test_a_prefix_as_long_as_the_prompt_is_refused_beside_its_field():
    spec, errors = check_grid_form(
        form(
            workload="synthetic",
            workload_options={"synthetic.input_tokens_mean": 128, "synthetic.shared_prefix_tokens": 128},
        )
    )
    assert spec is None
    assert "shared_prefix_tokens must be smaller" in errors["synthetic"]


# ------------------------------------------------------------------ backends' declared options


class ToyOptions(StrictModel):
    """The ``toy`` section of a throwaway backend."""

    workers: int = Field(default=2, ge=1, le=8, description="worker processes")
    precision: Literal["low", "high"] = "high"
    note: str = "never shown"  # not declared: the form leaves it out


class ToyBackend(Backend):
    """A backend known to this test module alone."""

    name = "toy"
    label = "Toy server"
    options_model = ToyOptions
    option_fields = (OptionField("toy.workers", "Workers", step=1), OptionField("toy.precision", "Precision"))


@pytest.fixture()
def toy() -> Iterator[str]:
    register(ToyBackend)
    try:
        yield "toy"
    finally:
        unregister("toy")


def test_a_registered_backends_fields_are_described_for_the_form(toy: str) -> None:
    inputs = backend_inputs(toy)
    assert [(field.option.path, field.kind, field.default) for field in inputs] == [
        ("toy.workers", "int", 2),
        ("toy.precision", "choice", "high"),
    ]
    assert inputs[0].help == "worker processes" and inputs[1].choices == ("low", "high")
    assert backend_inputs("toy+cache") == inputs
    assert "toy.workers" in settable_options() and "toy.note" not in settable_options()


def test_a_registered_backends_fields_are_checked_one_by_one_and_reach_its_section(toy: str) -> None:
    spec, errors = check_grid_form(
        form(backends=["toy+cache"], backend_options={"toy.workers": 0, "toy.precision": "medium"})
    )
    assert spec is None
    assert errors == {
        "toy.workers": "workers: Input should be greater than or equal to 1",
        "toy.precision": "precision: Input should be 'low' or 'high'",
    }
    spec, errors = check_grid_form(
        form(
            backends=["toy", "naive"],
            backend_options={"toy.workers": 5, "toy.precision": "low", "naive.dtype": "float32"},
        )
    )
    assert errors == {} and spec is not None
    cells: dict[str, Any] = {cell.backend: cell for _, _, cell in spec.expand()}
    assert (cells["toy"].backend_options().workers, cells["toy"].backend_options().precision) == (5, "low")
    assert cells["toy"].backend_options().note == "never shown" and cells["naive"].naive.dtype == "float32"


def test_options_of_a_backend_not_chosen_are_neither_checked_nor_sent(toy: str) -> None:
    spec, errors = check_grid_form(form(backends=["naive"], backend_options={"toy.workers": 0}))
    assert errors == {} and spec is not None and spec.base.backend_options().dtype == "bfloat16"


def test_a_declared_field_the_options_model_lacks_is_refused(toy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ToyBackend, "option_fields", (OptionField("toy.threads", "Threads"),))
    with pytest.raises(ValueError, match=re.escape("the toy backend declares 'toy.threads'")):
        backend_inputs(toy)
    monkeypatch.setattr(ToyBackend, "option_fields", (OptionField("vllm.dtype", "dtype"),))
    with pytest.raises(ValueError, match="which its options model lacks"):
        backend_inputs(toy)  # another kind's section is not its own


def test_every_registered_kind_declares_fields_its_models_have() -> None:
    for kind in backend_names():
        backend_inputs(kind)  # raises for a field the options model lacks
    for kind in workload_names():
        workload_inputs(kind)
    assert backend_inputs("external") == []
    assert {"vllm.dtype", "vllm.block_size", "llamacpp.n_threads", "naive.torch_threads"} <= set(settable_options())
