"""What a published report may say about a run: no machine's paths, the model by name and hash.

Reports, runs.csv and the HTML are committed and shared, so a local folder (a home, a
checkout, the lab's data folder) never appears in them: the model is named by its folder's
name and its config.json hash, and any other text has those folders replaced by a label.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from lab import compare
from services.processes import PROJECT_ROOT

# Longest first, so a checkout inside the home folder is named as the checkout.
_FOLDER_LABELS: tuple[tuple[str, str], ...] = tuple(sorted(
    ((str(PROJECT_ROOT), "<lab>"), (str(Path.home()), "~")), key=lambda pair: -len(pair[0])
))
# "--block-size 32" or "--block-size=32" in a recorded vLLM command line.
_BLOCK_SIZE = re.compile(r"^--block-size(?:=(\d+))?$")


def model_label(model: str | None, config_sha256: str | None = None) -> str:
    """A model as published: its name (a local folder's last part) and its config hash."""
    if not model:
        return "unknown"
    name = Path(model).name if model.startswith(("/", "~", ".")) or "\\" in model else model
    return f"{name} (config sha256 {config_sha256[:12]})" if config_sha256 else name


def scrub_paths(text: str) -> str:
    """``text`` with the lab's folder and the home folder replaced by labels."""
    for folder, label in _FOLDER_LABELS:
        if folder and folder != "/":
            text = text.replace(folder, label)
    return text


def vllm_block_size(environment: dict[str, Any] | None) -> int | None:
    """The KV block size the run's vLLM was started with, from its recorded command line."""
    argv = (((environment or {}).get("services") or {}).get("vllm") or {}).get("argv") or []
    size = None
    for index, arg in enumerate(argv):  # the last one wins, as in vLLM's own parser
        if match := _BLOCK_SIZE.match(str(arg)):
            value = match.group(1) or (argv[index + 1] if index + 1 < len(argv) else None)
            if value is not None and str(value).isdigit():
                size = int(value)
    return size


def scrub_record(record: dict[str, Any]) -> dict[str, Any]:
    """A run record fit to publish: the model by name, no folder in any text."""
    published = {key: scrub_paths(value) if isinstance(value, str) else value for key, value in record.items()}
    published["model"] = model_label(record.get("model")) if record.get("model") else record.get("model")
    return published


def published_record(run: Any) -> dict[str, Any]:
    """A run as :func:`lab.compare.run_record`, fit to publish (the model by name and config hash),
    with the vLLM block size it ran with."""
    record = compare.run_record(run)
    environment = run.environment or {}
    record["model"] = model_label(record.get("model"), environment.get("config_sha256"))
    record["vllm_block_size"] = vllm_block_size(environment)
    return scrub_record(record)


def published_environment(environment: dict[str, Any]) -> dict[str, Any]:
    """The environment table's source, fit to publish (the services' command lines left out)."""
    published = {key: value for key, value in environment.items() if key not in ("services", "startup")}
    published["model"] = model_label(environment.get("model"))
    return {key: scrub_paths(value) if isinstance(value, str) else value for key, value in published.items()}
