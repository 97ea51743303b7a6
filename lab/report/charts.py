"""The report's charts (Plotly: ours, mean and 95% CI, beside the seed's) and their PNG copies."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

from db.figures import figure_by
from lab.analysis.aggregation import aggregate, done_runs
from lab.analysis.seed import SEED_EXPERIMENTS, SERVER_NAMES
from lab.backends import SeedSetup, seed_setup_backend, seed_setup_of
from lab.report.plotly_figures import Figure, bar, new_figure, write_images
from lab.report.seed_tables import setup_name

logger = logging.getLogger(__name__)

PNG_WIDTH_PX = 900
PNG_HEIGHT_PX = 480
CHART_COLOURS = {
    "Transformers": "#636efa",
    "vLLM": "#ef553b",
    "vLLM direct": "#ef553b",
    "vLLM + Redis": "#00cc96",
    "ours": "#636efa",
    "seed": "#ab63fa",
}
CHROMIUM_PATHS = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")


class BarSeries(TypedDict, total=False):
    """One series of a bar chart: its name, x and y, the 95% CI's half widths (ours only) and
    whether it is the seed's (hatched)."""

    name: str
    x: list[Any]
    y: list[Any]
    ci95_half: list[float] | None
    seed: bool


def _bar(frame_rows: list[BarSeries], *, title: str, x_title: str, y_title: str, log_y: bool) -> Figure:
    fig = new_figure()
    for series in frame_rows:
        # The same colour for a server, ours solid and the seed's hatched; error bars (95% CI) on ours only.
        server = series["name"].rsplit(" (", 1)[0]
        fig.add_trace(
            bar(
                name=series["name"],
                x=[str(x) for x in series["x"]],
                y=series["y"],
                error_y=dict(type="data", array=series["ci95_half"], visible=True) if series.get("ci95_half") else None,
                marker_color=CHART_COLOURS.get(server),
                marker_pattern_shape="/" if series.get("seed") else "",
            )
        )
    fig.update_layout(
        title=title,
        barmode="group",
        xaxis_title=x_title,
        yaxis_title=y_title,
        template="plotly_white",
        legend_title_text="",
    )
    if log_y:
        fig.update_yaxes(type="log")
    return fig


def _series(
    rows: list[dict[str, Any]], *, x_key: str, figure: str, backend: str, name: str, seed: bool = False
) -> BarSeries | None:
    picked = sorted(
        (r for r in rows if r["backend"] == backend and r.get(figure) is not None), key=lambda r: r.get(x_key) or 0
    )
    if not picked:
        return None
    return {
        "name": name,
        "x": [r.get(x_key) for r in picked],
        "y": [r[figure] for r in picked],
        "ci95_half": [_half_width(r, figure) for r in picked] if not seed else None,
        "seed": seed,
    }


def _half_width(row: dict[str, Any], figure: str) -> float:
    """Half the 95% CI of an aggregated row's figure (0 without repeats)."""
    high = row.get(f"{figure}_ci95_high")
    return high - row[figure] if high is not None and row.get(figure) is not None else 0.0


def _setup_series(
    rows: list[dict[str, Any]], *, x_key: str, figure: str, names: dict[SeedSetup, str], seed: bool = False
) -> list[BarSeries]:
    """One series per seed set-up in ``names`` (ours, or with ``seed`` the seed's), named after it."""
    whose = "seed" if seed else "ours"
    series = [
        _series(
            rows, x_key=x_key, figure=figure, backend=seed_setup_backend(setup), name=f"{name} ({whose})", seed=seed
        )
        for setup, name in names.items()
    ]
    return [s for s in series if s]


def build_charts(records_by_preset: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, Figure]:
    """The report's Plotly figures, ours (mean, 95% CI) beside the seed's, keyed by file stem."""
    charts: dict[str, Figure] = {}
    exp1 = records_by_preset.get("seed-exp1", [])
    if done_runs(exp1):
        ours = aggregate(exp1, ("vus", "backend"), ("output_tok_per_s", "latency_avg_s"))
        seed = SEED_EXPERIMENTS["seed-exp1"].records()
        names = {SeedSetup.NAIVE: "Transformers", SeedSetup.VLLM: "vLLM"}
        for figure, stem, title, axis in (
            ("output_tok_per_s", "exp1_throughput", "Experiment 1: output throughput by VUs", "output tok/s (log)"),
            ("latency_avg_s", "exp1_latency", "Experiment 1: average latency by VUs", "seconds (log)"),
        ):
            series = [
                *_setup_series(ours, x_key="vus", figure=figure, names=names),
                *_setup_series(seed, x_key="vus", figure=figure, names=names, seed=True),
            ]
            charts[stem] = _bar(series, title=title, x_title="VUs", y_title=axis, log_y=True)
    exp2 = records_by_preset.get("seed-exp2", [])
    if done_runs(exp2):
        ours = aggregate(exp2, ("prompts", "backend"), ("req_per_s",))
        seed = SEED_EXPERIMENTS["seed-exp2"].records()
        names = {SeedSetup.VLLM: "vLLM direct", SeedSetup.VLLM_CACHE: "vLLM + Redis"}
        series = [
            *_setup_series(ours, x_key="prompts", figure="req_per_s", names=names),
            *_setup_series(seed, x_key="prompts", figure="req_per_s", names=names, seed=True),
        ]
        charts["exp2_req_per_s"] = _bar(
            series,
            title="Experiment 2: req/s with and without the cache",
            x_title="PROMPTS",
            y_title="req/s (log)",
            log_y=True,
        )
    exp3 = records_by_preset.get("seed-exp3", [])
    if done_runs(exp3):
        charts["exp3_req_per_s"] = _exp3_chart(exp3)
    return charts


def _exp3_chart(records: Sequence[Mapping[str, Any]]) -> Figure:
    """Experiment 3's req/s per server, ours in the seed's set-up order (others after), beside the seed's."""
    order = list(SeedSetup)

    def position(row: dict[str, Any]) -> int:
        setup = seed_setup_of(row["backend"])
        return order.index(setup) if setup else len(order)

    throughput = figure_by(lambda f: f.req_per_s).name
    ours_rows = sorted(
        (r for r in aggregate(records, ("backend",), (throughput,)) if r[throughput] is not None), key=position
    )
    published = SEED_EXPERIMENTS["seed-exp3"].published
    series: list[BarSeries] = [
        {
            "name": "ours",
            "x": [setup_name(SERVER_NAMES, seed_setup_of(r["backend"]), r["backend"]) for r in ours_rows],
            "y": [r[throughput] for r in ours_rows],
            "ci95_half": [_half_width(r, throughput) for r in ours_rows],
        },
        {
            "name": "seed",
            "x": [SERVER_NAMES[row.setup] for row in published],
            "y": [row.req_per_s for row in published],
            "seed": True,
        },
    ]
    return _bar(
        series, title="Experiment 3: multi-turn chat req/s", x_title="server", y_title="req/s (log)", log_y=True
    )


def write_pngs(charts: dict[str, Figure], folder: Path) -> tuple[dict[str, Path], str | None]:
    """PNG copies of ``charts`` via kaleido and a local Chromium (never downloaded).

    Returns the paths written and, when none could be, why.
    """
    if not charts:
        return {}, None
    if "BROWSER_PATH" not in os.environ:
        local = next((path for path in CHROMIUM_PATHS if Path(path).is_file()), None)
        if local:
            os.environ["BROWSER_PATH"] = local  # choreographer (kaleido v1) reads it; nothing is fetched
    folder.mkdir(parents=True, exist_ok=True)
    paths = {stem: folder / f"{stem}.png" for stem in charts}
    try:
        write_images(list(charts.values()), [str(p) for p in paths.values()], width=PNG_WIDTH_PX, height=PNG_HEIGHT_PX)
    except Exception as error:
        logger.warning("PNG copies of the charts not written: %s", error)
        return {}, f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    return {stem: path for stem, path in paths.items() if path.is_file()}, None
