"""Runs grouped into cells: means with their 95% confidence intervals, repeat counts, and the
ratio of two means. Records are :class:`lab.analysis.compare.RunRecord` dicts; only done runs count."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from lab.analysis.statistics import RatioInterval, finite_numbers, positive_mean_interval, ratio_interval
from lab.measurement.results import RunResults

# What makes two runs one cell, as run records name it: who measured it, the backend and its model,
# the workload and its settings (a trace by name and hash), the load and its length, the answer
# length. Every table or chart that groups runs groups by all of them, so no figure joins two
# workloads or two loads.
CELL_KEYS: tuple[str, ...] = (
    "source",
    "backend",
    "model",
    "workload",
    "trace_name",
    "trace_sha256",
    "load_kind",
    "vus",
    "arrival_rate_per_s",
    "prompts",
    "duration_s",
    "max_tokens",
)


def done_runs(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The records of runs that finished ``done``."""
    return [record for record in records if record.get("status") == "done"]


def vus_range(records: Sequence[Mapping[str, Any]]) -> tuple[int, int] | None:
    """The lowest and highest VU count of the done runs; None under two VU counts."""
    vus = sorted({r["vus"] for r in done_runs(records) if r.get("vus") is not None})
    return (vus[0], vus[-1]) if len(vus) >= 2 else None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``; None when either is unknown or the denominator is 0."""
    return numerator / denominator if numerator is not None and denominator else None


def mean_and_spread(values: Iterable[Any]) -> tuple[float | None, float | None, int]:
    """Mean, sample standard deviation (None for fewer than 2) and count of the numbers."""
    numbers = finite_numbers(values)
    if not numbers:
        return None, None, 0
    spread = statistics.stdev(numbers) if len(numbers) > 1 else None
    return statistics.fmean(numbers), spread, len(numbers)


def mean_of(records: Sequence[Mapping[str, Any]], figure: str, **match: Any) -> float | None:
    """Mean of ``figure`` over done runs matching every ``key=value`` in ``match``."""
    mean, _, _ = mean_and_spread(
        r.get(figure) for r in done_runs(records) if all(r.get(k) == v for k, v in match.items())
    )
    return mean


def done_groups(
    records: Sequence[Mapping[str, Any]], keys: Sequence[str]
) -> dict[tuple[Any, ...], list[Mapping[str, Any]]]:
    """Done runs grouped by their values of ``keys``, in the order the groups first appear."""
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for record in done_runs(records):
        groups.setdefault(tuple(record.get(key) for key in keys), []).append(record)
    return groups


def aggregate(
    records: Sequence[Mapping[str, Any]], keys: Sequence[str], figures: Sequence[str]
) -> list[dict[str, Any]]:
    """Group done runs by ``keys``; per figure the mean with its 95% confidence interval
    (``<figure>_ci95_low`` / ``_ci95_high``, None under two repeats; on a log scale where no value
    is negative, see :func:`~lab.analysis.statistics.positive_mean_interval`) and the repeat count ``n``."""
    rows = []
    for group_key, members in done_groups(records, keys).items():
        row: dict[str, Any] = dict(zip(keys, group_key, strict=True))
        row["n"] = len(members)
        results = [RunResults.of_record(m) for m in members]
        row.update(
            requests_failed=sum(int(r.requests_failed or 0) for r in results),
            # Still in flight when the graceful stop ended the test: neither done nor failed.
            requests_interrupted=sum(int(r.iterations_interrupted or 0) for r in results),
        )
        for figure in figures:
            # Figures that cannot be negative get an interval that cannot be either.
            interval = positive_mean_interval(m.get(figure) for m in members)
            row[figure] = interval.mean
            row[f"{figure}_ci95_low"] = interval.ci95_low
            row[f"{figure}_ci95_high"] = interval.ci95_high
        rows.append(row)
    return rows


def _by_round(records: Sequence[Mapping[str, Any]], figure: str) -> dict[tuple[Any, ...], float]:
    """The finite values of ``figure`` of the done runs among ``records``, keyed by their round
    (experiment and repeat index)."""
    values = {}
    for record in done_runs(records):
        value = finite_numbers([record.get(figure)])
        if value:
            values[(record.get("experiment_id"), record.get("repeat_index"))] = value[0]
    return values


def ratio_of_runs(
    figure: str, numerator_runs: Sequence[Mapping[str, Any]], denominator_runs: Sequence[Mapping[str, Any]]
) -> RatioInterval:
    """The ratio of ``figure`` between two sets of runs, with its 95% interval. Paired by round
    when both sides ran the same rounds of one experiment (each round's two runs saw the same
    machine; with blocks the pairing is arbitrary but still valid), unpaired otherwise."""
    top, bottom = _by_round(numerator_runs, figure), _by_round(denominator_runs, figure)
    every_top, every_bottom = _values(numerator_runs, figure), _values(denominator_runs, figure)
    # Paired only when each run has a round of its own (runs without one would collide on a key).
    distinct = len(top) == len(every_top) and len(bottom) == len(every_bottom)
    paired = distinct and len(top) >= 2 and top.keys() == bottom.keys() and len({key[0] for key in top}) == 1
    if paired:
        rounds = sorted(top, key=str)
        return ratio_interval([top[r] for r in rounds], [bottom[r] for r in rounds], paired=True)
    return ratio_interval(every_top, every_bottom)


def _values(records: Sequence[Mapping[str, Any]], figure: str) -> list[float]:
    return finite_numbers(record.get(figure) for record in done_runs(records))


def ratio_between(
    records: Sequence[Mapping[str, Any]], figure: str, numerator: dict[str, Any], denominator: dict[str, Any]
) -> RatioInterval:
    """:func:`ratio_of_runs` between the runs matching ``numerator`` and those matching ``denominator``."""

    def matching(match: dict[str, Any]) -> list[Mapping[str, Any]]:
        return [r for r in records if all(r.get(k) == v for k, v in match.items())]

    return ratio_of_runs(figure, matching(numerator), matching(denominator))
