"""Run and experiment specifications (pydantic) and the seed presets.

A :class:`RunSpec` says everything needed to execute and replay one run: backend,
model, workload, load, sampling and seed. An :class:`ExperimentSpec` is a named grid
over a base run spec (for example backend x VUs) with repeats; ``expand`` turns it into
the list of runs the queue receives. Presets live as JSON in ``lab/specs/presets/``.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from lab import backends, workloads
from lab.settings import get_settings
from lab.specs.cache_spec import CacheSpec as CacheSpec  # re-exported: the spec sections are imported from here
from lab.user_input.base import StrictModel

PRESETS_DIR = Path(__file__).resolve().parent / "presets"

# Every backend value a spec may take, from the registry (each kind, then each behind the
# response cache). Computed at import for the pages' choices; validation asks the registry.
BACKENDS: tuple[str, ...] = tuple(backends.spec_backend_names())
LoadKind = Literal["constant-vus", "ramping-vus", "constant-arrival-rate"]

MAX_VUS = 1024
MAX_DURATION_S = 6 * 3600
MAX_TOKENS_LIMIT = 32_768


WORKER_LABEL_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def check_worker_label(value: str) -> str:
    """A worker name or label: letters, digits, dot, dash, underscore (what a host name uses)."""
    value = value.strip()
    if not WORKER_LABEL_PATTERN.fullmatch(value):
        raise ValueError(f"{value!r} is not a worker name or label: use letters, digits, '.', '-', '_'")
    return value


class SpecError(ValueError):
    """A spec value is invalid; the message names the field and says what is allowed."""


def _validate_sections(model: BaseModel, sections: dict[str, type[BaseModel]], what: str) -> None:
    """Validate a model's extra keys as the registry's option sections (``{key: model}``)
    and add the missing ones with their defaults; any other extra key is an error."""
    extra = model.__pydantic_extra__ if model.__pydantic_extra__ is not None else {}
    for key, value in list(extra.items()):
        if key not in sections:
            raise ValueError(f"unknown setting {key!r} (option sections of {what}: {', '.join(sections) or 'none'})")
        if not isinstance(value, sections[key]):
            extra[key] = sections[key].model_validate(value if value is not None else {})
    for key, options_model in sections.items():
        extra.setdefault(key, options_model())


class Stage(StrictModel):
    """One ramping stage: reach ``target_vus`` over ``duration_s``."""

    duration_s: float = Field(gt=0, le=MAX_DURATION_S)
    target_vus: int = Field(ge=0, le=MAX_VUS)


class LoadSpec(StrictModel):
    """How k6 applies load: closed model (VUs) or open model (arrival rate)."""

    kind: LoadKind = "constant-vus"
    vus: int = Field(default=1, ge=1, le=MAX_VUS, description="virtual users (constant-vus)")
    duration_s: float = Field(default=60, ge=1, le=MAX_DURATION_S)
    stages: list[Stage] = Field(default_factory=list, description="ramping-vus stages")
    rate_per_s: float | None = Field(default=None, gt=0, le=100_000, description="iterations started per second")
    max_vus: int = Field(default=64, ge=1, le=MAX_VUS, description="VU cap for constant-arrival-rate")
    graceful_stop_s: float = Field(default=30, ge=0, le=3600, description="wait for in-flight requests at the end")

    @model_validator(mode="after")
    def _check_kind_fields(self) -> LoadSpec:
        if self.kind == "ramping-vus" and not self.stages:
            raise ValueError("ramping-vus needs at least one stage")
        if self.kind == "constant-arrival-rate" and self.rate_per_s is None:
            raise ValueError("constant-arrival-rate needs rate_per_s")
        return self

    @property
    def planned_duration_s(self) -> float:
        """Seconds of load, not counting the graceful stop."""
        if self.kind == "ramping-vus":
            return float(sum(stage.duration_s for stage in self.stages))
        return float(self.duration_s)

    @property
    def peak_vus(self) -> int:
        if self.kind == "ramping-vus":
            return max(stage.target_vus for stage in self.stages)
        if self.kind == "constant-arrival-rate":
            return self.max_vus
        return self.vus


class WorkloadSpec(BaseModel):
    """What each request carries. The fields below are those of the first workloads (kept
    flat so stored specs load); newer workloads add an option section of their own
    (``workload.synthetic``), declared in their module under ``lab/workloads``."""

    # Extra keys are allowed only as the registry's option sections (checked below).
    model_config = ConfigDict(extra="allow", validate_assignment=True)

    kind: str = "number-story"
    prompts: int = Field(default=50, ge=1, le=10_000_000, description="number-story: distinct numbers")
    sessions: int = Field(default=1000, ge=1, le=100_000, description="sharegpt-chat: sessions to replay")
    max_turns: int = Field(default=5, ge=1, le=50, description="sharegpt-chat: user turns per session at most")
    max_session_chars: int = Field(
        default=6000, ge=100, le=1_000_000, description="sharegpt-chat: skip sessions longer than this"
    )
    system_prompt: str | None = Field(default="You are a helpful assistant.", max_length=20_000)
    dataset_path: str | None = Field(default=None, description="uploaded ShareGPT file; the package's by default")
    requests_path: str | None = Field(default=None, description="custom: JSONL of chat requests")
    stream: bool = Field(default=False, description="ask for streamed answers (client TTFT and TPOT per request)")

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, value: str) -> str:
        workloads.get_workload(value)  # raises with the list of workloads
        return value

    @model_validator(mode="after")
    def _check_workload(self) -> WorkloadSpec:
        _validate_sections(self, workloads.options_sections(), "the workload")
        workloads.get_workload(self.kind).check(self)
        return self

    def options(self, kind: str | None = None) -> Any:
        """The option section of workload ``kind`` (this spec's by default); None if it has none."""
        section = workloads.get_workload(kind or self.kind).section
        return (self.__pydantic_extra__ or {}).get(section) if section else None


class RunSpec(BaseModel):
    """Everything one run needs; stored with the run so it can be replayed exactly.

    Each backend kind with options has a section named after it (``vllm``, ``naive``,
    ``llamacpp``), declared by its module under ``lab/backends``."""

    # Extra keys are allowed only as the registry's option sections (checked below).
    model_config = ConfigDict(extra="allow", validate_assignment=True)

    backend: str = "vllm"
    target_url: str | None = Field(default=None, description="external backends: base URL of the server")
    model: str = Field(default_factory=lambda: get_settings().default_model)
    served_model_name: str | None = None
    workload: WorkloadSpec = Field(default_factory=WorkloadSpec)
    load: LoadSpec = Field(default_factory=LoadSpec)
    max_tokens: int = Field(default=128, ge=1, le=MAX_TOKENS_LIMIT)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    warmup_requests: int = Field(default=2, ge=0, le=1000)
    keep_caches_warm: bool = Field(default=False, description="skip flushing the response and prefix caches")
    random_seed: int = Field(default=1234, ge=0, le=2**31 - 1)
    cache: CacheSpec = Field(default_factory=CacheSpec)
    # Placement on a shared queue: only a worker with every label (and, if set, this name) claims it.
    requires: list[str] = Field(default_factory=list, max_length=20, description="worker labels the run needs")
    worker: str | None = Field(default=None, max_length=100, description="pin the run to this worker name")

    @field_validator("requires")
    @classmethod
    def _valid_labels(cls, value: list[str]) -> list[str]:
        return sorted({check_worker_label(label) for label in value})

    @field_validator("worker")
    @classmethod
    def _valid_worker_name(cls, value: str | None) -> str | None:
        return None if value is None or not value.strip() else check_worker_label(value)

    @field_validator("model")
    @classmethod
    def _valid_model(cls, value: str) -> str:
        from lab.user_input.validation import validate_model_name

        return validate_model_name(value)

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, value: str) -> str:
        backends.get_backend(value)  # raises with the list of backends
        return value

    @model_validator(mode="after")
    def _check_target(self) -> RunSpec:
        _validate_sections(self, backends.options_sections(), "a run")
        if not self.backend_kind.managed:
            if not self.target_url:
                raise ValueError(f"{self.base_backend} backends need target_url (the server's base URL)")
            from lab.user_input.validation import validate_target_url

            self.__dict__["target_url"] = validate_target_url(
                self.target_url, allowed_hosts=get_settings().allowed_target_hosts
            )
        if self.uses_cache and self.cache.fill_first_up_to:
            from lab.workloads import get_workload

            if get_workload(self.workload.kind).distinct_requests(self) is None:
                raise ValueError(
                    f"cache.fill_first_up_to needs a workload with a known set of distinct requests; "
                    f"{self.workload.kind} has none"
                )
        return self

    @property
    def fills_cache_first(self) -> bool:
        """Whether the runner fills the response cache before the measured load."""
        from lab.workloads import get_workload

        return self.uses_cache and self.cache.fills_first(get_workload(self.workload.kind).distinct_requests(self))

    @property
    def uses_cache(self) -> bool:
        return self.backend.endswith(backends.CACHE_SUFFIX)

    @property
    def base_backend(self) -> str:
        """The server behind any cache: a registered kind."""
        return self.backend.removesuffix(backends.CACHE_SUFFIX)

    @property
    def backend_kind(self) -> backends.Backend:
        """The registry entry of the server behind any cache."""
        return backends.get_backend(self.backend)

    def backend_options(self) -> Any:
        """The option section of this run's backend (None if the kind has no options)."""
        return (self.__pydantic_extra__ or {}).get(self.base_backend)


# The scales, named once: the seed's (its 60 s cells), adapted (the seed's, with the cells it
# cannot measure here lengthened, lab/analysis/measurability.py) and quick (the preset's quick
# section). "full", the seed scale's old name, is read as "seed".
SCALES = ("seed", "adapted", "quick")


class UntilDecided(StrictModel):
    """Rounds added after the planned ones until every compared figure is decided or the budget is spent."""

    budget_s: float = Field(gt=0, le=7 * 24 * 3600)
    precision: float = Field(default=0.10, gt=0, lt=1)
    max_rounds: int = Field(default=20, ge=2, le=20)


class CellScale(StrictModel):
    """A cell the adapted scale runs longer than the experiment's own duration, and why."""

    duration_s: float = Field(gt=0)
    why: str = ""
    over_cap: str = ""  # what no cell under the cap could measure (the report's "not measurable here" says so)


class ExperimentSpec(StrictModel):
    """A named grid of runs: ``grid`` maps dotted RunSpec fields to the values to try."""

    name: str = Field(min_length=1, max_length=200)
    preset: str | None = None
    description: str = ""
    base: RunSpec = Field(default_factory=RunSpec)
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    repeats: int = Field(default=1, ge=1, le=100)
    # With repeats, the runs go in rounds (each round every cell once, in an order drawn from
    # ``order_seed``, recorded when queued) so a drift of the machine hits every cell alike;
    # "blocks" runs each cell's repeats together (see lab/queue/round_order.py).
    order: Literal["interleaved", "blocks"] = "interleaved"
    order_seed: int | None = Field(default=None, ge=0, lt=2**31)
    scale: Literal["seed", "adapted", "quick"] = "seed"
    scale_note: str = ""
    # The adapted scale's cells (by label) that run longer than ``base.load.duration_s``.
    cell_scales: dict[str, CellScale] = Field(default_factory=dict)
    until_decided: UntilDecided | None = None

    @field_validator("scale", mode="before")
    @classmethod
    def _old_scale_name(cls, value: Any) -> Any:
        return "seed" if value == "full" else value

    @model_validator(mode="after")
    def _grid_is_valid(self) -> ExperimentSpec:
        for path, values in self.grid.items():
            if not values:
                raise ValueError(f"grid axis {path!r} has no values")
        # Counted before any cell is built: one launch must not queue (or validate) without bound.
        cells = math.prod(len(values) for values in self.grid.values())
        limit = get_settings().max_runs_per_launch
        if cells * self.repeats > limit:
            raise ValueError(
                f"this experiment would queue {cells * self.repeats:,} runs ({cells:,} cells x "
                f"{self.repeats} repeats); one launch may queue at most {limit:,} "
                "(setting LAB_MAX_RUNS_PER_LAUNCH)"
            )
        self.expand()  # every cell must be a valid RunSpec
        return self

    def expand(self) -> list[tuple[str, int, RunSpec]]:
        """Every (cell label, repeat index, run spec) of the grid, repeats innermost."""
        axes = list(self.grid.items())
        cells: list[tuple[str, int, RunSpec]] = []
        base = self.base.model_dump()
        for combination in itertools.product(*(values for _, values in axes)) if axes else [()]:
            data = copy.deepcopy(base)
            label_parts = []
            for (path, _), value in zip(axes, combination, strict=True):
                set_dotted(data, path, value)
                label_parts.append(_axis_label(path, value))
            label = " ".join(label_parts) or "run"
            if label in self.cell_scales:
                data["load"]["duration_s"] = self.cell_scales[label].duration_s
            try:
                spec = RunSpec.model_validate(data)
            except ValidationError as error:
                raise ValueError(f"cell {label}: {format_validation_error(error)}") from error
            for repeat in range(self.repeats):
                cells.append((label, repeat, spec))
        return cells

    def distinct_cells(self) -> list[tuple[str, RunSpec]]:
        """Every (cell label, run spec) of the grid once, in grid order."""
        return [(label, spec) for label, repeat, spec in self.expand() if repeat == 0]


def _axis_label(path: str, value: Any) -> str:
    """A grid value in a cell's label: ``vus=4``; a whole section as one value
    (``"cache": [{"tier": "semantic", "similarity": 0.9}]``) by its settings, nested ones flat
    (``tier=semantic similarity=0.9``)."""
    if not isinstance(value, dict):
        return f"{path.rsplit('.', 1)[-1]}={value}"
    return " ".join(_axis_label(key, item) for key, item in value.items())


def set_dotted(data: dict[str, Any], path: str, value: Any) -> None:
    """Set ``data['a']['b'] = value`` for ``path='a.b'``; unknown fields raise SpecError."""
    keys = path.split(".")
    node = data
    for key in keys[:-1]:
        if not isinstance(node.get(key), dict):
            raise SpecError(f"unknown setting {path!r}")
        node = node[key]
    if keys[-1] not in node:
        raise SpecError(f"unknown setting {path!r}")
    node[keys[-1]] = value


def format_validation_error(error: ValidationError) -> str:
    """A pydantic error as one line a user can act on: 'field: message; ...'."""
    parts = []
    for item in error.errors():
        location = ".".join(str(part) for part in item["loc"]) or "spec"
        message = item["msg"].removeprefix("Value error, ")
        parts.append(f"{location}: {message}")
    return "; ".join(parts)


def parse_set_option(option: str) -> tuple[str, Any]:
    """Parse a CLI ``--set key=value``; the value is read as JSON when it parses, else a string."""
    if "=" not in option:
        raise SpecError(f"--set needs key=value, got {option!r}")
    key, raw = option.split("=", 1)
    try:
        value: Any = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip(), value


def list_presets() -> list[str]:
    """Names of the presets shipped in ``lab/specs/presets``."""
    return sorted(path.stem for path in PRESETS_DIR.glob("*.json"))


def load_preset(name: str, *, quick: bool = False, overrides: list[tuple[str, Any]] | None = None) -> ExperimentSpec:
    """Load a preset, optionally at the quick scale, with ``key=value`` overrides applied.

    Overrides address the base run spec (``load.duration_s=20``), the grid
    (``grid.load.vus=[1,8]``) or the experiment (``repeats=3``).
    """
    path = PRESETS_DIR / f"{name}.json"
    if name not in list_presets():
        raise SpecError(f"unknown preset {name!r}; presets: {', '.join(list_presets())}")
    raw = json.loads(path.read_text())
    _resolve_preset_trace(raw)
    return experiment_from_document({**raw, "preset": name}, quick=quick, overrides=overrides)


def _resolve_preset_trace(raw: dict[str, Any]) -> None:
    """A trace a preset replays is named relative to the presets' folder (shipped beside it)."""
    trace = raw.get("base", {}).get("workload", {}).get("trace")
    if isinstance(trace, dict) and isinstance(trace.get("path"), str) and not Path(trace["path"]).is_absolute():
        trace["path"] = str(PRESETS_DIR / trace["path"])


def experiment_from_document(
    raw: dict[str, Any], *, quick: bool = False, overrides: list[tuple[str, Any]] | None = None
) -> ExperimentSpec:
    """An :class:`ExperimentSpec` from a preset's document (a preset file, or a spec file of the
    same schema: the experiment's fields plus an optional ``quick`` section), at the quick
    scale if asked, with ``key=value`` overrides applied (see :func:`load_preset`)."""
    raw = copy.deepcopy(raw)  # the caller's document is left as it was
    quick_section = raw.pop("quick", None)
    data: dict[str, Any] = {**raw, "base": raw.get("base", {})}
    if not isinstance(data["base"], dict) or not isinstance(quick_section or {}, dict):
        raise SpecError("base and quick must each be a table of settings")
    if quick and quick_section:
        for key, value in quick_section.get("set", {}).items():
            set_dotted_lenient(data["base"], key, value)
        data["grid"] = {**data.get("grid", {}), **quick_section.get("grid", {})}
        data["repeats"] = quick_section.get("repeats", data.get("repeats", 1))
        data["scale"] = "quick"
        data["scale_note"] = quick_section.get("how", "")
    return with_overrides(data, overrides or [])


def with_overrides(data: dict[str, Any], overrides: list[tuple[str, Any]]) -> ExperimentSpec:
    """An experiment (as a dict) with ``key=value`` overrides applied, validated: ``grid.*`` sets
    an axis, ``repeats``/``name``/... the experiment, a key the grid varies pins that axis to one
    value, anything else the base run spec (``load.duration_s``)."""
    data = copy.deepcopy(data)
    data.setdefault("base", {})
    for key, value in overrides:
        if key.startswith("grid."):
            data.setdefault("grid", {})[key.removeprefix("grid.")] = value if isinstance(value, list) else [value]
        elif key in ("repeats", "name", "description", "order", "order_seed"):
            data[key] = value
        elif key in data.get("grid", {}):
            # A setting the preset varies: --set pins it to one value (the axis shrinks).
            data["grid"][key] = [value]
        else:
            set_dotted_lenient(data["base"], key, value)
    try:
        return ExperimentSpec.model_validate(data)
    except ValidationError as error:
        raise SpecError(format_validation_error(error)) from error


def set_dotted_lenient(data: dict[str, Any], path: str, value: Any) -> None:
    """Like :func:`set_dotted` but creates missing sub-dicts; the model validates the result."""
    keys = path.split(".")
    node = data
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise SpecError(f"unknown setting {path!r}")
    node[keys[-1]] = value
