"""The sequential intervals of --until-decided: the spending adds up, looks widen, and the
coverage over 2,000 simulated experiments looked at after every round stays at least 94%."""

from __future__ import annotations

import math

import pytest

from lab.analysis.sequential import (
    ALPHA,
    MAX_ROUNDS,
    look_alpha,
    simulate_coverage,
    spent_alpha,
    widen_interval,
    widening,
)


def test_the_looks_spend_at_most_the_whole_five_percent() -> None:
    for first_look in (2, 3, 5):
        shares = [look_alpha(n, first_look=first_look) for n in range(1, MAX_ROUNDS + 3)]
        assert sum(shares) == pytest.approx(ALPHA)
        assert all(share >= 0 for share in shares)
    assert spent_alpha(MAX_ROUNDS) == pytest.approx(ALPHA)
    assert spent_alpha(0) == 0


def test_no_look_before_the_first_or_past_the_horizon() -> None:
    assert look_alpha(2, first_look=3) == 0
    assert look_alpha(MAX_ROUNDS + 1, first_look=3) == 0
    assert math.isinf(widening(2, first_look=3))
    assert math.isinf(widening(1, first_look=1))


def test_every_look_is_wider_than_the_fixed_interval() -> None:
    factors = [widening(n, first_look=3) for n in range(3, MAX_ROUNDS + 1)]
    assert all(factor > 1 for factor in factors)
    assert factors[0] == pytest.approx(2.15, abs=0.01)  # 3 rounds: t(1 - 0.0115/2, 2) / t(0.975, 2)


def test_widening_stretches_the_log_distances() -> None:
    low, high = widen_interval(0.7, 0.56, 0.86, 2.0)
    assert low == pytest.approx(0.7 * (0.56 / 0.7) ** 2)
    assert high == pytest.approx(0.7 * (0.86 / 0.7) ** 2)
    assert widen_interval(0.7, 0.56, 0.86, 1.0) == (0.56, 0.86)
    assert widen_interval(0.7, 0.56, 0.86, math.inf) == (0.0, math.inf)


@pytest.mark.parametrize("heavy_tails", [False, True])
def test_coverage_over_2000_experiments_looked_at_after_every_round(heavy_tails: bool) -> None:
    coverage = simulate_coverage(experiments=2000, max_rounds=20, first_look=2, heavy_tails=heavy_tails, random_seed=7)
    assert coverage.sequential >= 0.94
    assert coverage.stopped_covered >= 0.94
    # The plain t interval looked at after every round loses its guarantee: that is the point.
    assert coverage.fixed_t < 0.90
