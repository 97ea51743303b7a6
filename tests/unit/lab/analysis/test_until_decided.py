"""Rounds until decided, with fake rounds driven as the long-experiment driver drives them: stop
when decided, when the next round would pass the budget, or at the round limit; only the
undecided figures' cells run again."""

from __future__ import annotations

from collections.abc import Hashable

from lab.analysis.until_decided import BUDGET_SPENT, DECIDED, HORIZON, Undecided, next_cells, undecided_comparisons


class FakeLab:
    """Figures that get decided after a given number of rounds of their cells; a fake clock."""

    def __init__(self, decided_after: dict[str, int], cells: dict[str, set[str]], round_cost_s: float = 100.0) -> None:
        self.decided_after, self.cells, self.round_cost_s = decided_after, cells, round_cost_s
        self.rounds = {key: 3 for key in decided_after}  # the planned rounds
        self.now_s = 0.0
        self.ran: list[frozenset[Hashable]] = []

    def look(self) -> list[Undecided]:
        return [
            Undecided(key, frozenset(self.cells[key]), self.rounds[key])
            for key, needed in self.decided_after.items()
            if self.rounds[key] < needed
        ]

    def run_round(self, cells: frozenset[Hashable]) -> None:
        self.ran.append(cells)
        self.now_s += self.round_cost_s
        for key, own in self.cells.items():
            if own <= cells:
                self.rounds[key] += 1

    def clock(self) -> float:
        return self.now_s


def _drive(lab: FakeLab, *, budget_s: float, max_rounds: int = 20) -> tuple[str, int, list[Undecided]]:
    """What the long-experiment driver does after every round: look, then queue next_cells' round."""
    added = 0
    while True:
        undecided = lab.look()
        cells, stop = next_cells(
            undecided,
            elapsed_s=lab.clock(),
            budget_s=budget_s,
            round_s=lambda _: lab.round_cost_s,
            max_rounds=max_rounds,
        )
        if stop is not None:
            return stop, added, undecided
        lab.run_round(cells)
        added += 1


def test_rounds_stop_when_every_figure_is_decided_and_rerun_only_undecided_cells() -> None:
    lab = FakeLab({"speedup": 5, "growth": 3}, {"speedup": {"naive@1", "vllm@1"}, "growth": {"vllm@1", "vllm@32"}})
    stop, added, undecided = _drive(lab, budget_s=7200)
    assert stop == DECIDED and added == 2
    assert lab.ran == [frozenset({"naive@1", "vllm@1"})] * 2  # vllm@32 (decided growth) never reran
    assert undecided == []


def test_rounds_stop_when_the_next_one_would_pass_the_budget() -> None:
    lab = FakeLab({"speedup": 50}, {"speedup": {"naive@1", "vllm@1"}}, round_cost_s=1000.0)
    stop, added, undecided = _drive(lab, budget_s=2500)
    assert stop == BUDGET_SPENT and added == 2
    assert [item.key for item in undecided] == ["speedup"] and undecided[0].rounds == 5


def test_rounds_stop_at_the_round_limit() -> None:
    lab = FakeLab({"speedup": 50}, {"speedup": {"naive@1"}}, round_cost_s=1.0)
    stop, added, _ = _drive(lab, budget_s=10**6, max_rounds=6)
    assert stop == HORIZON and added == 3 and lab.rounds["speedup"] == 6


def test_a_figure_no_cell_can_improve_stops_at_once() -> None:
    assert next_cells([], elapsed_s=0, budget_s=1, round_s=lambda c: 0.0) == (frozenset(), DECIDED)
    stuck = [Undecided("x", frozenset(), 3)]
    assert next_cells(stuck, elapsed_s=0, budget_s=100, round_s=lambda c: 0.0) == (frozenset(), HORIZON)


def _row(ratio: float, low: float, high: float, rounds: int) -> dict:
    return {
        "figure": "req_per_s",
        "cell": "vus 8 over vus 1",
        "interval_ratio": ratio,
        "ratio_ci95_low": low,
        "ratio_ci95_high": high,
        "rounds": rounds,
        "cell_labels": ["vus=1", "vus=8"],
    }


def test_a_comparison_is_decided_once_its_widened_interval_excludes_1_or_is_precise() -> None:
    far = _row(3.0, 2.8, 3.2, 5)  # widened about 2.1x: still far from 1
    near = _row(1.05, 0.95, 1.16, 5)  # spans 1 and +-10% once widened
    precise = _row(1.0, 0.99, 1.01, 5)  # spans 1 but within +-10% once widened
    undecided = undecided_comparisons([far, near, precise], first_look=3, precision=0.10)
    assert [(u.key, u.cells, u.rounds) for u in undecided] == [
        ("req_per_s: vus 8 over vus 1", frozenset({"vus=1", "vus=8"}), 5)
    ]
    # The plain interval of `near` excludes nothing either; a plain-excluding one may not once widened.
    edge = _row(1.12, 1.02, 1.23, 3)
    assert undecided_comparisons([edge], first_look=3, precision=0.01)
