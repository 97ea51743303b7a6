"""Rounds until decided: after the planned rounds, one more round at a time of only the cells
whose figures are still undecided, until none is, the budget is spent or the rounds reach the
sequential method's horizon (lab/analysis/sequential.py, whose widened intervals make looking
after every round safe).

Pure: what is undecided is given (the report's own verdicts for a reproduction,
:func:`undecided_comparisons` for any other experiment); the worker's long-experiment driver
(lab/queue/long_experiments.py) asks :func:`next_cells` after every round what to queue next.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lab.analysis.sequential import MAX_ROUNDS, widen_interval, widening

DECIDED = "every figure decided"
BUDGET_SPENT = "budget spent"
HORIZON = "round limit reached"


@dataclass(frozen=True)
class Undecided:
    """A figure still undecided: its name, the cells whose runs it rests on and its rounds so far."""

    key: str
    cells: frozenset[Hashable]
    rounds: int


def next_cells(
    undecided: Sequence[Undecided],
    *,
    elapsed_s: float,
    budget_s: float,
    round_s: Callable[[frozenset[Hashable]], float],
    max_rounds: int = MAX_ROUNDS,
) -> tuple[frozenset[Hashable], str | None]:
    """The cells of the next round, or (empty, why not): none undecided, the next round would
    pass the budget (by ``round_s``, its predicted seconds), or every undecided figure already
    has ``max_rounds`` rounds."""
    open_ = [item for item in undecided if item.cells and item.rounds < max_rounds]
    if not undecided:
        return frozenset(), DECIDED
    if not open_:
        return frozenset(), HORIZON
    cells = frozenset(cell for item in open_ for cell in item.cells)
    if elapsed_s + round_s(cells) > budget_s:
        return frozenset(), BUDGET_SPENT
    return cells, None


def undecided_comparisons(
    rows: Sequence[Mapping[str, Any]], *, first_look: int, precision: float, max_rounds: int = MAX_ROUNDS
) -> list[Undecided]:
    """The compared ratios (:func:`lab.analysis.compare.grid_comparisons` rows) whose interval,
    widened for a look after every round, neither excludes 1 nor is within +-``precision``."""
    found = []
    for row in rows:
        ratio, low, high = row.get("interval_ratio"), row.get("ratio_ci95_low"), row.get("ratio_ci95_high")
        rounds = int(row.get("rounds") or 0)
        if ratio is None:
            continue
        if low is not None and high is not None and rounds >= 2:
            low, high = widen_interval(ratio, low, high, widening(rounds, first_look=first_look, max_rounds=max_rounds))
            if low > 1 or high < 1 or (high - low) / 2 < precision * ratio:
                continue
        found.append(Undecided(f"{row.get('figure')}: {row['cell']}", frozenset(row.get("cell_labels") or ()), rounds))
    return found
