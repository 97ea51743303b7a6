"""Experiments as files: a spec file (JSON or TOML, the presets' schema) read into an
:class:`~lab.specs.schema.ExperimentSpec`, and a stored run or experiment written back as one.

A spec file is what a preset file is: the experiment's fields (``name``, ``description``,
``base``, ``grid``, ``repeats``, ``order``, ``order_seed``...) and an optional ``quick``
section; ``name`` defaults to the file's name. It is validated like a preset, with the same
one-line errors, and a key the schema does not know is refused. Exports are JSON (TOML has
no null, and a stored spec holds some), so an experiment can live in a repository and be
rerun exactly: the runs' random seeds and the experiment's run order are in the file.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

from db.documents import JsonObject, section_of
from lab.specs.schema import ExperimentSpec, SpecError, experiment_from_document
from lab.user_input.json_errors import json_error_text
from lab.workloads.input_files import InputFileError, read_input_bytes

SPEC_FILE_FORMATS = (".json", ".toml")
MAX_SPEC_FILE_BYTES = 1_000_000
# What a spec file may hold at its top: the experiment's fields and the presets' quick section.
SPEC_FILE_KEYS: tuple[str, ...] = (*ExperimentSpec.model_fields, "quick")


def read_spec_document(path: Path) -> JsonObject:
    """The spec file's document (a table at the top); SpecError naming what is wrong."""
    if path.suffix.lower() not in SPEC_FILE_FORMATS:
        raise SpecError(f"spec file {path.name}: use a .json or .toml file, not {path.suffix or 'no suffix'}")
    try:
        # Through the one gate for users' files: a FIFO or a device is refused at once, never read.
        content = read_input_bytes(
            path, what="spec file", max_bytes=MAX_SPEC_FILE_BYTES, limit_name="the limit for spec files"
        )
        text = content.decode("utf-8")
    except InputFileError as error:
        raise SpecError(str(error)) from None
    except OSError as error:
        raise SpecError(f"cannot read spec file {path}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise SpecError(f"spec file {path.name} is not UTF-8 text") from None
    try:
        document = tomllib.loads(text) if path.suffix.lower() == ".toml" else json.loads(text)
    except json.JSONDecodeError as error:
        raise SpecError(f"spec file {path.name} is not valid JSON ({json_error_text(error)})") from None
    except tomllib.TOMLDecodeError as error:
        raise SpecError(f"spec file {path.name} is not valid TOML ({error})") from None
    if not isinstance(document, dict):
        raise SpecError(
            f"spec file {path.name} must hold a table of settings at the top, not a {type(document).__name__}"
        )
    return document


def load_spec_file(
    path: Path | str, *, quick: bool = False, overrides: list[tuple[str, Any]] | None = None
) -> ExperimentSpec:
    """The experiment a spec file describes, at the quick scale if asked, with ``--set``
    overrides applied as for a preset; SpecError (one line, the file named) when invalid."""
    path = Path(path)
    document = read_spec_document(path)
    unknown = [key for key in document if key not in SPEC_FILE_KEYS]
    if unknown:
        raise SpecError(
            f"spec file {path.name}: unknown key {unknown[0]!r} (a spec file has: {', '.join(SPEC_FILE_KEYS)})"
        )
    document.setdefault("name", path.stem)
    try:
        spec = experiment_from_document(document, quick=quick, overrides=overrides)
    except SpecError as error:
        message = str(error).replace("Extra inputs are not permitted", "unknown key")
        raise SpecError(f"spec file {path.name}: {message}") from None
    return renamed_rerun(spec, named_by_hand=any(key == "name" for key, _ in overrides or []))


# The name of an exported run's spec file: "rerun of run #2: naive, 1 VU, max tokens 128".
RERUN_NAME = re.compile(r"^rerun of run #(?P<run_id>\d+)(:.*)?$")


def rerun_summary(base: JsonObject) -> str:
    """What a run spec runs, in a few words: backend, load, max tokens, workload."""
    load = section_of(base, "load")
    parts = [str(base.get("backend") or "?")]
    if load.get("rate_per_s") is not None and load.get("kind") != "constant-vus":
        parts.append(f"{load['rate_per_s']:g} req/s")
    elif load.get("vus") is not None:
        parts.append(f"{load['vus']} VU{'' if load['vus'] == 1 else 's'}")
    if base.get("max_tokens") is not None:
        parts.append(f"max tokens {base['max_tokens']}")
    if workload_kind := section_of(base, "workload").get("kind"):
        parts.append(str(workload_kind))
    return ", ".join(parts)


def rerun_name(run_id: int, base: JsonObject) -> str:
    """An exported run's experiment name, after what it runs."""
    return f"rerun of run #{run_id}: {rerun_summary(base)}"


def renamed_rerun(spec: ExperimentSpec, *, named_by_hand: bool) -> ExperimentSpec:
    """A rerun of an exported run named after what it now runs (the file edited, or ``--set``
    changed a setting since the export), unless a name was set by hand."""
    match = RERUN_NAME.match(spec.name)
    if match is None or named_by_hand:
        return spec
    return spec.model_copy(update={"name": rerun_name(int(match["run_id"]), spec.base.model_dump(mode="json"))})


def experiment_spec_document(*, stored_spec: JsonObject) -> JsonObject:
    """An experiment's stored spec as a spec file: exactly what was queued (random seed and run order
    included), so the file reruns it."""
    return dict(stored_spec)


def run_spec_document(
    *, run_id: int, stored_spec: JsonObject, cell_label: str = "", experiment_name: str | None = None
) -> JsonObject:
    """One run's stored spec as a spec file: an experiment of that run alone (its random seed kept, one
    repeat), so rerunning the file queues a run of the same spec."""
    source = f" of experiment {experiment_name!r}" if experiment_name else ""
    cell = f" (cell {cell_label})" if cell_label else ""
    return {
        # Renamed when loaded after what it then runs (renamed_rerun): an edit or --set shows in the name.
        "name": rerun_name(run_id, stored_spec),
        "description": f"exported from run #{run_id}{cell}{source}",
        "base": dict(stored_spec),
        "repeats": 1,
    }


def spec_file_text(document: JsonObject) -> str:
    """A spec file's JSON text (indented, keys in the schema's order)."""
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
