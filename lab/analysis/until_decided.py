"""Rounds until decided: after the planned rounds, one more round at a time of only the cells
whose figures are still undecided, until none is, the budget is spent or the rounds reach the
sequential method's horizon (lab/analysis/sequential.py, whose widened intervals make looking
after every round safe).

Pure: what is undecided comes from a ``look`` callable (the report's own verdicts for a
reproduction, :func:`undecided_comparisons` for any other experiment) and a round is run by a
``run_round`` callable, so the stopping logic is tested with fake rounds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class Outcome:
    """How the rounds ended: why, how many rounds were added, and what stayed undecided."""

    stop_reason: str
    rounds_added: int
    undecided: tuple[Undecided, ...] = ()
    cells_by_round: tuple[frozenset[Hashable], ...] = field(default_factory=tuple)


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


def run_until_decided(
    *,
    look: Callable[[], Sequence[Undecided]],
    run_round: Callable[[frozenset[Hashable]], None],
    round_s: Callable[[frozenset[Hashable]], float],
    budget_s: float,
    max_rounds: int = MAX_ROUNDS,
    clock: Callable[[], float] = time.monotonic,
) -> Outcome:
    """Look, run a round of the undecided cells, look again, until :func:`next_cells` says stop.
    ``budget_s`` counts from this call (the planned rounds are done before it)."""
    started = clock()
    rounds: list[frozenset[Hashable]] = []
    while True:
        undecided = tuple(look())
        cells, stop = next_cells(
            undecided, elapsed_s=clock() - started, budget_s=budget_s, round_s=round_s, max_rounds=max_rounds
        )
        if stop is not None:
            return Outcome(stop, len(rounds), undecided, tuple(rounds))
        run_round(cells)
        rounds.append(cells)


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
