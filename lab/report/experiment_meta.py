"""What the report reads of one experiment (``lab.report.reproduction.experiment_meta``): its name,
scale, rounds, run order and frozen rules, and once its runs are read, its wall and measured time."""

from __future__ import annotations

from typing import Any, TypedDict


class ExperimentMeta(TypedDict, total=False):
    """One experiment of a report, by the keys the report's sections read."""

    name: str
    scale: str
    scale_note: str | None
    ids: list[int]
    duration_s: float
    vus: list[int]
    repeats: int
    order: str
    order_seed: int | None
    until_decided: dict[str, Any] | None
    cell_scales: dict[str, dict[str, Any]]
    rules_version: int | None
    allowed_dirty: bool
    # Set once its runs are read (lab.analysis.wall_time.wall_and_measured_s).
    wall_s: float
    measured_s: float
