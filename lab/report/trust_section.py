"""The report's "How far to trust these figures" section: which code took the runs, the rules
fixed before the data, the A/A checks between identical cells, and the machine's speed over
the reproduction. The figures come from :mod:`lab.analysis.reproducibility`; this renders them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from lab.analysis.reproducibility import (
    AA_FIGURE_LABELS,
    AA_TELLS_WITHIN,
    AA_TOLERANCE,
    AACheck,
    Provenance,
    aa_checks,
    drift_factor,
    machine_speed_by_run,
    provenance_of,
)
from lab.report.formatting import format_ratio
from lab.report.plotly_figures import Figure, new_figure, scatter
from lab.report.render import Block
from lab.report.verdicts import RULES_VERSION


@dataclass(frozen=True)
class Trust:
    """What the report says about how far its figures can be trusted, computed once."""

    provenance: Provenance
    checks: list[AACheck]
    drift: float
    speed_by_run: dict[int, float | None]
    frozen_rules_versions: tuple[int | None, ...] = ()
    allowed_dirty: bool = False
    records: Sequence[Mapping[str, Any]] = field(default_factory=list)


def assess(
    records_by_preset: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    frozen_rules_versions: tuple[int | None, ...] = (),
    allowed_dirty: bool = False,
) -> Trust:
    """The trust figures of a reproduction's runs."""
    records = [r for preset_records in records_by_preset.values() for r in preset_records]
    checks = aa_checks(records_by_preset)
    return Trust(
        provenance_of(records),
        checks,
        drift_factor(checks),
        machine_speed_by_run(records),
        frozen_rules_versions,
        allowed_dirty,
        records,
    )


def header_blocks(trust: Trust) -> list[Block]:
    """What goes at the top: the code, a dirty tree, and the rules' version."""
    blocks: list[Block] = []
    if trust.allowed_dirty or trust.provenance.dirty_runs:
        blocks.append(
            (
                "p",
                "**Taken on a tree with uncommitted changes** (`--allow-dirty`): no single commit "
                "reproduces these runs exactly.",
            )
        )
    blocks.append(("p", trust.provenance.sentence()))
    blocks.append(("p", rules_sentence(trust.frozen_rules_versions)))
    return blocks


def rules_sentence(frozen_versions: tuple[int | None, ...]) -> str:
    known = {version for version in frozen_versions if version is not None}
    if not known:
        return (
            f"Verdicts use rules version {RULES_VERSION}, the code's: these experiments were queued before "
            "rules were frozen with a reproduction."
        )
    if known == {RULES_VERSION}:
        return f"Verdicts use rules version {RULES_VERSION}, frozen when the reproduction was queued, before its data."
    return (
        f"Verdicts use rules version {RULES_VERSION}, newer than the version {', '.join(map(str, sorted(known)))} "
        "frozen when the runs were queued: the report was rendered by newer code than took the runs "
        "(see the project's history for what changed)."
    )


def _aa_row(check: AACheck) -> dict[str, Any]:
    interval = check.interval
    bounds = (
        ""
        if interval.ci95_low is None
        else f" [{format_ratio(interval.ci95_low, 'x')}, {format_ratio(interval.ci95_high, 'x')}]"
    )
    return {
        "cell": check.configuration,
        "experiments": f"{check.later_experiment} over {check.earlier_experiment}",
        "figure": AA_FIGURE_LABELS.get(check.figure, check.figure),
        "ratio": format_ratio(interval.ratio, "x") + bounds,
        "verdict": (
            f"drifted (x{check.drift_factor:.2f})"
            if check.drifted
            else f"too wide to tell (x{check.drift_factor:.2f})"
            if check.too_wide
            else "agree"
            if interval.ci95_low is not None
            else "too few repeats to tell"
        ),
    }


def section_blocks(trust: Trust) -> list[Block]:
    """The section itself: A/A checks, then the machine's speed per run."""
    blocks: list[Block] = [("h", 2, "How far to trust these figures")]
    if trust.checks:
        blocks.append(
            (
                "p",
                "A/A checks: the same configuration measured in two experiments of this reproduction, "
                "the later over the earlier (95% interval, log scale), on the backend's own steady "
                "output rate where every run has one (k6's whole-test req/s moves by whole batches when "
                "a request takes about as long as the run), else on k6's req/s. They agree when the ratio stays "
                f"within {AA_TOLERANCE:.0%} of 1; when the whole interval lies beyond that, the machine "
                "drifted between them, and every ratio's interval is widened by that factor before it is "
                'judged, so a verdict that close to its threshold reads "inconclusive". An interval '
                f"reaching beyond {AA_TELLS_WITHIN:g}x either side of 1 cannot show agreement (a busy "
                "machine, too few repeats): its ratio widens the verdicts the same way.",
            )
        )
        blocks.append(("table", pd.DataFrame([_aa_row(check) for check in trust.checks])))
        if trust.drift > 1:
            blocks.append(
                (
                    "p",
                    f"**The machine may have drifted by a factor of {trust.drift:.2f}** between "
                    "identical cells: verdicts were judged on intervals widened by it.",
                )
            )
    else:
        blocks.append(("p", "No configuration was measured twice in this reproduction, so no A/A check ran."))
    blocks.extend(_speed_blocks(trust))
    return blocks


def _speed_blocks(trust: Trust) -> list[Block]:
    measured = {run_id: index for run_id, index in trust.speed_by_run.items() if index is not None}
    if not measured:
        return [("p", "The runs carry no machine-speed calibration (taken before it existed).")]
    rows = [
        {
            "run": f"#{record['run_id']}",
            "experiment": record.get("preset"),
            "cell": record.get("cell_label"),
            "round": record.get("repeat_index"),
            "machine speed": f"{measured[record['run_id']]:.2f}",
        }
        for record in trust.records
        if record.get("run_id") in measured
    ]
    text = (
        "Machine speed: a fixed CPU kernel timed before and after each run's load, as an index (1.00 = the "
        "median run; 0.80 = 20% slower), for the record only: it flags no run. It times the moments before and "
        "after the load, and this machine switches by itself between speeds about 1.5x apart, so on the stored "
        "contention runs no threshold on it told runs beside a CPU hog from quiet ones (the lab's record "
        "docs/records/2026-12-03-machine-speed-index-as-a-busy-flag.md). Runs that shared the machine are "
        "flagged by other processes' CPU during the load."
    )
    return [("p", text), ("table", pd.DataFrame(rows)), ("chart", "machine_speed", "Machine speed by run")]


def speed_chart(trust: Trust) -> Figure:
    """The machine-speed index of each run in the order they ran (Plotly)."""
    runs = [r for r in trust.records if r.get("run_id") is not None and trust.speed_by_run.get(r["run_id"]) is not None]
    figure = new_figure(
        scatter(
            x=[f"#{r['run_id']}" for r in runs],
            y=[trust.speed_by_run[r["run_id"]] for r in runs],
            mode="markers+lines",
            text=[f"{r.get('preset')} {r.get('cell_label')}" for r in runs],
            name="machine speed",
        )
    )
    figure.update_layout(
        title="Machine speed by run (1.0 = median)",
        xaxis_title="run, in the order taken",
        yaxis_title="machine-speed index",
        showlegend=False,
    )
    return figure
