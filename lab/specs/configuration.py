"""A run's configuration: what a baseline is of, and what a trend follows over time.

A configuration is a run spec without what differs between repeats of one measurement: the
random seed (each repeat draws its own). An experiment's repeats, run order and tags are not
part of a run spec, so they are left out by construction. Two runs of one configuration
measured the same thing, so a later one can be compared with a baseline of it; its key is the
SHA-256 of its canonical JSON.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from functools import lru_cache

from pydantic import ValidationError

from db.documents import JsonObject, section_of
from lab.specs.schema import ExperimentSpec, RunSpec

# Run spec fields that vary between repeats of one configuration.
REPEAT_FIELDS: tuple[str, ...] = ("random_seed",)


def normalised_spec(spec: JsonObject | RunSpec) -> JsonObject:
    """A run spec as JSON data with every default filled in (a spec stored before a field
    existed reads like one stored after); a stored spec this code no longer accepts is kept as
    stored."""
    if isinstance(spec, RunSpec):
        return spec.model_dump(mode="json")
    normalised: JsonObject = json.loads(_normalised_text(json.dumps(spec, sort_keys=True, default=str)))
    return normalised


@lru_cache(maxsize=4096)
def _normalised_text(spec_text: str) -> str:
    # Cached by the stored text: a page lists the configurations of thousands of runs.
    spec = json.loads(spec_text)
    with contextlib.suppress(ValidationError, ValueError):
        spec = RunSpec.model_validate(spec).model_dump(mode="json")
    return json.dumps(spec, sort_keys=True)


def run_configuration(spec: JsonObject | RunSpec) -> JsonObject:
    """The configuration of a run spec: the spec without :data:`REPEAT_FIELDS`."""
    return {key: value for key, value in normalised_spec(spec).items() if key not in REPEAT_FIELDS}


def configuration_key(spec: JsonObject | RunSpec) -> str:
    """The configuration's key: SHA-256 of its canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(run_configuration(spec), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def experiment_configurations(spec: ExperimentSpec) -> dict[str, str]:
    """``{configuration key: cell label}`` of every distinct cell of an experiment, in grid order."""
    return {configuration_key(run_spec): label for label, run_spec in spec.distinct_cells()}


def model_name(model: str | None) -> str:
    """A model by name, the same from any checkout: a local folder's last part, else the hub id as
    given. Runs store the folder's absolute path, which differs between clones and worktrees of
    one lab, so history of a model is matched by this name."""
    text = str(model or "").rstrip("/")
    return text.rsplit("/", 1)[-1] if text.startswith(("/", "~", ".")) else text


def configuration_label(configuration: JsonObject) -> str:
    """A short description of a configuration for people: backend, model, workload and load."""
    load = section_of(configuration, "load")
    workload = section_of(configuration, "workload")
    model = str(configuration.get("model") or "?").rstrip("/").rsplit("/", 1)[-1]
    if load.get("kind") == "constant-arrival-rate":
        load_text = f"{load.get('rate_per_s')} req/s"
    else:
        load_text = f"{load.get('vus')} VU{'' if load.get('vus') == 1 else 's'}"
    return (
        f"{configuration.get('backend')} · {model} · {workload.get('kind')} · {load_text} · "
        f"{load.get('duration_s')} s · max tokens {configuration.get('max_tokens')}"
    )


def flattened(data: JsonObject, prefix: str = "") -> JsonObject:
    """``{"load": {"vus": 2}}`` -> ``{"load.vus": 2}`` (lists kept whole)."""
    flat: JsonObject = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flattened(value, path + "."))
        else:
            flat[path] = value
    return flat


def configuration_differences(first: JsonObject, second: JsonObject) -> list[str]:
    """The dotted settings where two configurations differ: ``"load.vus: 2 vs 4"``, in order."""
    missing = object()
    a, b = flattened(first), flattened(second)

    def shown(value: object) -> str:
        return "(absent)" if value is missing else json.dumps(value, default=str)[:60]

    return [
        f"{path}: {shown(a.get(path, missing))} vs {shown(b.get(path, missing))}"
        for path in sorted(set(a) | set(b))
        if a.get(path, missing) != b.get(path, missing)
    ]
