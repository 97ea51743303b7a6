"""The New experiment grid form: what it collects and its field-by-field check into an
:class:`~lab.specs.schema.ExperimentSpec` (messages keyed by field, shown beside each field)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from lab.specs.schema import (
    MAX_VUS,
    CacheSpec,
    ExperimentSpec,
    LoadSpec,
    RunSpec,
    WorkloadSpec,
    format_validation_error,
)
from lab.backends import get_backend
from lab.specs.validation import ModelNameError, check_model_on_machine
from lab.workloads.synthetic import SyntheticOptions

@dataclass
class GridForm:
    """What the New experiment grid form collects (raw text where the user types lists)."""

    name: str = "my experiment"
    backends: list[str] = field(default_factory=lambda: ["naive"])
    model: str = ""
    target_url: str = ""
    workload: str = "number-story"
    prompts: int = 50
    sessions: int = 100
    dataset_path: str | None = None
    requests_path: str | None = None
    # The synthetic workload (workload.synthetic): prompt length in tokens and a shared prefix.
    synthetic_prompts: int = 100
    input_tokens_mean: int = 512
    input_tokens_spread: int = 0
    shared_prefix_tokens: int = 0
    fixed_output: bool = True
    load_kind: str = "constant-vus"
    vus_text: str = "1"
    rates_text: str = "1"
    duration_s: float = 20.0
    graceful_stop_s: float = 30.0
    max_tokens: int = 128
    stream: bool = False
    repeats: int = 1
    cache_policy: str = "all"


def parse_number_list(text: str, *, integers: bool) -> list[float] | list[int]:
    """``"1, 8 32"`` -> ``[1, 8, 32]``; raises ValueError with a message for the user."""
    parts = [part for part in text.replace(",", " ").split() if part]
    if not parts:
        raise ValueError("enter at least one value, e.g. 1, 8, 32")
    values: list[Any] = []
    for part in parts:
        try:
            number = float(part)
        except ValueError:
            raise ValueError(f"{part!r} is not a number") from None
        if integers:
            if not number.is_integer():
                raise ValueError(f"{part!r} is not a whole number")
            number = int(number)
        values.append(number)
    return list(dict.fromkeys(values))  # keep order, drop repeats


def _field_error(schema: type[BaseModel], /, **values: Any) -> str | None:
    """The validation message for ``values`` of ``schema`` (only those fields), or None."""
    try:
        schema.model_validate(values)
    except ValidationError as error:
        relevant = [item for item in error.errors() if item["loc"] and item["loc"][0] in values]
        if not relevant:
            return None
        return "; ".join(item["msg"].removeprefix("Value error, ") for item in relevant)
    return None


def is_external(backend: str) -> bool:
    """A backend the lab does not start (a server given by URL), with or without the cache."""
    try:
        return not get_backend(backend).managed
    except ValueError:
        return False


def check_grid_form(form: GridForm) -> tuple[ExperimentSpec | None, dict[str, str]]:
    """Validate the grid form field by field and build its ExperimentSpec.

    Returns ``(spec, {})`` when valid, else ``(None, {field: message})`` where field is
    a GridForm attribute name, so each message can be shown beside its field.
    """
    errors: dict[str, str] = {}
    if not form.name.strip():
        errors["name"] = "give the experiment a name"
    if not form.backends:
        errors["backends"] = "choose at least one backend"
    if any(is_external(backend) for backend in form.backends) and not form.target_url.strip():
        errors["target_url"] = "external backends need the server's base URL, e.g. http://127.0.0.1:8000"
    if form.model.strip():
        message = _field_error(RunSpec, model=form.model.strip())
        if message:
            errors["model"] = message
        elif not all(is_external(backend) for backend in form.backends):
            try:  # the lab's own servers load it: it must be on this machine when offline
                check_model_on_machine(form.model.strip())
            except ModelNameError as error:
                errors["model"] = str(error)
    else:
        errors["model"] = "enter a model folder or Hugging Face id"

    grid_values: dict[str, list[Any]] = {}
    if form.load_kind == "constant-arrival-rate":
        try:
            rates = parse_number_list(form.rates_text, integers=False)
            bad = [rate for rate in rates if _field_error(LoadSpec, kind="constant-arrival-rate", rate_per_s=rate)]
            if bad:
                errors["rates_text"] = f"arrival rates must be above 0 and at most 100,000 per second (got {bad[0]:g})"
            grid_values["load.rate_per_s"] = rates
        except ValueError as error:
            errors["rates_text"] = str(error)
    else:
        try:
            vus = parse_number_list(form.vus_text, integers=True)
            bad = [value for value in vus if _field_error(LoadSpec, vus=value)]
            if bad:
                errors["vus_text"] = f"VUs must be whole numbers from 1 to {MAX_VUS} (got {bad[0]})"
            grid_values["load.vus"] = vus
        except ValueError as error:
            errors["vus_text"] = str(error)

    message = _field_error(LoadSpec, duration_s=form.duration_s)
    if message:
        errors["duration_s"] = f"duration: {message}"
    message = _field_error(LoadSpec, graceful_stop_s=form.graceful_stop_s)
    if message:
        errors["graceful_stop_s"] = f"graceful stop: {message}"
    message = _field_error(RunSpec, max_tokens=form.max_tokens)
    if message:
        errors["max_tokens"] = f"max tokens: {message}"
    message = _field_error(ExperimentSpec, repeats=form.repeats)
    if message:
        errors["repeats"] = f"repeats: {message}"
    if form.workload == "number-story":
        message = _field_error(WorkloadSpec, prompts=form.prompts)
        if message:
            errors["prompts"] = f"prompts: {message}"
    if form.workload == "sharegpt-chat":
        message = _field_error(WorkloadSpec, sessions=form.sessions)
        if message:
            errors["sessions"] = f"sessions: {message}"
    if form.workload == "synthetic":
        try:
            SyntheticOptions.model_validate(synthetic_section(form))
        except ValidationError as error:
            errors["synthetic"] = f"synthetic prompts: {format_validation_error(error)}"
    if form.workload == "custom" and not form.requests_path:
        errors["requests_path"] = "the custom workload needs a JSONL file of requests: upload one below"
    message = _field_error(CacheSpec, policy=form.cache_policy)
    if message:
        errors["cache_policy"] = message
    if errors:
        return None, errors

    workload: dict[str, Any] = {"kind": form.workload, "stream": form.stream}
    if form.workload == "number-story":
        workload["prompts"] = form.prompts
    elif form.workload == "sharegpt-chat":
        workload["sessions"] = form.sessions
        if form.dataset_path:
            workload["dataset_path"] = form.dataset_path
    elif form.workload == "synthetic":
        workload["synthetic"] = synthetic_section(form)
    else:
        workload["requests_path"] = form.requests_path
    load: dict[str, Any] = {"kind": form.load_kind, "duration_s": form.duration_s,
                            "graceful_stop_s": form.graceful_stop_s}
    if form.load_kind == "constant-arrival-rate":
        load["rate_per_s"] = grid_values["load.rate_per_s"][0]
    base: dict[str, Any] = {
        "backend": form.backends[0],
        "model": form.model.strip(),
        "workload": workload,
        "load": load,
        "max_tokens": form.max_tokens,
        "cache": {"policy": form.cache_policy},
    }
    if form.target_url.strip():
        base["target_url"] = form.target_url.strip()
    grid: dict[str, list[Any]] = {}
    if len(form.backends) > 1:
        grid["backend"] = list(form.backends)
    for path, values in grid_values.items():
        if len(values) > 1:
            grid[path] = values
        elif path == "load.vus":
            base["load"]["vus"] = values[0]
    try:
        spec = ExperimentSpec.model_validate(
            {"name": form.name.strip(), "base": base, "grid": grid, "repeats": form.repeats}
        )
    except ValidationError as error:
        return None, {"form": format_validation_error(error)}
    except ValueError as error:  # a grid cell that is invalid as a whole
        return None, {"form": str(error)}
    return spec, {}


def synthetic_section(form: GridForm) -> dict[str, Any]:
    """The ``workload.synthetic`` section the form's synthetic fields describe."""
    return {
        "prompts": form.synthetic_prompts,
        "input_tokens_mean": form.input_tokens_mean,
        "input_tokens_spread": form.input_tokens_spread,
        "shared_prefix_tokens": form.shared_prefix_tokens,
        "fixed_output": form.fixed_output,
    }
