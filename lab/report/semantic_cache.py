"""The semantic-cache report: hit rate against false-hit rate per similarity threshold.

From the runs of a threshold sweep (the ``semantic-cache`` preset, or any runs with
``cache.tier`` semantic beside exact and off), :func:`sweep_points` reads each run's stored proxy
metrics (:mod:`lab.analysis.semantic_cache`); :func:`tradeoff_figure` draws every run as a point
(hit rate across, false-hit rate up, its Wilson interval as an error bar) with the Pareto front
joined, the exact cache and the cache off as the baselines; Compare shows it, and
:func:`write_semantic_report` writes it with its table into a folder (``README.md``,
``tradeoff.png``, ``points.json``): ``python -m lab semantic-report experiment:N --out DIR``.
Runs of two workloads (the preset's paraphrase trace and ShareGPT) are drawn side by side, each
workload in its colour with its own Pareto front, and the table gains a workload column.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from db.models import Run, RunStatus
from lab.analysis.semantic_cache import ANSWER_MISMATCH_BELOW, ThresholdPoint, pareto_front, threshold_point


def sweep_points(*, session: Session, run_ids: Sequence[int]) -> list[ThresholdPoint]:
    """The finished runs of ``run_ids`` as points of the trade (runs without the figures left out)."""
    runs = session.scalars(select(Run).where(Run.id.in_(list(run_ids)), Run.status == RunStatus.DONE)).all()
    points = []
    for run in sorted(runs, key=lambda run: run.id):
        cache = (run.spec or {}).get("cache") or {}
        workload = str(((run.spec or {}).get("workload") or {}).get("kind", ""))
        point = threshold_point(
            run.id,
            run.cell_label or f"run {run.id}",
            cache,
            run.server_metrics,
            run.response_cache_hit_rate,
            workload=workload,
        )
        if point is not None:
            points.append(point)
    return points


def experiment_run_ids(*, session: Session, experiment_id: int) -> list[int]:
    """The runs of one experiment."""
    return list(session.scalars(select(Run.id).where(Run.experiment_id == experiment_id)).all())


def _point_name(point: ThresholdPoint) -> str:
    return f"semantic {point.similarity:g}" if point.tier == "semantic" else point.tier


def _workloads(points: Sequence[ThresholdPoint]) -> list[str]:
    """The points' workloads in order of appearance."""
    return list(dict.fromkeys(point.workload for point in points))


# One colour a workload (plotly's first ones) when a chart has several.
WORKLOAD_COLOURS = ("#636efa", "#ef553b", "#00cc96", "#ab63fa")


def tradeoff_figure(
    points: Sequence[ThresholdPoint], *, title: str = "Semantic cache: hit rate against false hits"
) -> Any:
    """Every run as a point (hit rate, false-hit rate with its 95% Wilson interval), named by its
    tier and threshold, each semantic run also at its answer-mismatch rate; the Pareto front (of
    the false-hit rate) joined. None without a semantic run."""
    if not any(point.tier == "semantic" for point in points):
        return None
    import plotly.graph_objects as go

    figure = go.Figure()
    workloads = _workloads(points)
    for index, workload in enumerate(workloads):
        chosen = [point for point in points if point.workload == workload]
        prefix = f"{workload}: " if len(workloads) > 1 else ""
        colour = WORKLOAD_COLOURS[index % len(WORKLOAD_COLOURS)] if len(workloads) > 1 else None
        for trace in _workload_traces(chosen, prefix):
            if colour is not None:
                trace.update(marker_color=colour, line_color=colour)
            figure.add_trace(trace)
    figure.update_layout(
        title=title,
        xaxis_title="hit rate (% of requests looked up)",
        yaxis_title="false-hit rate (% of verified semantic hits)",
        legend={"orientation": "h", "y": -0.25},
        margin={"b": 120},
    )
    return figure


def _workload_traces(points: Sequence[ThresholdPoint], prefix: str) -> list[Any]:
    """One workload's traces: a trace a tier, the answer mismatches and the Pareto front, each
    name after ``prefix``."""
    import plotly.graph_objects as go

    traces = []
    for tier, symbol in (("off", "x"), ("exact", "square"), ("semantic", "circle")):
        chosen = [point for point in points if point.tier == tier and point.false_hit_rate is not None]
        if not chosen:
            continue
        traces.append(
            go.Scatter(
                x=[point.hit_rate * 100 for point in chosen],
                y=[(point.false_hit_rate or 0) * 100 for point in chosen],
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": [
                        ((point.false_hit_rate_ci95_high or 0) - (point.false_hit_rate or 0)) * 100 for point in chosen
                    ],
                    "arrayminus": [
                        ((point.false_hit_rate or 0) - (point.false_hit_rate_ci95_low or 0)) * 100 for point in chosen
                    ],
                },
                mode="markers+text",
                marker={"symbol": symbol, "size": 10},
                text=[_point_name(point) for point in chosen],
                textposition="top center",
                name=prefix + {"off": "cache off", "exact": "exact cache", "semantic": "semantic, by threshold"}[tier],
            )
        )
    semantic = [
        point for point in points if point.figures is not None and point.figures.answer_mismatch_rate is not None
    ]
    if semantic:
        traces.append(_mismatch_trace(semantic, prefix))
    front = pareto_front(points)
    traces.append(
        go.Scatter(
            x=[point.hit_rate * 100 for point in front],
            y=[(point.false_hit_rate or 0) * 100 for point in front],
            mode="lines",
            line={"dash": "dot"},
            name=f"{prefix}Pareto front",
        )
    )
    return traces


def _mismatch_trace(points: Sequence[ThresholdPoint], prefix: str = "") -> Any:
    """The softer reading, per semantic run: verified hits whose answers embed less than
    :data:`ANSWER_MISMATCH_BELOW` alike (hollow markers, with their Wilson interval)."""
    import plotly.graph_objects as go

    rates = [point.figures for point in points if point.figures is not None]
    return go.Scatter(
        x=[point.hit_rate * 100 for point in points],
        y=[(figures.answer_mismatch_rate or 0) * 100 for figures in rates],
        error_y={
            "type": "data",
            "symmetric": False,
            "array": [((f.answer_mismatch_rate_ci95_high or 0) - (f.answer_mismatch_rate or 0)) * 100 for f in rates],
            "arrayminus": [
                ((f.answer_mismatch_rate or 0) - (f.answer_mismatch_rate_ci95_low or 0)) * 100 for f in rates
            ],
        },
        mode="markers",
        marker={"symbol": "circle-open", "size": 10},
        name=f"{prefix}semantic: answers under {ANSWER_MISMATCH_BELOW:g} alike",
    )


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.1f}%"


def _milliseconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


# A cell: its text and the points.json paths of the numbers it shows, in order.
Cell = tuple[str, tuple[str, ...]]


def _share_cell(value: float | None, path: str) -> Cell:
    return ("n/a", ()) if value is None else (_percent(value), (path,))


def _number_cell(value: float | None, path: str, decimals: int) -> Cell:
    return ("n/a", ()) if value is None else (f"{value:.{decimals}f}", (path,))


def _interval_cell(low: float | None, high: float | None, path: str) -> Cell:
    if low is None or high is None:
        return ("n/a", ())
    return (f"{_percent(low)} to {_percent(high)}", (f"{path}_ci95_low", f"{path}_ci95_high"))


def _row_cells(point: ThresholdPoint) -> list[Cell]:
    """A point's cells (the figures' paths under ``[run_id=N]``)."""
    tier: Cell = (_point_name(point), (".similarity",) if point.tier == "semantic" else ())
    figures = point.figures
    if figures is None:
        return [(str(point.run_id), (".run_id",)), tier, _share_cell(point.hit_rate, ".hit_rate"), *[("", ())] * 13]
    return [
        (str(point.run_id), (".run_id",)),
        tier,
        _share_cell(figures.hit_rate, ".figures.hit_rate"),
        (str(figures.exact_hits), (".figures.exact_hits",)),
        (str(figures.semantic_hits), (".figures.semantic_hits",)),
        (str(figures.verified_hits), (".figures.verified_hits",)),
        (str(figures.false_hits), (".figures.false_hits",)),
        _share_cell(figures.false_hit_rate, ".figures.false_hit_rate"),
        _interval_cell(figures.false_hit_rate_ci95_low, figures.false_hit_rate_ci95_high, ".figures.false_hit_rate"),
        _number_cell(figures.answer_similarity_mean, ".figures.answer_similarity_mean", 3),
        _share_cell(figures.answer_mismatch_rate, ".figures.answer_mismatch_rate"),
        _interval_cell(
            figures.answer_mismatch_rate_ci95_low,
            figures.answer_mismatch_rate_ci95_high,
            ".figures.answer_mismatch_rate",
        ),
        _number_cell(figures.hit_path_added_p50_ms, ".figures.hit_path_added_p50_ms", 1),
        _number_cell(figures.hit_path_added_p99_ms, ".figures.hit_path_added_p99_ms", 1),
        _number_cell(figures.miss_path_added_p50_ms, ".figures.miss_path_added_p50_ms", 1),
        _number_cell(figures.miss_path_added_p99_ms, ".figures.miss_path_added_p99_ms", 1),
    ]


def table_lines(points: Sequence[ThresholdPoint], *, source: str | None = None) -> list[str]:
    """The points as a Markdown table: hit rates, false hits with their interval, added latency
    (and the workload, when the points have several). With ``source`` (points.json's path) each
    row ends in a pointer naming each number's value, which the documents' check reads back."""
    not_data = " <!-- not-data: column headings -->" if source else ""
    several = len(_workloads(points)) > 1
    lines = [
        f"| run | {'workload | ' if several else ''}tier | hit rate | exact hits | semantic hits | verified"
        " | false hits | false-hit rate | 95% interval"
        f" | answer similarity | answers under {ANSWER_MISMATCH_BELOW:g} alike | 95% interval"
        f" | added ms on a hit, p50 | p99 | added ms on a miss, p50 | p99{not_data} |",
        "|---|" + "---|" * (16 if several else 15),
    ]
    for point in points:
        cells = _row_cells(point)
        if several:
            cells.insert(1, (point.workload, ()))
        keys = ";".join(f"[run_id={point.run_id}]{path}" for _, paths in cells for path in paths)
        pointer = f" <!-- src: {source} key={keys} -->" if source else ""
        lines.append("| " + " | ".join(text for text, _ in cells) + pointer + " |")
    return lines


def write_semantic_report(
    points: Sequence[ThresholdPoint], folder: Path, *, heading: str, notes: Sequence[str] = ()
) -> list[Path]:
    """``README.md`` (the table and the chart), ``tradeoff.png`` and ``points.json`` in ``folder``."""
    from lab.report.charts import write_pngs

    folder.mkdir(parents=True, exist_ok=True)
    figure = tradeoff_figure(points)
    written, problem = write_pngs({"tradeoff": figure} if figure is not None else {}, folder)
    data = [{**asdict(point), "figures": asdict(point.figures) if point.figures else None} for point in points]
    (folder / "points.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    fronts = {
        workload: ", ".join(_point_name(point) for point in pareto_front(p for p in points if p.workload == workload))
        or "none"
        for workload in _workloads(points)
    }
    several = len(fronts) > 1
    front = "; ".join(f"{workload}: {names}" if several else names for workload, names in fronts.items()) or "none"
    source = folder / "points.json"
    if source.resolve().is_relative_to(Path.cwd()):  # the documents' check reads figures back from it
        source = source.resolve().relative_to(Path.cwd())
    lines = [
        f"# {heading}",
        "",
        *notes,
        "",
        *table_lines(points, source=source.as_posix()),
        "",
        f"On the Pareto front (no other run has both a higher hit rate and fewer false hits): {front}.",
        "",
        "![hit rate against false-hit rate](tradeoff.png)" if "tradeoff" in written else f"(no chart: {problem})",
        "",
        "Generated by `python -m lab semantic-report`; the points' data: `points.json`.",
    ]
    (folder / "README.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [folder / "README.md", folder / "points.json", *written.values()]
