"""Round order: every cell once per round, drawn from a recorded seed, groups kept together."""

import itertools
from collections import Counter

import pytest

from lab.queue.round_order import BLOCKS, INTERLEAVED, plan_runs

CELLS = ["naive 1", "naive 8", "vllm 1", "vllm 8", "vllm 32"]


def backend(cell: str) -> str:
    return cell.split()[0]


def test_interleaved_runs_every_cell_once_per_round() -> None:
    plan = plan_runs(CELLS, repeats=4, order=INTERLEAVED, order_seed=42, group_of=backend)
    assert len(plan) == 20
    for round_index in range(4):
        in_round = [queued.cell for queued in plan if queued.round_index == round_index]
        assert sorted(in_round) == sorted(CELLS)
    # Rounds follow one another: a round's runs are all queued before the next round's.
    assert [queued.round_index for queued in plan] == sorted(queued.round_index for queued in plan)
    assert [queued.position for queued in plan] == list(range(20))


def test_the_order_is_drawn_from_the_seed_and_replays() -> None:
    first = [
        (q.cell, q.round_index) for q in plan_runs(CELLS, repeats=6, order=INTERLEAVED, order_seed=1, group_of=backend)
    ]
    again = [
        (q.cell, q.round_index) for q in plan_runs(CELLS, repeats=6, order=INTERLEAVED, order_seed=1, group_of=backend)
    ]
    other = [
        (q.cell, q.round_index) for q in plan_runs(CELLS, repeats=6, order=INTERLEAVED, order_seed=2, group_of=backend)
    ]
    assert first == again
    assert first != other
    # Not the same order every round: the draw differs between rounds.
    orders = {tuple(cell for cell, r in first if r == round_index) for round_index in range(6)}
    assert len(orders) > 1


def test_cells_sharing_a_backend_stay_together_within_a_round() -> None:
    plan = plan_runs(CELLS, repeats=5, order=INTERLEAVED, order_seed=3, group_of=backend)
    for round_index in range(5):
        backends = [backend(q.cell) for q in plan if q.round_index == round_index]
        switches = sum(1 for a, b in itertools.pairwise(backends) if a != b)
        assert switches == 1


def test_the_backend_still_loaded_goes_first() -> None:
    for seed in range(10):
        plan = plan_runs(CELLS, repeats=2, order=INTERLEAVED, order_seed=seed, group_of=backend, first_group="vllm")
        assert backend(plan[0].cell) == "vllm"


def test_blocks_keep_a_cells_repeats_together() -> None:
    plan = plan_runs(CELLS, repeats=3, order=BLOCKS, order_seed=0, group_of=backend, first_group="vllm")
    assert [q.cell for q in plan][:3] == ["vllm 1"] * 3
    assert Counter(q.cell for q in plan) == {cell: 3 for cell in CELLS}
    assert [q.round_index for q in plan][:3] == [0, 1, 2]


def test_an_unknown_order_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown run order 'random'"):
        plan_runs(CELLS, repeats=1, order="random", order_seed=0)
