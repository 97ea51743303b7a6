"""The backend registry: one module per inference backend kind, looked up by name.

A backend declares, in one class (see :class:`Backend`): its options model (the spec's
section of the same name) and the options a person sets (:class:`~lab.user_input.fields.OptionField`:
the New experiment form shows them, the CLI's ``--set`` help names them), how the lab launches it
(argv, environment, readiness), the names of its Prometheus samples for the lab's figures, how its
caches reset, how to ask for a fixed output length, its start hint and the packages a run records. Nothing
outside this package names a backend kind. ``<kind>+cache`` puts the response cache in
front of any kind: a composition, not a kind of its own.

Register a kind with the decorator (GuideLLM's shape)::

    @register
    class MyBackend(Backend):
        name = "mine"
        ...
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar

import httpx
from pydantic import BaseModel

from lab.user_input.fields import OptionField, declared_fields
from services.catalog import ServiceConfig, command_config

if TYPE_CHECKING:
    from lab.settings import Settings

CACHE_SUFFIX = "+cache"


class SeedSetup(Enum):
    """The seed's three set-ups (its tables are transcribed in lab/analysis/seed.py), by the seed's own
    names. A kind says which one it reproduces (``seed_setup``; behind the response cache,
    ``seed_cached_setup``), so the seed's tables map onto our runs without naming a kind."""

    NAIVE = "naive"  # Transformers + FastAPI, one request at a time
    VLLM = "vllm"
    VLLM_CACHE = "vllm+cache"  # vLLM behind the Redis response cache


class UnknownBackendError(ValueError):
    """A backend name no module registered."""


@dataclass(frozen=True)
class MetricNames:
    """The backend's Prometheus sample names (summed over labels) for each figure the lab
    reads; None where the backend does not export it (the figure then stays unknown)."""

    prefixes: tuple[str, ...] = ()  # samples kept from /metrics
    ttft_sum: str | None = None
    ttft_count: str | None = None
    time_per_output_token_sum: str | None = None
    time_per_output_token_count: str | None = None
    inter_token_latency_sum: str | None = None
    inter_token_latency_count: str | None = None
    prefix_cache_hits: str | None = None
    prefix_cache_queries: str | None = None
    running_requests: str | None = None
    waiting_requests: str | None = None
    requests_ok: str | None = None
    e2e_requests: str | None = None
    output_tokens: str | None = None
    prompt_tokens: str | None = None


# vLLM's names: vLLM exports them, the naive server exports them where the meaning is the
# same, and most OpenAI-compatible servers of that family do too.
VLLM_METRICS = MetricNames(
    prefixes=("vllm:",),
    ttft_sum="vllm:time_to_first_token_seconds_sum",
    ttft_count="vllm:time_to_first_token_seconds_count",
    time_per_output_token_sum="vllm:request_time_per_output_token_seconds_sum",
    time_per_output_token_count="vllm:request_time_per_output_token_seconds_count",
    inter_token_latency_sum="vllm:inter_token_latency_seconds_sum",
    inter_token_latency_count="vllm:inter_token_latency_seconds_count",
    prefix_cache_hits="vllm:prefix_cache_hits_total",
    prefix_cache_queries="vllm:prefix_cache_queries_total",
    running_requests="vllm:num_requests_running",
    waiting_requests="vllm:num_requests_waiting",
    requests_ok="vllm:request_success_total",
    e2e_requests="vllm:e2e_request_latency_seconds_count",
    output_tokens="vllm:generation_tokens_total",
    prompt_tokens="vllm:prompt_tokens_total",
)


@dataclass(frozen=True)
class Launch:
    """How to start a backend's server: argv (``{host}``/``{port}`` filled in), environment,
    the path that answers 200 once it is ready, and how long to wait for that."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    health_path: str = "/health"
    readiness_timeout_s: float = 180.0


class Backend:
    """One inference backend kind. Subclass, set the class attributes, register."""

    name: ClassVar[str]
    label: ClassVar[str] = ""  # for people: "vLLM", "llama.cpp"
    options_model: ClassVar[type[BaseModel] | None] = None
    # What a person sets, paths under the kind's section (``vllm.dtype``): the form's fields
    # and the --set help. () with an options model: every field of the model.
    option_fields: ClassVar[tuple[OptionField, ...]] = ()
    metrics: ClassVar[MetricNames] = MetricNames()
    start_hint: ClassVar[str] = ""
    packages: ClassVar[tuple[str, ...]] = ()
    # False: the lab does not start it; runs name its URL (``target_url``).
    managed: ClassVar[bool] = True
    readiness_timeout_s: ClassVar[float] = 180.0
    # The seed's set-up this kind reproduces, alone and behind the response cache (None: none).
    seed_setup: ClassVar[SeedSetup | None] = None
    seed_cached_setup: ClassVar[SeedSetup | None] = None
    # What "best" became, read back from a launch: a setting's name -> the launch argument that
    # carries it (``--dtype``) or, as ``env:NAME``, the environment variable.
    settings_from_launch: ClassVar[tuple[tuple[str, str], ...]] = ()

    def launch(self, *, model: str, options: Any, settings: Settings) -> Launch:
        """The server's launch description for ``model`` (already validated) and ``options``."""
        raise NotImplementedError(f"the {self.name} backend is not started by the lab")

    def service_config(self, *, model: str, options: Any, settings: Settings) -> ServiceConfig:
        """What the service manager runs (a generic command service); ValueError with a clear
        message for a rejected or missing model."""
        from lab.user_input.validation import validate_model_name

        launch = self.launch(model=validate_model_name(model), options=options, settings=settings)
        timeout_s = settings.readiness_timeout_s.get(self.name, launch.readiness_timeout_s)
        return command_config(
            backend=self.name,
            argv=launch.argv,
            env=launch.env,
            health_path=launch.health_path,
            readiness_timeout_s=timeout_s,
        )

    def resolved_settings(self, argv: list[str], env: dict[str, str]) -> dict[str, str]:
        """The settings a launch (``argv`` and ``env`` as recorded in the run's environment)
        resolved to, by :attr:`settings_from_launch`; a flag given twice counts its last value,
        as the servers' own parsers do, and a setting the launch leaves to the server is absent."""
        found: dict[str, str] = {}
        for name, source in self.settings_from_launch:
            if source.startswith("env:"):
                if (value := env.get(source.removeprefix("env:"))) is not None:
                    found[name] = str(value)
                continue
            for index, arg in enumerate(argv):
                if arg == source and index + 1 < len(argv):
                    found[name] = str(argv[index + 1])
                elif str(arg).startswith(source + "="):
                    found[name] = str(arg).split("=", 1)[1]
        return found

    def reset_caches(self, base_url: str) -> str | None:
        """Empty the server's own caches so a run starts cold; returns a warning or None.
        Nothing to do by default."""
        return None

    def fixed_output_fields(self, max_tokens: int) -> dict[str, Any]:
        """Request fields that make the answer exactly ``max_tokens`` long. The OpenAI
        default: ``min_tokens`` with ``max_tokens`` (vLLM overrides with ``ignore_eos``)."""
        return {"max_tokens": max_tokens, "min_tokens": max_tokens}

    def form_fields(self) -> tuple[OptionField, ...]:
        """The options the form shows and ``--set`` names for this kind."""
        return declared_fields(self.option_fields, self.options_model, self.name)

    def default_options(self) -> BaseModel | None:
        return self.options_model() if self.options_model is not None else None


BACKENDS: dict[str, Backend] = {}


def register(cls: type[Backend]) -> type[Backend]:
    """Class decorator: add a backend kind to the registry (its ``name`` must be new)."""
    name = cls.name
    if not name or CACHE_SUFFIX in name or name in BACKENDS:
        raise ValueError(f"cannot register backend {name!r}: empty, contains {CACHE_SUFFIX!r} or taken")
    BACKENDS[name] = cls()
    return cls


def unregister(name: str) -> None:
    """Remove a kind (tests that register a throwaway one clean up with this)."""
    BACKENDS.pop(name, None)


def get_backend(name: str) -> Backend:
    """The backend registered as ``name`` (``+cache`` stripped); UnknownBackendError if none."""
    base = name.removesuffix(CACHE_SUFFIX)
    try:
        return BACKENDS[base]
    except KeyError:
        raise UnknownBackendError(f"unknown backend {name!r}; backends: {', '.join(spec_backend_names())}") from None


def backend_names() -> list[str]:
    """The registered kinds, in registration order."""
    return list(BACKENDS)


def managed_backend_names() -> list[str]:
    """The kinds the lab starts itself (services it can bring up)."""
    return [name for name, backend in BACKENDS.items() if backend.managed]


def spec_backend_names() -> list[str]:
    """Every value a spec's ``backend`` may take: each kind, then each kind behind the cache."""
    return [*BACKENDS, *(f"{name}{CACHE_SUFFIX}" for name in BACKENDS)]


def behind_cache(name: str) -> bool:
    """Whether a spec backend is a kind behind the response cache (``<kind>+cache``)."""
    return name.endswith(CACHE_SUFFIX)


def seed_setup_of(name: str | None) -> SeedSetup | None:
    """The seed's set-up that spec backend ``name`` reproduces; None for one the seed did not run."""
    kind = BACKENDS.get(name.removesuffix(CACHE_SUFFIX)) if name else None
    if name is None or kind is None:
        return None
    return kind.seed_cached_setup if behind_cache(name) else kind.seed_setup


def seed_setup_backend(setup: SeedSetup) -> str:
    """The spec backend that reproduces the seed's ``setup`` (a kind, or a kind behind the cache)."""
    for name, kind in BACKENDS.items():
        if kind.seed_setup is setup:
            return name
        if kind.seed_cached_setup is setup:
            return f"{name}{CACHE_SUFFIX}"
    raise LookupError(f"no registered backend reproduces the seed's {setup.value!r} set-up")


def options_sections() -> dict[str, type[BaseModel]]:
    """Spec option sections: ``{kind: options model}`` for the kinds that have options."""
    return {name: backend.options_model for name, backend in BACKENDS.items() if backend.options_model is not None}


def default_service_config(name: str, *, model: str, settings: Settings) -> ServiceConfig:
    """The service of backend ``name`` for ``model`` with the kind's default options."""
    backend = get_backend(name)
    return backend.service_config(model=model, options=backend.default_options(), settings=settings)


def post_reset(url: str) -> str | None:
    """POST ``url`` with no body; a warning on failure (a warm cache skews, it does not break, a run)."""
    try:
        response = httpx.post(url, timeout=30)
    except httpx.HTTPError as error:
        return f"could not reset the cache at {url}: {error}"
    if response.status_code >= 400:
        return f"could not reset the cache at {url}: HTTP {response.status_code}"
    return None


# The built-in kinds register themselves on import; their order is the order of the form.
# isort: off
# Registration order is the order the form and the CLI list the kinds in.
from lab.backends import naive, vllm, llamacpp, external  # noqa: E402, F401 - registers the kinds
# isort: on
