"""Rendering: a report is a list of blocks, written twice, as Markdown and as one
self-contained HTML page (Plotly's JavaScript inlined once; the lab runs offline)."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from lab.report.plotly_figures import Figure

# A report is a list of blocks, rendered twice: Markdown and HTML.
# ("h", level, text) | ("p", text) | ("table", DataFrame) | ("list", [text]) | ("chart", stem)

Block = tuple[Any, ...]


def _markdown_cell(value: Any) -> str:
    text = "–" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(frame: pd.DataFrame) -> str:
    """A GitHub Markdown table (no tabulate needed)."""
    if frame.empty:
        return "_no rows_"
    lines = ["| " + " | ".join(_markdown_cell(c) for c in frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(_markdown_cell(v) for v in row) + " |")
    return "\n".join(lines)


def render_markdown(blocks: list[Block], *, png_paths: dict[str, Path], output_dir: Path) -> str:
    out: list[str] = []
    for block in blocks:
        kind = block[0]
        if kind == "h":
            out.append("#" * block[1] + " " + block[2])
        elif kind == "p":
            out.append(block[1])
        elif kind == "table":
            out.append(markdown_table(block[1]))
        elif kind == "list":
            out.append("\n".join(f"- {item}" for item in block[1]))
        elif kind == "chart" and block[1] in png_paths:
            relative = png_paths[block[1]].relative_to(output_dir).as_posix()
            out.append(f"![{block[2]}]({relative})")
    return "\n\n".join(out) + "\n"


HTML_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
code { background: #f3f3f3; padding: 0 0.2em; }
"""


def render_html(blocks: list[Block], *, charts: Mapping[str, Figure], title: str) -> str:
    """One self-contained HTML page: Plotly's JavaScript inlined once, before the first chart."""
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{HTML_STYLE}</style></head><body>",
    ]
    plotly_included = False
    for block in blocks:
        kind = block[0]
        if kind == "h":
            out.append(f"<h{block[1]}>{html.escape(block[2])}</h{block[1]}>")
        elif kind == "p":
            out.append(f"<p>{html.escape(block[1])}</p>")
        elif kind == "table":
            out.append(
                block[1].to_html(index=False, escape=True, border=0, na_rep="–")
                if not block[1].empty
                else "<p><em>no rows</em></p>"
            )
        elif kind == "list":
            out.append("<ul>" + "".join(f"<li>{html.escape(item)}</li>" for item in block[1]) + "</ul>")
        elif kind == "chart" and block[1] in charts:
            out.append(
                charts[block[1]].to_html(
                    full_html=False, include_plotlyjs=not plotly_included, default_width="100%", default_height="480px"
                )
            )
            plotly_included = True
    out.append("</body></html>")
    return "\n".join(out)
