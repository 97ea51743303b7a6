"""Capacity searches in tables and charts: the search as probes, the Pareto chart, and the
report section "What the seed did not ask" (capacity of each stack under an SLO).

Pure functions over a search's stored state (``Experiment.capacity``, see
:mod:`lab.queue.capacity_plan`) and run records (:class:`lab.analysis.compare.RunRecord`); the pages and
the report both draw from here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from db.figures import figure_by
from lab.measurement.results import RunResults
from lab.report.plotly_figures import Figure, new_figure, scatter
from lab.report.render import Block

SECTION_TITLE = "What the seed did not ask"
PARETO_STEM = "capacity_pareto"
SEARCH_STEM = "capacity_search"
PASS_COLOUR, FAIL_COLOUR = "#00a86b", "#d62728"
# A Pareto point's throughput and a capacity entry's goodput, under their figures' names.
THROUGHPUT = figure_by(lambda f: f.req_per_s).name
THROUGHPUT_AT_CAPACITY = figure_by(lambda f: f.goodput_req_per_s).name


def _load_of(record: Mapping[str, Any]) -> float | None:
    return record.get("arrival_rate_per_s") if record.get("load_kind") == "constant-arrival-rate" else record.get("vus")


def capacity_table(state: dict[str, Any]) -> pd.DataFrame:
    """One row per backend: its capacity, the goodput there, the probes and why the search stopped."""
    unit = state.get("unit", "")
    rows = []
    for backend, entry in state.get("backends", {}).items():
        capacity = entry.get("capacity_load")
        goodput = entry.get(THROUGHPUT_AT_CAPACITY)
        rows.append(
            {
                "backend": backend,
                f"capacity ({unit})": "none (the smallest load broke the SLO)"
                if capacity is None and entry.get("state") == "done"
                else ("–" if capacity is None else f"{capacity:g}"),
                "goodput (req/s)": "–" if goodput is None else f"{goodput:.3g}",
                "probes": len(entry.get("probes", [])),
                "bounding runs": ", ".join(f"#{i}" for i in entry.get("bounding_run_ids", [])) or "–",
                "search": entry.get("stop_reason") or entry.get("state", ""),
            }
        )
    return pd.DataFrame(rows)


def search_figure(state: dict[str, Any]) -> Figure:
    """Each probe a point: load against the SLO figure, green when it passed, red when not;
    the SLO limit as a dashed line."""
    figure_name = state.get("slo_figure") or "SLO figure"
    fig = new_figure()
    symbols = ("circle", "square", "diamond", "triangle-up", "x", "star")
    for index, (backend, entry) in enumerate(state.get("backends", {}).items()):
        probes = [p for p in entry.get("probes", []) if p.get("slo_figure_s") is not None]
        if not probes:
            continue
        fig.add_trace(
            scatter(
                name=backend,
                x=[p["load"] for p in probes],
                y=[p["slo_figure_s"] for p in probes],
                mode="markers+text",
                text=[str(i + 1) for i in range(len(probes))],
                textposition="top center",
                marker=dict(
                    size=12,
                    symbol=symbols[index % len(symbols)],
                    color=[PASS_COLOUR if p["passed"] else FAIL_COLOUR for p in probes],
                ),
                hovertext=[
                    f"{backend} probe {i + 1}: {'pass' if p['passed'] else 'fail'}; {p.get('note', '')}"
                    for i, p in enumerate(probes)
                ],
            )
        )
    if state.get("slo_threshold_s") is not None:
        fig.add_hline(
            y=state["slo_threshold_s"],
            line_dash="dash",
            line_color="#555",
            annotation_text=f"limit {state['slo_threshold_s']:g} s",
        )
    fig.update_layout(
        title=f"Capacity search: {figure_name} by load (green pass, red fail; numbers: probe order)",
        xaxis_title=f"load ({state.get('unit', '')})",
        yaxis_title=f"{figure_name}",
        template="plotly_white",
    )
    return fig


def pareto_points(
    records: Sequence[Mapping[str, Any]], figure: str = "latency_p95_s", *, series: str = "backend"
) -> dict[str, list[dict[str, Any]]]:
    """Per backend (or per ``series``, a record field naming the runs one curve may join), its
    finished runs' (SLO figure, throughput) in load order, repeats averaged."""
    grouped: dict[str, dict[float, list[Mapping[str, Any]]]] = {}
    for record in records:
        load = _load_of(record)
        if (
            record.get("status") != "done"
            or load is None
            or record.get(figure) is None
            or RunResults.of_record(record).req_per_s is None
        ):
            continue
        grouped.setdefault(str(record.get(series) or record["backend"]), {}).setdefault(float(load), []).append(record)
    points: dict[str, list[dict[str, Any]]] = {}
    for backend, by_load in grouped.items():
        points[backend] = [
            {
                "load": load,
                figure: sum(r[figure] for r in rows) / len(rows),
                THROUGHPUT: sum(RunResults.of_record(r).req_per_s or 0.0 for r in rows) / len(rows),
                "runs": [r["run_id"] for r in rows],
            }
            for load, rows in sorted(by_load.items())
        ]
    return points


def pareto_figure(
    records: Sequence[Mapping[str, Any]],
    figure: str = "latency_p95_s",
    limit_s: float | None = None,
    *,
    series: str = "backend",
) -> Figure:
    """Throughput against the SLO latency figure, one curve per backend (or ``series``) across its loads."""
    fig = new_figure()
    for backend, points in pareto_points(records, figure, series=series).items():
        fig.add_trace(
            scatter(
                name=backend,
                x=[p[figure] for p in points],
                y=[p[THROUGHPUT] for p in points],
                mode="lines+markers+text",
                text=[f"{p['load']:g}" for p in points],
                textposition="top center",
                hovertext=[
                    f"{backend} at load {p['load']:g}: runs {', '.join(f'#{i}' for i in p['runs'])}" for p in points
                ],
            )
        )
    if limit_s is not None:
        fig.add_vline(x=limit_s, line_dash="dash", line_color="#555", annotation_text=f"limit {limit_s:g} s")
    fig.update_layout(
        title=f"Throughput against {figure} (labels: load)",
        xaxis_title=f"{figure}",
        yaxis_title="requests per second",
        template="plotly_white",
    )
    return fig


def capacity_blocks(state: dict[str, Any], experiment_id: int, scale_note: str = "") -> list[Block]:
    """The report section for a finished capacity search (blocks of lab.report.render)."""
    plan = state.get("plan", {})
    blocks: list[Block] = [
        ("h", 2, SECTION_TITLE),
        (
            "p",
            "The seed measured fixed loads; a lab member asks how much load each stack holds before "
            f"latency breaks a target. Capacity search #{experiment_id} answers it for the SLO "
            f"{', '.join(plan.get('slo', []))}: the load grows geometrically until the SLO fails or the "
            "backend saturates, then bisects; every probe is a stored run."
            + (f" Scale: {scale_note}." if scale_note else ""),
        ),
        ("table", capacity_table(state)),
        ("chart", PARETO_STEM, "Throughput against the SLO figure, per backend"),
        ("chart", SEARCH_STEM, "The probes of the search"),
    ]
    return blocks


CAPACITY_PRESET = "capacity-seed"


@dataclass(frozen=True)
class CapacitySection:
    """A capacity search as the report shows it: its stored state and its probe runs' records."""

    experiment_id: int
    state: dict[str, Any]
    records: list[dict[str, Any]]
    scale_note: str = ""

    @property
    def slo_figure(self) -> str:
        return self.state.get("slo_figure") or "latency_p95_s"

    def charts(self) -> dict[str, Figure]:
        return {
            PARETO_STEM: pareto_figure(self.records, self.slo_figure, self.state.get("slo_threshold_s")),
            SEARCH_STEM: search_figure(self.state),
        }

    def blocks(self) -> list[Block]:
        return capacity_blocks(self.state, self.experiment_id, self.scale_note)


def latest_capacity_section(*, session: Any, preset: str = CAPACITY_PRESET) -> CapacitySection | None:
    """The newest stored search of ``preset`` (None when there is none)."""
    from sqlalchemy import select

    from db import store
    from db.models import Experiment
    from lab.report.publish import published_record, scrub_tree

    experiment = session.scalar(
        select(Experiment)
        .where(Experiment.preset == preset, Experiment.capacity.is_not(None))
        .order_by(Experiment.id.desc())
        .limit(1)
    )
    if experiment is None:
        return None
    runs = store.list_runs(session=session, experiment_ids=[experiment.id], newest_first=False)
    scale_note = "quick scale" if experiment.scale == "quick" else ""
    return CapacitySection(
        experiment.id, scrub_tree(dict(experiment.capacity)), [published_record(run) for run in runs], scale_note
    )
