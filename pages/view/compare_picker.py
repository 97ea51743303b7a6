"""Compare's picker, decided without Streamlit: the one default of both modes, and each run's
label in the picker (what tells it apart from the runs listed beside it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from db.figures import figure_by
from lab.analysis.run_diff import REPEAT_SETTINGS, flatten_spec
from pages.view.series import setting_text

MAX_CHOSEN_BY_DEFAULT = 12
# The picker names at most this many settings that differ from a run's neighbours.
MAX_LABEL_SETTINGS = 3
# Shown in every label already (or not a setting a person picks by).
LABELLED_APART = frozenset({"backend", "load.vus", "model", *REPEAT_SETTINGS})
# Where a run's figures come from when the lab did not measure them (other branches add the columns).
LAB_SOURCE = "lab"

DEFAULT_TEXT = (
    "By default: the done runs of the newest experiment with two or more of them (else the two newest "
    "done runs), in either mode."
)


@dataclass(frozen=True)
class DefaultChoice:
    """What both modes preselect: the experiments and the runs among them."""

    experiment_ids: list[int]
    run_ids: list[int]


def default_choice(runs: Sequence[Any]) -> DefaultChoice:
    """The done runs (newest first) of the newest experiment holding two or more of them, else
    the two newest done runs; and their experiments. Both modes start from this."""
    by_experiment: dict[int | None, list[Any]] = {}
    for run in runs:
        by_experiment.setdefault(run.experiment_id, []).append(run)
    chosen = next(
        (group for experiment_id, group in by_experiment.items() if experiment_id is not None and len(group) >= 2),
        list(runs[:2]),
    )[:MAX_CHOSEN_BY_DEFAULT]
    experiment_ids = list(dict.fromkeys(run.experiment_id for run in chosen if run.experiment_id is not None))
    return DefaultChoice(experiment_ids, sorted(run.id for run in chosen))


def run_settings(run: Any) -> dict[str, Any]:
    """A run's stored spec as dotted settings (an imported run may hold none)."""
    return flatten_spec(run.spec if isinstance(getattr(run, "spec", None), dict) else None)


def origin_parts(run: Any, flat: dict[str, Any]) -> list[str]:
    """Where a run's requests came from, when not the lab's own load: the tool of an imported
    run, the trace of a replay (each only when the run or its settings record it)."""
    parts = []
    source = getattr(run, "source_tool", None) or flat.get("source_tool")
    if source and source != LAB_SOURCE:
        parts.append(f"imported from {source}")
    trace_name = figure_by(lambda f: f.trace_name).name  # a run's figure, or a setting of an imported run
    trace = getattr(run, trace_name, None) or flat.get("workload.trace_name") or flat.get(trace_name)
    if trace:
        parts.append(f"trace {trace}")
    return parts


def differing_from(flat: dict[str, Any], neighbours: Sequence[Mapping[str, Any]]) -> list[str]:
    """The settings of ``flat`` whose value differs from any neighbour's (in ``flat``'s order)."""
    return [
        name
        for name, value in flat.items()
        if name not in LABELLED_APART and any(repr(other.get(name)) != repr(value) for other in neighbours)
    ]


def same_cell(flat: dict[str, Any], other: dict[str, Any]) -> bool:
    """True when two runs' settings are the same but for the random seed (repeats of one cell)."""
    names = (set(flat) | set(other)) - REPEAT_SETTINGS
    return bool(flat) and all(repr(flat.get(name)) == repr(other.get(name)) for name in names)


def load_text(run: Any, flat: dict[str, Any]) -> str | None:
    """``"2 VUs"`` or ``"4 req/s"``: the run's load, None when unknown."""
    vus = getattr(run, "vus", None) or flat.get("load.vus")
    if flat.get("load.kind") not in (None, "constant-vus") and flat.get("load.rate_per_s") is not None:
        return f"{flat['load.rate_per_s']:g} req/s"
    return setting_text("load.vus", int(vus)) if isinstance(vus, (int, float)) else None


def run_labels(runs: Sequence[Any]) -> dict[int, str]:
    """Each run's label in the picker, in list order: ``#7 naive · 2 VUs · max tokens 16 ·
    imported from guidellm``: its backend and load, then the settings that differ from the runs
    listed just before and after it, then where it came from. Absent fields are skipped."""
    flats = [run_settings(run) for run in runs]
    labels = {}
    for index, (run, flat) in enumerate(zip(runs, flats, strict=True)):
        neighbours = [flats[i] for i in (index - 1, index + 1) if 0 <= i < len(flats) and flats[i]]
        parts = [f"#{run.id} {getattr(run, 'backend', None) or flat.get('backend') or '?'}"]
        if (load := load_text(run, flat)) is not None:
            parts.append(load)
        differing = differing_from(flat, neighbours) if flat else []
        parts += [setting_text(name, flat[name]) for name in differing][:MAX_LABEL_SETTINGS]
        if isinstance(getattr(run, "repeat_index", None), int) and any(same_cell(flat, other) for other in neighbours):
            parts.append(f"repeat {run.repeat_index + 1}")  # repeats of one cell: told apart by number
        parts += origin_parts(run, flat)
        labels[run.id] = " · ".join(parts)
    return labels
