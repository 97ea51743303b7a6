"""The backend and workload registries: lookups, derived lists, spec sections, launch
descriptions, metric maps and the synthetic workload's prompts."""

from __future__ import annotations

import re
import statistics
from pathlib import Path

import httpx
import pytest

from lab import backends, workloads
from lab.backends import Backend, MetricNames, UnknownBackendError, get_backend, register, unregister
from lab.measurement import environment
from lab.settings import Settings
from lab.specs.schema import RunSpec, SpecError, WorkloadSpec, load_preset

PROJECT_ROOT = Path(__file__).resolve().parents[3]


def test_spec_backends_are_the_kinds_and_each_kind_behind_the_cache() -> None:
    names = backends.spec_backend_names()
    assert {"naive", "vllm", "llamacpp", "external"} <= set(backends.backend_names())
    assert names == [*backends.backend_names(), *(f"{kind}+cache" for kind in backends.backend_names())]
    assert backends.managed_backend_names() == [k for k in backends.backend_names() if k != "external"]


def test_an_unknown_kind_is_an_error_never_a_silent_vllm() -> None:
    with pytest.raises(UnknownBackendError, match="unknown backend 'tgi'; backends: naive, vllm"):
        get_backend("tgi")
    with pytest.raises(ValueError, match="unknown backend 'tgi'"):
        RunSpec(backend="tgi")
    with pytest.raises(ValueError, match="unknown workload 'poems'; workloads: number-story"):
        WorkloadSpec(kind="poems")
    assert get_backend("llamacpp+cache") is get_backend("llamacpp")


def test_a_name_can_be_registered_once() -> None:
    with pytest.raises(ValueError, match="taken"):
        register(type("Again", (Backend,), {"name": "vllm"}))
    with pytest.raises(ValueError, match="contains"):
        register(type("Cached", (Backend,), {"name": "x+cache"}))


def test_spec_sections_come_from_the_registry_and_stored_specs_still_load() -> None:
    spec = RunSpec.model_validate({"backend": "llamacpp", "llamacpp": {"n_threads": 2}})
    assert spec.backend_options().n_threads == 2
    assert spec.vllm.prefix_caching and spec.naive.dtype == "bfloat16"  # type: ignore[attr-defined]  # backend sections are fields the registry adds at import
    dumped = spec.model_dump()
    assert {"naive", "vllm", "llamacpp"} <= set(dumped)
    assert RunSpec.model_validate(dumped) == spec
    # A spec stored before llama.cpp existed (no llamacpp section) loads with the defaults.
    old = {key: value for key, value in dumped.items() if key != "llamacpp"} | {"backend": "vllm"}
    assert RunSpec.model_validate(old).llamacpp.n_ctx == 4096  # type: ignore[attr-defined]  # backend sections are fields the registry adds at import
    with pytest.raises(ValueError, match="unknown setting 'vlm'"):
        RunSpec.model_validate({"vlm": {}})
    with pytest.raises(ValueError, match="n_threads"):
        RunSpec.model_validate({"llamacpp": {"n_threads": 0}})
    assert RunSpec(backend="external", target_url="http://127.0.0.1:9").backend_options() is None


def test_presets_and_overrides_reach_new_sections() -> None:
    spec = load_preset("seed-exp1", quick=True, overrides=[("llamacpp.n_ctx", 2048), ("backend", "llamacpp")])
    assert {cell.backend for _, _, cell in spec.expand()} == {"llamacpp"}
    assert all(cell.llamacpp.n_ctx == 2048 for _, _, cell in spec.expand())  # type: ignore[attr-defined]  # backend sections are fields the registry adds at import
    with pytest.raises(SpecError, match="unknown backend"):
        load_preset("seed-exp1", overrides=[("backend", "nope")])
    engines = load_preset("engines-cpu", quick=True)
    assert {(c.backend, c.load.vus) for _, _, c in engines.expand()} == {
        (b, v) for b in ("naive", "vllm", "llamacpp") for v in (1, 8)
    }


@pytest.mark.parametrize("kind", ["naive", "vllm", "llamacpp"])
def test_each_managed_kind_launches_on_loopback_placeholders(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real_find_spec = importlib.util.find_spec
    # The launch description does not need llama-cpp-python itself, only its presence.
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "llama_cpp" else real_find_spec(name, *a)
    )
    backend = get_backend(kind)
    launch = backend.launch(model=str(PROJECT_ROOT / "models"), options=backend.default_options(), settings=Settings())
    argv = launch.argv
    assert argv[argv.index("--host") + 1] == "{host}" and argv[argv.index("--port") + 1] == "{port}"
    assert launch.readiness_timeout_s > 0 and launch.health_path.startswith("/")


def test_settings_override_a_kinds_readiness_timeout() -> None:
    settings = Settings(readiness_timeout_s={"naive": 12.5})
    config = backends.default_service_config("naive", model=str(PROJECT_ROOT / "models"), settings=settings)
    assert config.kind == "command" and config.params["readiness_timeout_s"] == 12.5
    assert config.params["backend"] == "naive"
    with pytest.raises(ValueError, match="model folder not found"):
        backends.default_service_config("naive", model="/no/such/model", settings=settings)


def test_llamacpp_serves_the_wheels_gguf_by_default() -> None:
    from lab.backends.llamacpp import LlamaCppOptions, shipped_gguf

    gguf = shipped_gguf()
    assert gguf.suffix == ".gguf" and gguf.is_file()
    with pytest.raises(ValueError, match=re.escape("is not a .gguf file")):
        LlamaCppOptions(gguf_path=str(PROJECT_ROOT / "README.md"))


def test_the_external_kind_is_not_started_by_the_lab() -> None:
    external = get_backend("external")
    assert not external.managed
    with pytest.raises(NotImplementedError):
        external.launch(model="m", options=None, settings=Settings())


def test_only_vllm_resets_a_cache_and_the_reset_posts(monkeypatch: pytest.MonkeyPatch) -> None:
    posted = []

    def fake_post(url: str, **_: object) -> httpx.Response:
        posted.append(url)
        return httpx.Response(200)

    monkeypatch.setattr(httpx, "post", fake_post)
    assert get_backend("vllm").reset_caches("http://127.0.0.1:1/") is None
    assert posted == ["http://127.0.0.1:1/reset_prefix_cache"]
    assert get_backend("naive").reset_caches("http://127.0.0.1:1") is None and len(posted) == 1
    monkeypatch.setattr(httpx, "post", lambda url, **_: httpx.Response(404))
    refused = get_backend("vllm").reset_caches("http://127.0.0.1:1")
    assert refused is not None and "HTTP 404" in refused


def test_fixed_output_length_is_a_backend_capability() -> None:
    assert get_backend("vllm").fixed_output_fields(64) == {"max_tokens": 64, "ignore_eos": True}
    assert get_backend("external").fixed_output_fields(64) == {"max_tokens": 64, "min_tokens": 64}


def test_metric_maps_leave_what_a_backend_lacks_unknown() -> None:
    assert get_backend("vllm").metrics.prefix_cache_hits == "vllm:prefix_cache_hits_total"
    assert get_backend("naive").metrics.prefix_cache_hits is None
    assert get_backend("naive").metrics.ttft_sum == "vllm:time_to_first_token_seconds_sum"
    assert get_backend("llamacpp").metrics == MetricNames()


def test_the_environment_records_every_backends_packages() -> None:
    names = environment.packages()
    assert {"vllm", "torch", "llama-cpp-python", "k6"} <= set(names)
    assert len(names) == len(set(names))


def test_a_registered_kind_appears_everywhere_and_goes_away() -> None:
    @register
    class Temporary(Backend):
        name = "temporary"
        start_hint = "instant"

    try:
        assert "temporary+cache" in backends.spec_backend_names()
        assert RunSpec(backend="temporary+cache").uses_cache
        assert RunSpec(backend="temporary").backend_options() is None  # no options declared
    finally:
        unregister("temporary")
    with pytest.raises(ValueError):
        RunSpec(backend="temporary")


# ------------------------------------------------------------------------------ workloads


def test_each_workload_names_its_k6_script() -> None:
    for name in workloads.workload_names():
        assert workloads.get_workload(name).script_path.is_file(), name
    assert "synthetic" in workloads.workload_names()
    with pytest.raises(ValueError, match="requests_path"):
        WorkloadSpec(kind="custom")


def synthetic_spec(**options: object) -> RunSpec:
    return RunSpec.model_validate(
        {"backend": "vllm", "max_tokens": 32, "workload": {"kind": "synthetic", "synthetic": options}}
    )


@pytest.mark.model  # counts tokens with the model's transformers tokenizer
def test_synthetic_prompts_have_the_exact_length_and_share_the_prefix() -> None:
    from lab.workloads.synthetic import load_tokenizer, synthetic_sessions, tokenizer_path

    spec = synthetic_spec(prompts=8, input_tokens_mean=512, shared_prefix_tokens=384)
    sessions, lengths = synthetic_sessions(spec, spec.workload.options(), get_backend("vllm"))
    assert lengths == [512] * 8
    tokenizer = load_tokenizer(tokenizer_path(spec, spec.workload.options()))
    token_lists = []
    for session in sessions:
        (request,) = session
        assert request["ignore_eos"] is True and request["max_tokens"] == 32
        ids = tokenizer.apply_chat_template(request["messages"], add_generation_prompt=True, tokenize=True)
        token_lists.append(list(ids["input_ids"] if hasattr(ids, "keys") else ids))
    assert all(len(ids) == 512 for ids in token_lists)
    shared = 0
    while all(ids[shared] == token_lists[0][shared] for ids in token_lists):
        shared += 1
    assert shared == 384
    again, _ = synthetic_sessions(spec, spec.workload.options(), get_backend("vllm"))
    assert again == sessions  # the seed makes the prompts
    other, _ = synthetic_sessions(
        spec.model_copy(update={"random_seed": 7}), spec.workload.options(), get_backend("vllm")
    )
    assert other != sessions


@pytest.mark.model  # counts tokens with the model's transformers tokenizer
def test_synthetic_lengths_follow_the_mean_and_spread_and_fixed_output_follows_the_backend() -> None:
    from lab.workloads.synthetic import synthetic_sessions

    spec = synthetic_spec(prompts=200, input_tokens_mean=200, input_tokens_spread=40)
    sessions, lengths = synthetic_sessions(spec, spec.workload.options(), get_backend("llamacpp"))
    assert abs(statistics.mean(lengths) - 200) < 10 and 30 < statistics.stdev(lengths) < 50
    assert sessions[0][0]["min_tokens"] == 32
    with pytest.raises(ValueError, match="shared_prefix_tokens must be smaller"):
        synthetic_spec(input_tokens_mean=100, shared_prefix_tokens=100)


@pytest.mark.model  # counts tokens with the model's transformers tokenizer
def test_synthetic_prepare_writes_the_request_file_and_warm_up_uses_it(tmp_path: Path) -> None:
    import json

    spec = synthetic_spec(prompts=3, input_tokens_mean=64)
    workload = workloads.get_workload("synthetic")
    path = workload.prepare(spec, tmp_path, get_backend("vllm"))
    assert path is not None and len(json.loads(path.read_text())) == 3
    assert json.loads((tmp_path / "synthetic.json").read_text())["prompt_tokens_mean"] == 64
    warm = workload.warmup_messages(spec, path)
    assert len(warm) == spec.warmup_requests and warm[0][-1]["role"] == "user"
