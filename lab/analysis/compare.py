"""Runs compared: a run as a flat record, the runs a mean leaves out, cells that differ in one
setting (their ratio and its significance), and the generic table of cells with their cost.

The seed's tables and ratios live in :mod:`lab.analysis.seed`, means in
:mod:`lab.analysis.aggregation`, cost in :mod:`lab.analysis.cost`, CSV in :mod:`lab.analysis.safe_csv`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from db.models import Run

from db.figures import figure_by
from lab.analysis.aggregation import CELL_KEYS, aggregate, done_groups, ratio, ratio_of_runs
from lab.analysis.cost import cost_per_million_output_tokens
from lab.analysis.statistics import mean_interval, welch_test
from lab.measurement.hardware import hardware_summary
from lab.measurement.machine_record import MachineRecord
from lab.measurement.results import RESULT_FIELDS, RunResults

# Which code took a run and by which rules it is judged: every export carries them.
PROVENANCE_FIELDS: tuple[str, ...] = ("lab_git_commit", "lab_git_dirty", "rules_version")

# A run as a record: who and what it was, then its results (one field list: lab.measurement.results).
RECORD_FIELDS: tuple[str, ...] = (
    "run_id",
    "experiment_id",
    "experiment",
    "preset",
    "cell_label",
    "repeat_index",
    "status",
    "status_reason",
    "backend",
    "model",
    "workload",
    "load_kind",
    "vus",
    "arrival_rate_per_s",
    "prompts",
    "duration_s",
    "max_tokens",
    "random_seed",
    "tags",
    "launched_by",
    "source",
    "created_at",
    "started_at",
    "finished_at",
    "worker_name",
    "hardware",
    *PROVENANCE_FIELDS,
    *MachineRecord.names(),
    *RESULT_FIELDS,
)
# The ``source`` of the lab's own runs (imported ones name their tool and version).
LAB_SOURCE = "lab"
# The Compare page's cells when no seed table applies, and the figures it averages.
# ``source`` first: a run imported from another tool is its own row beside the lab's.
GENERIC_KEYS = CELL_KEYS
GENERIC_FIGURES = (
    "req_per_s",
    "output_tok_per_s",
    "steady_output_tok_per_s",
    "latency_avg_s",
    "latency_p50_s",
    "latency_p95_s",
    "latency_p99_s",
    "latency_max_s",
    "prefix_cache_hit_rate",
    "response_cache_hit_rate",
    # a trace replay: the ceilings beside the measured hit rates, and how late requests left
    "trace_prefix_reuse_ceiling",
    "trace_response_cache_ceiling",
    "trace_semantic_cache_ceiling",
    "lateness_p99_ms",
)


def provenance_of(run: Any) -> dict[str, Any]:
    """The lab commit that took the run (without ``-dirty``), whether its tree differed, and the
    version of the verdict rules its experiment froze; None where the run recorded none."""
    environment = getattr(run, "environment", None) or {}
    label = environment.get("lab_git_commit")
    dirty = environment.get("lab_git_dirty")
    if label is not None and dirty is None:  # recorded before the flag: the label's suffix says it
        dirty = str(label).endswith("-dirty")
    experiment = getattr(run, "experiment", None)
    rules = (getattr(experiment, "frozen_rules", None) or {}) if experiment is not None else {}
    return {
        "lab_git_commit": str(label).removesuffix("-dirty") if label else None,
        "lab_git_dirty": dirty,
        "rules_version": rules.get("version"),
    }


class RunRecord(dict[str, Any]):
    """A run as a record: a flat mapping of :data:`RECORD_FIELDS` (what tables, CSV, JSON and
    ``lab.api`` show), its figures typed in :attr:`results` (what analysis reads,
    :meth:`RunResults.of_record`). A figure is never written by name: the two stay the same."""

    __slots__ = ("results",)

    def __init__(self, fields: Mapping[str, Any], results: RunResults) -> None:
        super().__init__({name: fields.get(name) for name in RECORD_FIELDS if name not in RESULT_FIELDS})
        super().update(results.figure_values())
        self.results = results

    @classmethod
    def of(cls, run: Run) -> RunRecord:
        """A stored run (ORM object) as a record."""
        return cls(_identity_fields(run), RunResults.from_columns(run))

    def __setitem__(self, name: str, value: Any) -> None:
        if name in RESULT_FIELDS:
            raise TypeError(f"{name} is a figure: a record's figures are its results (copy it with dict() to edit)")
        super().__setitem__(name, value)

    def __reduce__(self) -> tuple[Any, ...]:
        return (RunRecord, ({name: self[name] for name in RECORD_FIELDS}, self.results))


def _identity_fields(run: Run) -> dict[str, Any]:
    """A run's record fields that are not figures: who and what it was, provenance, machine."""
    record: dict[str, Any] = {}
    for name in RECORD_FIELDS:
        if name in RESULT_FIELDS:
            continue
        if name == "run_id":
            record[name] = run.id
        elif name == "experiment":
            record[name] = run.experiment.name if run.experiment else None
        elif name == "preset":
            record[name] = run.experiment.preset if run.experiment else None
        elif name == "source":  # who measured it: the lab, or the tool it was imported from
            record[name] = getattr(run, "source_tool", None) or LAB_SOURCE
        elif name == "hardware":
            record[name] = hardware_summary(run.worker_hardware) or None
        elif name in PROVENANCE_FIELDS:
            record[name] = provenance_of(run)[name]
        else:
            value = getattr(run, name)
            record[name] = value.isoformat() if hasattr(value, "isoformat") else value
    return record


def split_warned(records: Sequence[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """(runs without a measurement warning, runs with one): means leave the second out by default."""
    kept = [r for r in records if not RunResults.of_record(r).measurement_warnings]
    return kept, [r for r in records if RunResults.of_record(r).measurement_warnings]


def cell_comparisons(records: Sequence[Mapping[str, Any]], keys: Sequence[str], figure: str) -> list[dict[str, Any]]:
    """Every pair of cells (done runs grouped by ``keys``) that differ in one key only: the
    ratio of their ``figure`` means, its 95% interval (log scale, paired by round within one
    experiment: see :func:`~lab.analysis.aggregation.ratio_of_runs`; None under two repeats) and
    whether it is significant (Welch's t-test on the repeats, p < 0.05; "n too small" under 3
    repeats a side)."""
    groups = done_groups(records, keys)
    rows = []
    # Numbers in numeric order (8 VUs before 32), so a ratio reads "higher over lower".
    cells = sorted(
        groups, key=lambda k: tuple((0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v)) for v in k)
    )
    for index, first in enumerate(cells):
        for second in cells[index + 1 :]:
            differing = [i for i, (a, b) in enumerate(zip(first, second, strict=True)) if a != b]
            if len(differing) != 1:
                continue
            first_values = [m.get(figure) for m in groups[first]]
            second_values = [m.get(figure) for m in groups[second]]
            first_mean, second_mean = mean_interval(first_values).mean, mean_interval(second_values).mean
            if first_mean is None or second_mean is None:
                continue
            same = ", ".join(
                f"{keys[i]} {first[i]}" for i in range(len(keys)) if i not in differing and first[i] is not None
            )
            key = keys[differing[0]]
            interval = ratio_of_runs(figure, groups[second], groups[first])
            rows.append(
                {
                    "figure": figure,
                    "cell": f"{key} {second[differing[0]]} over {key} {first[differing[0]]}"
                    + (f" ({same})" if same else ""),
                    # The interval's own centre, the estimator the reports use (never a point off it).
                    "ratio": interval.ratio if interval.ratio is not None else ratio(second_mean, first_mean),
                    "ratio_ci95_low": interval.ci95_low,
                    "ratio_ci95_high": interval.ci95_high,
                    "interval_method": interval.method if interval.ci95_low is not None else None,
                    "significance": welch_test(second_values, first_values).verdict,
                    # What rounds until decided needs: the interval's own centre, the repeats it
                    # rests on and the cells (run labels) to rerun.
                    "interval_ratio": interval.ratio,
                    "rounds": min(len(groups[first]), len(groups[second])),
                    "cell_labels": sorted({str(m.get("cell_label")) for m in (*groups[first], *groups[second])}),
                }
            )
    return rows


def grid_comparisons(
    records: Sequence[Mapping[str, Any]], specs: Sequence[Mapping[str, Any]], axes: Sequence[str], figure: str
) -> list[dict[str, Any]]:
    """:func:`cell_comparisons` over an experiment's grid axes (dotted spec paths such as
    ``workload.prompts``), read from each run's stored spec (``specs``, beside ``records``)."""
    if not axes:
        return []

    def axis_value(spec: Mapping[str, Any], path: str) -> Any:
        node: Any = spec
        for key in path.split("."):
            node = node.get(key) if isinstance(node, dict) else None
        return node if isinstance(node, (str, int, float, bool)) or node is None else str(node)

    keyed = [
        {**record, **{f"axis:{path}": axis_value(spec, path) for path in axes}}
        for record, spec in zip(records, specs, strict=True)
    ]
    rows = cell_comparisons(keyed, [f"axis:{path}" for path in axes], figure)
    for row in rows:
        row["cell"] = row["cell"].replace("axis:", "")
    return rows


def experiments_spanned(records: Sequence[Mapping[str, Any]]) -> str:
    """``"#3"`` or ``"#3, #5"``: the experiments a set of runs comes from."""
    ids = sorted({record["experiment_id"] for record in records if record.get("experiment_id") is not None})
    return ", ".join(f"#{experiment_id}" for experiment_id in ids) or "–"


def generic_table(records: Sequence[Mapping[str, Any]], *, price_per_hour: float | None = None) -> pd.DataFrame:
    """Done runs grouped by backend, workload and load: means, run count, the experiments each
    mean spans, and cost. Machine names and full precision (the CSV); a page shows it with
    its display names."""
    import pandas as pd  # on first use: most commands never build a table (0.5 s of every CLI start)

    groups = done_groups(records, GENERIC_KEYS)
    frame = pd.DataFrame(aggregate(records, GENERIC_KEYS, GENERIC_FIGURES))
    if frame.empty:
        return frame
    # aggregate keeps the groups' order, so the members line up with the rows.
    frame["experiments"] = [experiments_spanned(members) for members in groups.values()]
    if price_per_hour is not None:
        frame["cost_per_million_output_tokens"] = [
            cost_per_million_output_tokens(value, price_per_hour)
            for value in frame[figure_by(lambda f: f.output_tok_per_s).name]
        ]
    frame = frame.dropna(axis="columns", how="all")
    sort_keys = [key for key in ("backend", "vus", "prompts", "source") if key in frame]
    return frame.sort_values(sort_keys, na_position="last").reset_index(drop=True)
