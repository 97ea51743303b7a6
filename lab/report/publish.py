"""What a published report may say about a run: no machine's paths, the model by name and hash.

Reports, runs.csv and the HTML are committed and shared, so a local folder (a home, a
checkout, the lab's data folder, a model folder) never appears in them: the model is named by
its folder's name and its config.json hash, the lab's own folders by a label, and any other
absolute path by its last part.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from db.documents import JsonObject, section_of
from lab.analysis import compare
from lab.measurement.checks import recomputed_warnings
from lab.measurement.results import RunResults
from lab.specs.configuration import model_name
from services.processes import PROJECT_ROOT

# Any other absolute path of two or more parts (not inside a URL or a relative path): its last part is kept.
_ABSOLUTE_PATH = re.compile(r"(?<![\w:/.~<>-])/(?:[^\s/'\"()<>|,;]+/)+([^\s/'\"()<>|,;]*)")


def _folder_labels() -> tuple[tuple[str, str], ...]:
    """Known folders and their labels, longest first (a checkout inside the home is the checkout)."""
    from lab.settings import get_settings

    try:
        data_dir: Path | None = get_settings().data_dir
    except Exception:  # settings that do not load are reported elsewhere; the paths below still go
        data_dir = None
    return _labels_for(data_dir)


@lru_cache(maxsize=8)
def _labels_for(data_dir: Path | None) -> tuple[tuple[str, str], ...]:
    # Cached per data folder: every string of every published record passes through here.
    labels = [(str(PROJECT_ROOT), "<lab>")]
    if data_dir is not None:
        labels.append((str(data_dir.resolve()), "<data>"))
    with contextlib.suppress(RuntimeError):  # no HOME and no passwd entry (a container's --user)
        labels.append((str(Path.home()), "~"))
    return tuple(
        sorted(((folder, label) for folder, label in labels if folder not in ("", "/")), key=lambda pair: -len(pair[0]))
    )


# "--block-size 32" or "--block-size=32" in a recorded vLLM command line.
_BLOCK_SIZE = re.compile(r"^--block-size(?:=(\d+))?$")


def model_label(model: str | None, config_sha256: str | None = None) -> str:
    """A model as published: its name (a local folder's last part) and its config hash."""
    if not model:
        return "unknown"
    name = Path(model).name if "\\" in model else model_name(model)
    return f"{name} (config sha256 {config_sha256[:12]})" if config_sha256 else name


def scrub_paths(text: str) -> str:
    """``text`` with the lab's, the data and the home folder replaced by labels, and any other
    absolute path cut to ``.../<its last part>``."""
    for folder, label in _folder_labels():
        text = text.replace(folder, label)
    return _ABSOLUTE_PATH.sub(lambda match: ".../" + match.group(1), text)


def scrub_tree(value: Any) -> Any:
    """:func:`scrub_paths` on every string inside dicts, lists and tuples."""
    if isinstance(value, str):
        return scrub_paths(value)
    if isinstance(value, dict):
        return {key: scrub_tree(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(scrub_tree(item) for item in value)
    return value


def vllm_block_size(environment: Mapping[str, object] | None) -> int | None:
    """The KV block size the run's vLLM was started with, from its recorded command line."""
    recorded = section_of(section_of(environment or {}, "services"), "vllm").get("argv")
    argv = recorded if isinstance(recorded, list) else []
    size = None
    for index, arg in enumerate(argv):  # the last one wins, as in vLLM's own parser
        if match := _BLOCK_SIZE.match(str(arg)):
            value = match.group(1) or (argv[index + 1] if index + 1 < len(argv) else None)
            if value is not None and str(value).isdigit():
                size = int(str(value))
    return size


def scrub_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """A run record fit to publish: the model by name, no folder in any text."""
    published: dict[str, Any] = scrub_tree(dict(record))
    published["model"] = model_label(record.get("model")) if record.get("model") else record.get("model")
    return published


def published_record(run: Any) -> dict[str, Any]:
    """A run as :class:`lab.analysis.compare.RunRecord`, fit to publish (the model by name and config hash),
    with the vLLM block size it ran with and its warnings recomputed by today's code."""
    record = dict(compare.RunRecord.of(run))
    environment = run.environment or {}
    record["model"] = model_label(record.get("model"), environment.get("config_sha256"))
    record["vllm_block_size"] = vllm_block_size(environment)
    record["cache_filled_first"] = _filled_first(run.spec)
    # The warnings as today's code writes them from its figures (the commit is the record's own).
    results = RunResults.from_columns(run)
    warnings = recomputed_warnings(
        results.measurement_warnings, results=results, load_duration_s=run.duration_s, count_check=run.count_check
    )
    record.update(dataclasses.replace(results, measurement_warnings=warnings).figure_values())
    return scrub_record(record)


def _filled_first(spec: dict[str, Any] | None) -> bool:
    from lab.specs.schema import RunSpec

    try:
        return RunSpec.model_validate(spec or {}).fills_cache_first
    except ValueError:  # a spec an older lab stored that no longer validates
        return False


def published_environment(environment: Mapping[str, object]) -> JsonObject:
    """The environment table's source, fit to publish (the services' command lines left out)."""
    published = {key: value for key, value in environment.items() if key not in ("services", "startup")}
    model = environment.get("model")
    published["model"] = model_label(model if isinstance(model, str) else None)
    scrubbed: JsonObject = scrub_tree(published)
    return scrubbed
