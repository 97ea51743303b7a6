"""A figure of one configuration over time: one point a run, each experiment's mean with its
95% interval, and what each run measured with (lab commit, engine version, model hash), so a
step change can be traced to what changed. Pure: run records and environments in."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from db.documents import section_of
from lab.analysis.statistics import finite_numbers, positive_mean_interval

UNKNOWN = "–"


@dataclass(frozen=True)
class TrendPoint:
    """One done run of the configuration: when, the figure, and what it ran with."""

    run_id: int
    experiment_id: int | None
    created_at: str
    value: float | None
    lab_commit: str
    engine_version: str
    model_hash: str
    in_baseline: bool


@dataclass(frozen=True)
class ExperimentMean:
    """One experiment's runs of the configuration: their mean and its 95% interval (None under two)."""

    experiment_id: int | None
    created_at: str
    mean: float | None
    ci95_low: float | None
    ci95_high: float | None
    n: int


def engine_version(packages: Sequence[str], environment: Mapping[str, object] | None) -> str:
    """``vllm 0.11.0``: the first of the backend's packages the run recorded; ``–`` for a server
    the lab did not start (no packages) or an environment without them."""
    recorded = section_of(environment or {}, "packages")
    for name in packages:
        if recorded.get(name):
            return f"{name} {recorded[name]}"
    return UNKNOWN


def model_hash(environment: Mapping[str, object] | None) -> str:
    """The first 12 hex digits of the model's config.json SHA-256; ``–`` unknown (a Hub id, a remote server)."""
    digest = (environment or {}).get("config_sha256")
    return str(digest)[:12] if digest else UNKNOWN


def short_commit(label: str | None) -> str:
    """``0123456789ab-dirty``: the commit's first 12 hex digits, ``-dirty`` kept; ``–`` unknown."""
    if not label:
        return UNKNOWN
    dirty = label.endswith("-dirty")
    return label.removesuffix("-dirty")[:12] + ("-dirty" if dirty else "")


def trend_points(
    records: Sequence[Mapping[str, Any]],
    environments: Sequence[Mapping[str, object] | None],
    *,
    figure: str,
    packages: Sequence[str],
    baseline_run_ids: Collection[int],
) -> list[TrendPoint]:
    """One point per run record (oldest first), beside its environment."""
    points = []
    for record, environment in zip(records, environments, strict=True):
        value = finite_numbers([record.get(figure)])
        points.append(
            TrendPoint(
                run_id=int(record["run_id"]),
                experiment_id=record.get("experiment_id"),
                created_at=str(record.get("created_at") or ""),
                value=value[0] if value else None,
                lab_commit=short_commit(
                    commit if isinstance(commit := (environment or {}).get("lab_git_commit"), str) else None
                ),
                engine_version=engine_version(packages, environment),
                model_hash=model_hash(environment),
                in_baseline=int(record["run_id"]) in set(baseline_run_ids),
            )
        )
    return sorted(points, key=lambda point: point.run_id)


def experiment_means(points: Sequence[TrendPoint]) -> list[ExperimentMean]:
    """Per experiment (in order of its first run), the mean of its runs' values with its interval."""
    groups: dict[int | None, list[TrendPoint]] = {}
    for point in points:
        groups.setdefault(point.experiment_id, []).append(point)
    means = []
    for experiment_id, members in groups.items():
        interval = positive_mean_interval(point.value for point in members)
        means.append(
            ExperimentMean(
                experiment_id, members[0].created_at, interval.mean, interval.ci95_low, interval.ci95_high, interval.n
            )
        )
    return means


def baseline_band(points: Sequence[TrendPoint]) -> ExperimentMean | None:
    """The baseline runs' mean with its interval; None when none of the points is the baseline's."""
    members = [point for point in points if point.in_baseline]
    if not members:
        return None
    interval = positive_mean_interval(point.value for point in members)
    return ExperimentMean(
        members[0].experiment_id,
        members[0].created_at,
        interval.mean,
        interval.ci95_low,
        interval.ci95_high,
        interval.n,
    )
