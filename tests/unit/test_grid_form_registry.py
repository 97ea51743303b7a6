"""The grid form offers what the registries hold: llama.cpp, external targets, synthetic prompts."""

from lab.settings import get_settings
from lab.specs.grid_form import GridForm, check_grid_form, is_external


def form(**values) -> GridForm:  # noqa: ANN003
    return GridForm(model=get_settings().default_model, **values)


def test_external_is_decided_by_the_registry():
    assert is_external("external") and is_external("external+cache")
    assert not is_external("llamacpp") and not is_external("vllm+cache")
    assert not is_external("no-such-engine")


def test_synthetic_fields_become_the_workload_section():
    spec, errors = check_grid_form(form(backends=["llamacpp", "vllm"], workload="synthetic",
                                        workload_options={"synthetic.input_tokens_mean": 256,
                                                          "synthetic.shared_prefix_tokens": 128,
                                                          "synthetic.prompts": 20}))
    assert errors == {}
    run = spec.expand()[0][2]
    assert run.workload.kind == "synthetic"
    section = run.workload.options()
    assert (section.input_tokens_mean, section.shared_prefix_tokens, section.prompts) == (256, 128, 20)
    assert spec.grid["backend"] == ["llamacpp", "vllm"]


def test_a_prefix_as_long_as_the_prompt_is_refused_beside_its_field():
    spec, errors = check_grid_form(form(workload="synthetic", workload_options={
        "synthetic.input_tokens_mean": 128, "synthetic.shared_prefix_tokens": 128}))
    assert spec is None
    assert "shared_prefix_tokens must be smaller" in errors["synthetic"]
