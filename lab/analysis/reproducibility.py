"""How far a reproduction's conclusions can be trusted: A/A checks, the machine's speed over
the runs, and which code took them.

- **A/A checks.** The same configuration measured in two experiments of one reproduction
  (experiment 1's vLLM at 32 VUs and experiment 2's direct 50-prompt cell are one cell) must
  give the same figures. Their ratio, with its interval, says whether the machine drifted
  between them; when the interval lies wholly outside ``1 +- AA_TOLERANCE``, the drift (the
  ratio, as a factor >= 1) widens every verdict's interval, so a verdict that close to its
  threshold becomes inconclusive. A check whose interval reaches beyond ``AA_TELLS_WITHIN``
  either side cannot show agreement either (a busy machine, too few repeats): its point ratio
  widens the verdicts the same way.
- **Machine speed.** Each run times a fixed CPU kernel before and after its load
  (:mod:`lab.measurement.machine_speed`); the index relative to the median run is shown for
  the record and flags nothing (it cannot tell load from the host's own switching; the
  contention warning does).
- **Provenance.** The commits the runs came from, and whether any ran on a changed tree.

Pure: records are :class:`lab.analysis.compare.RunRecord` dicts, which carry the run's
provenance (``lab_git_commit``, ``lab_git_dirty``, ``rules_version``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lab.analysis.aggregation import done_runs, ratio_of_runs
from lab.analysis.statistics import RatioInterval
from lab.measurement.checks import STEADY_FROM_SERVER
from lab.measurement.machine_speed import run_calibration_s, speed_indices
from lab.measurement.results import RunResults

# Identical cells whose ratio stays within this of 1 agree (their interval may still span more).
AA_TOLERANCE = 0.10
# A check whose interval reaches beyond this factor either side of 1 is too wide to tell.
AA_TELLS_WITHIN = 1.5
# What makes two cells the same configuration (with the spec's settings these columns carry).
CONFIGURATION_KEYS = (
    "backend",
    "model",
    "workload",
    "load_kind",
    "vus",
    "arrival_rate_per_s",
    "prompts",
    "duration_s",
    "max_tokens",
)
AA_FIGURE = "req_per_s"
# Where every run of both cells has the backend's own steady rate, the check compares that:
# k6's whole-test req/s moves by whole batches when a request takes about as long as the run
# (37 or 64 requests at 32 VUs, by whether a second batch ends within the graceful stop),
# which is the test's length, not the machine.
AA_STEADY_FIGURE = "steady_output_tok_per_s"
AA_FIGURE_LABELS = {AA_FIGURE: "k6 req/s", AA_STEADY_FIGURE: "steady output tok/s (backend's counters)"}


@dataclass(frozen=True)
class AACheck:
    """Two identical cells from two experiments: their ratio (later over earlier) and whether
    it shows a drift of the machine beyond the tolerance."""

    configuration: str
    earlier_experiment: str
    later_experiment: str
    figure: str
    interval: RatioInterval

    @property
    def drifted(self) -> bool:
        """The whole interval lies outside 1 +- tolerance."""
        low, high = self.interval.ci95_low, self.interval.ci95_high
        if low is None or high is None:
            return False
        return low > 1 + AA_TOLERANCE or high < 1 / (1 + AA_TOLERANCE)

    @property
    def too_wide(self) -> bool:
        """Not drifted, but the interval reaches so far from 1 that it cannot show agreement."""
        low, high = self.interval.ci95_low, self.interval.ci95_high
        if low is None or high is None or self.drifted:
            return False
        return low < 1 / AA_TELLS_WITHIN or high > AA_TELLS_WITHIN

    @property
    def drift_factor(self) -> float:
        """How far the machine moved between the two, as a factor >= 1: the point ratio when the
        check drifted or was too wide to tell, 1.0 when it agreed."""
        if not (self.drifted or self.too_wide) or not self.interval.ratio:
            return 1.0
        return max(self.interval.ratio, 1 / self.interval.ratio)


def _configuration(record: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(record.get(key) for key in CONFIGURATION_KEYS)


def _describe(configuration: tuple[Any, ...]) -> str:
    return ", ".join(
        f"{key} {value}"
        for key, value in zip(CONFIGURATION_KEYS, configuration, strict=True)
        if value is not None and key != "model"
    )


def aa_figure(records: Sequence[Mapping[str, Any]]) -> str:
    """The figure an A/A check compares: the steady rate when every run has it from the backend's
    counters, else k6's req/s."""
    steady = all(
        RunResults.of_record(r).steady_source == STEADY_FROM_SERVER and r.get(AA_STEADY_FIGURE) for r in records
    )
    return AA_STEADY_FIGURE if records and steady else AA_FIGURE


def aa_checks(
    records_by_preset: Mapping[str, Sequence[Mapping[str, Any]]], *, figure: str | None = None
) -> list[AACheck]:
    """Every configuration measured by two experiments of the reproduction, compared on
    ``figure`` (by default :func:`aa_figure` of the two cells' runs)."""
    cells: dict[tuple[Any, ...], dict[str, list[Mapping[str, Any]]]] = {}
    for preset, records in records_by_preset.items():
        for record in done_runs(records):
            cells.setdefault(_configuration(record), {}).setdefault(preset, []).append(record)
    checks = []
    for configuration, by_preset in cells.items():
        presets = sorted(by_preset, key=lambda p: min(str(r.get("started_at") or "") for r in by_preset[p]))
        for earlier, later in itertools.pairwise(presets):
            compared = figure or aa_figure([*by_preset[earlier], *by_preset[later]])
            checks.append(
                AACheck(
                    _describe(configuration),
                    earlier,
                    later,
                    compared,
                    ratio_of_runs(compared, by_preset[later], by_preset[earlier]),
                )
            )
    return checks


def drift_factor(checks: Iterable[AACheck]) -> float:
    """The largest drift any A/A check showed (1.0: none beyond the tolerance)."""
    return max((check.drift_factor for check in checks), default=1.0)


def machine_speed_by_run(records: Sequence[Mapping[str, Any]]) -> dict[int, float | None]:
    """Each run's machine-speed index over ``records`` (1.0 = their median run)."""
    return speed_indices(
        {
            record["run_id"]: run_calibration_s(
                RunResults.of_record(record).machine_calibration_before_s,
                RunResults.of_record(record).machine_calibration_after_s,
            )
            for record in records
            if record.get("run_id") is not None
        }
    )


@dataclass(frozen=True)
class Provenance:
    """The commits a set of runs came from, and whether any ran on a changed tree."""

    commits: tuple[str, ...]
    dirty_runs: tuple[int, ...]

    @property
    def one_clean_commit(self) -> bool:
        return len(self.commits) == 1 and not self.dirty_runs

    def sentence(self) -> str:
        if not self.commits:
            return "The runs recorded no lab commit."
        dirty = (
            f" Runs {', '.join(f'#{r}' for r in self.dirty_runs)} ran on a tree with uncommitted changes."
            if self.dirty_runs
            else " Every run ran on a clean tree."
        )
        if len(self.commits) == 1:
            return f"Every run came from lab commit {self.commits[0]}.{dirty}"
        return (
            f"The runs came from {len(self.commits)} lab commits ({', '.join(self.commits)}): the code changed "
            f"while they were taken.{dirty}"
        )


def provenance_of(records: Sequence[Mapping[str, Any]]) -> Provenance:
    """The distinct commits (in the runs' order) and the runs taken on a dirty tree."""
    commits: list[str] = []
    dirty: list[int] = []
    for record in records:
        label = record.get("lab_git_commit")
        if not label:
            continue
        commit = label.removesuffix("-dirty")[:12]
        if commit not in commits:
            commits.append(commit)
        if record.get("lab_git_dirty") or label.endswith("-dirty"):
            dirty.append(record["run_id"])  # every record of a stored run has its id
    return Provenance(tuple(commits), tuple(dirty))
