"""The New experiment grid, as the domain sees it: what the form collects
(:class:`GridForm`) and its field-by-field check into an
:class:`~lab.specs.schema.ExperimentSpec` (:func:`check_grid_form`: messages keyed by
field, so a page shows each beside its field). The page only draws widgets and fills in
a GridForm; the workload's and the backends' fields come from their registry declarations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from lab.backends import backend_names, get_backend
from lab.specs.options import backend_option_errors, backend_sections, workload_option_errors, workload_part
from lab.specs.schema import (
    MAX_VUS,
    CacheSpec,
    ExperimentSpec,
    LoadSpec,
    RunSpec,
    WorkloadSpec,
    format_validation_error,
)
from lab.user_input.validation import ModelNameError, check_model_on_machine


@dataclass
class GridForm:
    """What the New experiment grid form collects (raw text where the user types lists)."""

    name: str = "my experiment"
    # The first registered kind: the lab's own server, which needs nothing installed beyond it.
    backends: list[str] = field(default_factory=lambda: backend_names()[:1])
    # The chosen backends' declared options, by option path (``vllm.block_size``).
    backend_options: dict[str, Any] = field(default_factory=dict)
    model: str = ""
    target_url: str = ""
    workload: str = field(default_factory=lambda: WorkloadSpec.model_fields["kind"].default)
    # The workload's declared options, by option path (``prompts``, ``synthetic.prompts``).
    workload_options: dict[str, Any] = field(default_factory=dict)
    load_kind: str = "constant-vus"
    vus_text: str = "1"
    rates_text: str = "1"
    duration_s: float = 20.0
    graceful_stop_s: float = 30.0
    max_tokens: int = 128
    stream: bool = False
    repeats: int = 1
    cache_policy: str = "all"
    # The response cache's tier; with the semantic one, its thresholds (several: a grid axis) and
    # the share of semantic hits verified upstream (what gives the false-hit rate).
    cache_tier: str = field(default_factory=lambda: CacheSpec.model_fields["tier"].default)
    similarity_text: str = field(default_factory=lambda: f"{CacheSpec.model_fields['similarity'].default:g}")
    verify_fraction: float = field(default_factory=lambda: CacheSpec.model_fields["verify_fraction"].default)


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


def _target_errors(form: GridForm) -> dict[str, str]:
    """Name, backends and their options, target URL and model."""
    errors: dict[str, str] = {}
    if not form.name.strip():
        errors["name"] = "give the experiment a name"
    if not form.backends:
        errors["backends"] = "choose at least one backend"
    errors.update(backend_option_errors(form.backends, form.backend_options))
    if any(is_external(backend) for backend in form.backends) and not form.target_url.strip():
        errors["target_url"] = "external backends need the server's base URL, e.g. http://127.0.0.1:8000"
    model = form.model.strip()
    if not model:
        errors["model"] = "enter a model folder or Hugging Face id"
    elif message := _field_error(RunSpec, model=model):
        errors["model"] = message
    elif not all(is_external(backend) for backend in form.backends):
        try:  # the lab's own servers load it: it must be on this machine when offline
            check_model_on_machine(model)
        except ModelNameError as error:
            errors["model"] = str(error)
    return errors


def _load_axis(form: GridForm, errors: dict[str, str]) -> tuple[str, list[Any]]:
    """The grid's load axis (``load.vus`` or ``load.rate_per_s``) and its values; a
    message under the field's name in ``errors`` when they cannot be used."""
    if form.load_kind == "constant-arrival-rate":
        path, field_name = "load.rate_per_s", "rates_text"
    else:
        path, field_name = "load.vus", "vus_text"
    try:
        values = parse_number_list(getattr(form, field_name), integers=path == "load.vus")
    except ValueError as error:
        errors[field_name] = str(error)
        return path, []
    if path == "load.vus":
        bad = [value for value in values if _field_error(LoadSpec, vus=value)]
        if bad:
            errors[field_name] = f"VUs must be whole numbers from 1 to {MAX_VUS} (got {bad[0]})"
    else:
        bad = [rate for rate in values if _field_error(LoadSpec, kind="constant-arrival-rate", rate_per_s=rate)]
        if bad:
            errors[field_name] = f"arrival rates must be above 0 and at most 100,000 per second (got {bad[0]:g})"
    return path, values


def _similarity_axis(form: GridForm, errors: dict[str, str]) -> list[float]:
    """The semantic tier's thresholds (none for another tier); a message under the field's name
    in ``errors`` when they cannot be used."""
    if form.cache_tier != "semantic":
        return []
    try:
        values = [float(value) for value in parse_number_list(form.similarity_text, integers=False)]
    except ValueError as error:
        errors["similarity_text"] = str(error)
        return []
    bad = [value for value in values if _field_error(CacheSpec, similarity=value)]
    if bad:
        errors["similarity_text"] = f"similarity thresholds must be above 0 and at most 1 (got {bad[0]:g})"
    if message := _field_error(CacheSpec, verify_fraction=form.verify_fraction):
        errors["verify_fraction"] = f"share verified: {message}"
    return values


def _setting_errors(form: GridForm) -> dict[str, str]:
    """Duration, graceful stop, max tokens, repeats, cache policy and tier and the workload's options."""
    errors: dict[str, str] = {}
    checks = (
        ("duration_s", "duration", LoadSpec, form.duration_s),
        ("graceful_stop_s", "graceful stop", LoadSpec, form.graceful_stop_s),
        ("max_tokens", "max tokens", RunSpec, form.max_tokens),
        ("repeats", "repeats", ExperimentSpec, form.repeats),
    )
    for name, label, schema, value in checks:
        if message := _field_error(schema, **{name: value}):
            errors[name] = f"{label}: {message}"
    errors.update(workload_option_errors(form.workload, form.workload_options))
    if message := _field_error(CacheSpec, policy=form.cache_policy):
        errors["cache_policy"] = message
    if message := _field_error(CacheSpec, tier=form.cache_tier):
        errors["cache_tier"] = message
    return errors


def _cache_part(form: GridForm, thresholds: list[float]) -> dict[str, Any]:
    """The spec's ``cache`` section: policy and tier, and the semantic tier's first threshold and
    share verified (the other thresholds are a grid axis)."""
    cache: dict[str, Any] = {"policy": form.cache_policy, "tier": form.cache_tier}
    if form.cache_tier == "semantic" and thresholds:
        cache.update(similarity=thresholds[0], verify_fraction=form.verify_fraction)
    return cache


def _experiment_data(form: GridForm, axis: str, values: list[Any], thresholds: list[float]) -> dict[str, Any]:
    """The ExperimentSpec's data for a form whose fields each passed their check."""
    load: dict[str, Any] = {
        "kind": form.load_kind,
        "duration_s": form.duration_s,
        "graceful_stop_s": form.graceful_stop_s,
    }
    if axis == "load.rate_per_s":
        load["rate_per_s"] = values[0]
    elif len(values) == 1:
        load["vus"] = values[0]
    base: dict[str, Any] = {
        "backend": form.backends[0],
        "model": form.model.strip(),
        "workload": workload_part(form.workload, form.workload_options, stream=form.stream),
        "load": load,
        "max_tokens": form.max_tokens,
        "cache": _cache_part(form, thresholds),
        **backend_sections(form.backends, form.backend_options),
    }
    if form.target_url.strip():
        base["target_url"] = form.target_url.strip()
    grid: dict[str, list[Any]] = {}
    if len(form.backends) > 1:
        grid["backend"] = list(form.backends)
    if len(values) > 1:
        grid[axis] = values
    if len(thresholds) > 1:
        grid["cache.similarity"] = thresholds
    return {"name": form.name.strip(), "base": base, "grid": grid, "repeats": form.repeats}


def check_grid_form(form: GridForm) -> tuple[ExperimentSpec | None, dict[str, str]]:
    """Validate the grid form field by field and build its ExperimentSpec.

    Returns ``(spec, {})`` when valid, else ``(None, {field: message})`` where field is
    a GridForm attribute name or a workload's or backend's option path (or option section,
    for a rule across its fields), so each message can be shown
    beside its field.
    """
    errors = _target_errors(form)
    axis, values = _load_axis(form, errors)
    thresholds = _similarity_axis(form, errors)
    errors.update(_setting_errors(form))
    if errors:
        return None, errors
    try:
        return ExperimentSpec.model_validate(_experiment_data(form, axis, values, thresholds)), {}
    except ValidationError as error:
        return None, {"form": format_validation_error(error)}
    except ValueError as error:  # a grid cell that is invalid as a whole
        return None, {"form": str(error)}


def workload_preview(form: GridForm) -> list[str]:
    """What the chosen workload shows before a launch (a trace's summary: requests, rates,
    lengths, ceilings, lines to clip), for the form's first backend, model and duration; empty
    while the form cannot make a spec (its fields' messages say why)."""
    from lab.workloads import get_workload

    try:
        spec = RunSpec.model_validate(
            {
                "backend": (form.backends or backend_names())[0],
                "model": form.model.strip(),
                "target_url": form.target_url.strip() or None,
                "workload": workload_part(form.workload, form.workload_options, stream=form.stream),
                "load": {"duration_s": form.duration_s},
                "max_tokens": form.max_tokens,
                **backend_sections(form.backends, form.backend_options),
            }
        )
        return get_workload(spec.workload.kind).preview_lines(spec)
    except (ValidationError, ValueError):
        return []
