"""Plotly behind typed helpers: the lab's one import of plotly.

plotly ships no type information, so mypy skips it (pyproject.toml) and every name from it is
``Any``. The report and the pages' charts from :mod:`lab.report` make their figures here:
:func:`new_figure`, :func:`scatter` and :func:`bar` give a :class:`Figure` and :class:`Trace`, the
protocols of the calls the lab makes on them, and :func:`write_images` writes PNG copies. A
trace's properties are Plotly's keyword arguments (``x``, ``y``, ``mode``, ``marker``...),
``object`` here: Plotly checks them when it builds the trace and raises on an unknown one.
plotly is imported on first use: it is heavy, and the CLI starts without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Trace(Protocol):
    """A Plotly trace (``go.Scatter``, ``go.Bar``): its properties set when made, or by :meth:`update`."""

    def update(self, **properties: object) -> object: ...


class Figure(Protocol):
    """A Plotly figure (``go.Figure``), as far as the lab calls it; each call returns the figure."""

    def add_trace(self, trace: Trace) -> object: ...

    def update_layout(self, **layout: object) -> object: ...

    def update_yaxes(self, **axis: object) -> object: ...

    def add_hline(self, *, y: float, **line: object) -> object: ...

    def add_vline(self, *, x: float, **line: object) -> object: ...

    def to_html(self, **options: object) -> str: ...


def new_figure(*traces: Trace) -> Figure:
    """An empty figure, or one of ``traces``."""
    import plotly.graph_objects as go

    figure: Figure = go.Figure(list(traces)) if traces else go.Figure()
    return figure


def scatter(**properties: object) -> Trace:
    """A scatter trace (points, lines or both) of Plotly's ``properties``."""
    import plotly.graph_objects as go

    trace: Trace = go.Scatter(**properties)
    return trace


def bar(**properties: object) -> Trace:
    """A bar trace of Plotly's ``properties``."""
    import plotly.graph_objects as go

    trace: Trace = go.Bar(**properties)
    return trace


def write_images(figures: Sequence[Figure], paths: Sequence[str], *, width: int, height: int) -> None:
    """PNG copies of ``figures`` at ``paths`` (kaleido and a local Chromium); raises what kaleido raises."""
    import plotly.io as pio

    pio.write_images(list(figures), list(paths), width=width, height=height)
