"""What differs between runs, and which of them a ratio may compare.

A run's stored spec is flattened to dotted settings (``load.vus``, ``max_tokens``,
``vllm.dtype``). The settings diff lists every setting whose value is not the same in all
the chosen runs (MLflow's "show diff only"). Runs with the same settings form a cell; two
cells get a ratio only when they differ in exactly one setting and agree on every other
one; any other pair is listed without a ratio, with the settings that differ as the reason.

The random seed is left out of both: repeats of one cell get distinct seeds by design.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from db.documents import JsonObject, JsonValue
from lab.analysis.aggregation import ratio, ratio_of_runs
from lab.analysis.statistics import mean_interval, welch_test

# Settings that identify a repeat rather than what was measured.
REPEAT_SETTINGS = frozenset({"random_seed"})
# More cells than this and the pairs are too many to list.
MAX_CELLS_PAIRED = 16

# One flattened setting's value: a JSON scalar, or a list kept whole as a tuple (hashable, ordered).
SettingValue = str | int | float | bool | tuple[JsonValue, ...] | None


def flatten_spec(spec: JsonObject | None, prefix: str = "") -> dict[str, SettingValue]:
    """A nested spec as ``{"load.vus": 1, "max_tokens": 128, ...}``; lists stay whole values."""
    flat: dict[str, SettingValue] = {}
    for key, value in (spec or {}).items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten_spec(value, prefix=f"{path}."))
        else:
            flat[path] = tuple(value) if isinstance(value, list) else value
    return flat


def differing_settings(specs: Sequence[JsonObject | None]) -> list[str]:
    """The settings whose value is not the same in every spec (a missing one counts as None),
    in the order they first appear, the random seed left out."""
    flats = [flatten_spec(spec) for spec in specs]
    names: dict[str, None] = {}
    for flat in flats:
        names.update(dict.fromkeys(flat))
    return [name for name in names if name not in REPEAT_SETTINGS and len({repr(flat.get(name)) for flat in flats}) > 1]


def settings_diff(runs: Sequence[tuple[int, JsonObject | None]]) -> list[dict[str | int, Any]]:
    """One row per differing setting: ``{"setting": path, run_id: value, ...}`` for ``(run_id, spec)`` pairs."""
    flats = {run_id: flatten_spec(spec) for run_id, spec in runs}
    return [
        {"setting": name, **{run_id: flat.get(name) for run_id, flat in flats.items()}}
        for name in differing_settings([spec for _, spec in runs])
    ]


def recorded_by_all(
    rows: Sequence[dict[str | int, Any]], imported_run_ids: Sequence[int]
) -> tuple[list[dict[str | int, Any]], int, int]:
    """With imported runs among ``rows``' runs: (the differing settings every run records, how many
    lab settings an imported run's tool did not record, how many of a tool's own settings the other
    runs do not have). Either gap is in a record, not a difference between the runs. Without
    imported runs, ``rows`` as they are."""
    if not imported_run_ids:
        return list(rows), 0, 0
    runs = [key for key in (rows[0] if rows else {}) if key != "setting"]
    shared = [row for row in rows if all(row.get(run_id) is not None for run_id in runs)]
    unrecorded = sum(
        1 for row in rows if row not in shared and any(row.get(run_id) is None for run_id in imported_run_ids)
    )
    return shared, unrecorded, len(rows) - len(shared) - unrecorded


@dataclass
class Cell:
    """Done runs with the same settings (the random seed aside): ``values`` of the differing settings."""

    values: dict[str, SettingValue]
    records: list[Mapping[str, Any]] = field(default_factory=list)

    @property
    def run_ids(self) -> list[int]:
        return [record["run_id"] for record in self.records]


@dataclass(frozen=True)
class FigureRatio:
    """``figure`` of the second cell over the first's: the ratio (the centre of its 95% interval: the
    geometric mean of per-round ratios when both cells ran the same rounds, else the ratio of
    means), that interval, and Welch's verdict."""

    figure: str
    ratio: float | None
    ci95_low: float | None
    ci95_high: float | None
    interval_method: str | None
    significance: str


@dataclass(frozen=True)
class CellPair:
    """Two cells and the settings in which they differ ``(setting, first value, second value)``;
    ``ratios`` only when exactly one setting differs."""

    first: Cell
    second: Cell
    differences: tuple[tuple[str, Any, Any], ...]
    ratios: tuple[FigureRatio, ...] = ()

    @property
    def comparable(self) -> bool:
        return len(self.differences) == 1


def cells_of(records: Sequence[Mapping[str, Any]], specs: Sequence[JsonObject | None]) -> list[Cell]:
    """Done runs grouped by their settings, one cell per distinct set (``records`` and ``specs`` in step)."""
    done = [(record, spec) for record, spec in zip(records, specs, strict=True) if record.get("status") == "done"]
    names = differing_settings([spec for _, spec in done])
    cells: dict[str, Cell] = {}
    for record, spec in done:
        flat = flatten_spec(spec)
        values = {name: flat.get(name) for name in names}
        cells.setdefault(repr(sorted(values.items(), key=lambda item: item[0])), Cell(values)).records.append(record)
    return sorted(cells.values(), key=lambda cell: [_order_key(value) for value in cell.values.values()])


def _order_key(value: Any) -> tuple[int, Any, str]:
    # Numbers in numeric order (8 VUs before 32), so a ratio reads "higher over lower".
    return (0, value, "") if isinstance(value, (int, float)) and not isinstance(value, bool) else (1, 0, str(value))


def figure_ratio(figure: str, first: Cell, second: Cell) -> FigureRatio | None:
    """``figure`` of ``second`` over ``first``; None when either side has no value."""
    first_values = [record.get(figure) for record in first.records]
    second_values = [record.get(figure) for record in second.records]
    first_mean, second_mean = mean_interval(first_values).mean, mean_interval(second_values).mean
    if first_mean is None or second_mean is None:
        return None
    interval = ratio_of_runs(figure, second.records, first.records)
    return FigureRatio(
        figure,
        # The interval's own centre (the reports' estimator), so the point never sits off its interval.
        interval.ratio if interval.ratio is not None else ratio(second_mean, first_mean),
        interval.ci95_low,
        interval.ci95_high,
        interval.method if interval.ci95_low is not None else None,
        welch_test(second_values, first_values).verdict,
    )


def cell_pairs(
    records: Sequence[Mapping[str, Any]], specs: Sequence[JsonObject | None], figures: Sequence[str]
) -> list[CellPair]:
    """Every pair of cells (at most ``MAX_CELLS_PAIRED`` cells), comparable pairs first; each
    comparable pair with the ratio of each of ``figures`` that both cells measured."""
    cells = cells_of(records, specs)[:MAX_CELLS_PAIRED]
    pairs = []
    for index, first in enumerate(cells):
        for second in cells[index + 1 :]:
            differences = tuple(
                (name, first.values[name], second.values[name])
                for name in first.values
                if repr(first.values[name]) != repr(second.values[name])
            )
            ratios: tuple[FigureRatio, ...] = ()
            if len(differences) == 1:
                ratios = tuple(found for figure in figures if (found := figure_ratio(figure, first, second)))
            pairs.append(CellPair(first, second, differences, ratios))
    return sorted(pairs, key=lambda pair: not pair.comparable)


def setting_values_differ_only_in(
    records: Sequence[Mapping[str, Any]], specs: Sequence[JsonObject | None], allowed: Sequence[str]
) -> list[str]:
    """The differing settings of the done runs that are not among ``allowed`` (empty: only those vary)."""
    done_specs = [spec for record, spec in zip(records, specs, strict=True) if record.get("status") == "done"]
    return [name for name in differing_settings(done_specs) if name not in allowed]
