"""Which of the chosen runs a Compare chart may join with one line.

A line through two points says "this is what changing the x axis does". So a chart joins
only runs that differ in the chart's own axis (VUs for the charts against VUs, the load for
the Pareto chart) and agree on every other setting; runs that differ in more are separate
series, each labelled with what sets it apart ("naive · max tokens 32"). Pure: the Compare
page and its tests call it without Streamlit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lab.analysis.run_diff import differing_settings, flatten_spec
from pages.view.names import setting_label, setting_value

# The settings each chart draws along its x axis (dotted run spec paths).
VUS_AXIS: tuple[str, ...] = ("load.vus",)
# The Pareto chart joins a series' loads: closed (VUs) or open (arrival rate).
LOAD_AXIS: tuple[str, ...] = ("load.vus", "load.rate_per_s")
# A chart over time draws each run on its own: every differing setting names it.
NO_AXIS: tuple[str, ...] = ()
# The backend starts every label (and picks the colour); never repeated as a setting.
BACKEND_SETTING = "backend"
SERIES_FIELD = "series"


@dataclass(frozen=True)
class RunSeries:
    """Runs one line may join: ``label`` says what sets them apart from the other series."""

    label: str
    backend: str
    run_ids: tuple[int, ...]


# A legend entry names at most this many settings, each value cut to this many characters: a short
# name per series, never a line that the legend cuts (the rest is in the settings table above).
MAX_LABEL_SETTINGS = 2
MAX_VALUE_CHARS = 24


def series_label(backend: str, values: dict[str, Any]) -> str:
    """``"naive"``, ``"vllm · max tokens 32 · +1 more"``: the backend and what else differs, short."""
    shown = [setting_text(name, value) for name, value in values.items() if name != BACKEND_SETTING]
    more = len(shown) - MAX_LABEL_SETTINGS
    parts = [backend, *shown[:MAX_LABEL_SETTINGS]] + ([f"+{more} more"] if more > 0 else [])
    return " · ".join(parts)


def _cut(text: str) -> str:
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "…"


def setting_text(name: str, value: Any) -> str:
    """One setting and its value in a label, the value cut short: ``"2 VUs"``, ``"max tokens 32"``."""
    if name == "imported from":
        return f"imported from {_cut(str(value))}"
    if name == "load.vus" and isinstance(value, int) and not isinstance(value, bool):
        return f"{value} VU{'' if value == 1 else 's'}"
    return f"{setting_label(name)} {_cut(setting_value(value, name))}"


def chart_series(
    records: Sequence[Mapping[str, Any]], specs: Sequence[dict[str, Any] | None], axis: Sequence[str]
) -> list[RunSeries]:
    """The runs (``records`` and their stored ``specs`` in step) grouped into series: one series
    per backend and distinct value of every differing setting outside ``axis``, in first-seen order."""
    flats = [flatten_spec(spec) for spec in specs]
    # A setting one run does not record (an imported run has only its tool's) names no series apart.
    names = [
        name
        for name in differing_settings(specs)
        if name not in axis and name != BACKEND_SETTING and all(flat.get(name) is not None for flat in flats)
    ]
    grouped: dict[tuple[str, str], tuple[str, list[int]]] = {}
    for record, flat in zip(records, flats, strict=True):
        backend = str(record.get("backend") or flat.get(BACKEND_SETTING) or "?")
        values = {name: flat.get(name) for name in names}
        source = record.get("source")
        if source and source != "lab":  # another tool's run is never one line with the lab's
            values = {"imported from": source, **values}
        # A run with no stored settings is its own series: nothing says it is like the others.
        key = (backend, repr([*values.values(), bool(flat) or record.get("run_id")]))
        label = series_label(backend, values)
        grouped.setdefault(key, (label, []))[1].append(int(record["run_id"]))
    return [RunSeries(label, backend, tuple(run_ids)) for (backend, _), (label, run_ids) in grouped.items()]


def with_series(
    records: Sequence[Mapping[str, Any]], specs: Sequence[dict[str, Any] | None], axis: Sequence[str]
) -> list[dict[str, Any]]:
    """Copies of ``records``, each with its series' label under ``"series"`` (the charts group by it)."""
    label_of = {run_id: series.label for series in chart_series(records, specs, axis) for run_id in series.run_ids}
    return [{**record, SERIES_FIELD: label_of[int(record["run_id"])]} for record in records]


def run_line_label(record: dict[str, Any], series_label_text: str) -> str:
    """A run drawn on its own (over time): ``"#7 naive · VUs 2"``."""
    return f"#{record['run_id']} {series_label_text}"
