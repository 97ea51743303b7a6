"""Cost: what a million output tokens cost at a machine's price per hour and a throughput, per cell."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

from db.figures import figure_by
from lab.analysis.aggregation import CELL_KEYS, aggregate


def cost_per_million_output_tokens(output_tok_per_s: float | None, price_per_hour: float) -> float | None:
    """What a million output tokens cost at ``price_per_hour`` for the machine, at this throughput."""
    if not output_tok_per_s or output_tok_per_s <= 0:
        return None
    return price_per_hour / (output_tok_per_s * 3600) * 1_000_000


def cost_table(records: Sequence[Mapping[str, Any]], price_per_hour: float) -> pd.DataFrame:
    """Per cell (:data:`~lab.analysis.aggregation.CELL_KEYS`, so two workloads or two loads are never
    one row): mean output tok/s and what a million output tokens cost (machine names). Only the cell
    settings whose values differ between the rows are shown, with the backend: one the rows share
    says nothing here (the page lists what differs) and would push the cost off a narrow screen."""
    import pandas as pd  # on first use: most commands never build a table (0.5 s of every CLI start)

    output = figure_by(lambda f: f.output_tok_per_s).name
    rows = aggregate(records, CELL_KEYS, (output,))
    frame = pd.DataFrame(
        [
            {
                **{key: row[key] for key in CELL_KEYS},
                "n": row["n"],
                output: row[output],
                "cost_per_million_output_tokens": cost_per_million_output_tokens(row[output], price_per_hour),
            }
            for row in rows
        ],
        columns=[*CELL_KEYS, "n", output, "cost_per_million_output_tokens"],
    )
    shown = [
        key
        for key in CELL_KEYS
        if frame[key].notna().any() and (key == "backend" or frame[key].astype(str).nunique(dropna=False) > 1)
    ]
    frame = frame[[*shown, "n", output, "cost_per_million_output_tokens"]]
    sort_keys = [key for key in ("backend", "workload", "vus") if key in frame]
    return frame.sort_values(sort_keys, na_position="last").reset_index(drop=True)
