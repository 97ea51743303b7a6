"""The order in which an experiment's runs are queued: interleaved rounds or blocks.

A machine here can drift 2-3x within an hour. Run in blocks (every repeat of one cell, then
the next cell), a drift lands on one side of a comparison and passes for an effect. Run in
rounds, each round running every cell once in an order drawn from a recorded order seed
(randomised multiple interleaved trials, Abedi and Brecht, ICPE 2017), a drift falls on
every cell alike, and the i-th repeats of two cells, measured in the same round, pair.

Pure: the caller passes the cells and a key that says which cells share a started backend;
inside a round the cells that share one stay together (so a round restarts each backend at
most once) and the order of those groups, and of the cells within each, is drawn.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

Cell = TypeVar("Cell")

INTERLEAVED = "interleaved"
BLOCKS = "blocks"
ORDERS = (INTERLEAVED, BLOCKS)


@dataclass(frozen=True)
class QueuedRun(Generic[Cell]):
    """One run of the plan: its cell, its round (= repeat index) and its place in the queue."""

    cell: Cell
    round_index: int
    position: int


def draw_order_seed() -> int:
    """A fresh order seed for an experiment that names none (recorded with it, so the order replays)."""
    return random.SystemRandom().randrange(2**31)


def plan_runs(
    cells: Sequence[Cell],
    *,
    repeats: int,
    order: str,
    order_seed: int,
    group_of: Callable[[Cell], Hashable] = lambda cell: 0,
    first_group: Hashable | None = None,
) -> list[QueuedRun[Cell]]:
    """Every (cell, round) of the experiment in queue order.

    ``blocks``: cells grouped by ``group_of`` (``first_group``, the backend still loaded,
    first), each cell's repeats together. ``interleaved``: ``repeats`` rounds; in each, the
    groups in an order drawn from ``order_seed`` and the round, and the cells of a group in a drawn
    order; each cell appears exactly once per round.
    """
    if order not in ORDERS:
        raise ValueError(f"unknown run order {order!r}: use one of {', '.join(ORDERS)}")
    groups: dict[Hashable, list[Cell]] = {}
    for cell in cells:
        groups.setdefault(group_of(cell), []).append(cell)
    ordered_groups = sorted(groups, key=lambda group: group != first_group)  # stable otherwise
    planned: list[tuple[Cell, int]] = []
    if order == BLOCKS:
        planned = [(cell, r) for group in ordered_groups for cell in groups[group] for r in range(repeats)]
    else:
        for round_index in range(repeats):
            rng = random.Random(f"{order_seed}:{round_index}")
            round_groups = list(ordered_groups)
            rng.shuffle(round_groups)
            if round_index == 0 and first_group in groups:
                # The backend the queue ends with is still loaded: start with it.
                round_groups.remove(first_group)
                round_groups.insert(0, first_group)
            for group in round_groups:
                members = list(groups[group])
                rng.shuffle(members)
                planned += [(cell, round_index) for cell in members]
    return [QueuedRun(cell, round_index, position) for position, (cell, round_index) in enumerate(planned)]
