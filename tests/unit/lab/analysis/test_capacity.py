"""Capacity search against synthetic backends: monotone, noisy and saturating."""

import random

import pytest

from lab.analysis.capacity_search import CapacityError, ProbeResult, SearchBounds, conservative_pass, search_capacity


def monotone_backend(capacity: float, seconds_per_load: float = 1.0, limit_s: float = 10.0):
    """Latency grows with load; the SLO (latency <= limit) holds up to ``capacity``."""

    def probe(load: float) -> ProbeResult:
        latency = limit_s * load / capacity
        return ProbeResult(
            load, latency <= limit_s, throughput=min(load, capacity * 2) / seconds_per_load, slo_figure_s=latency
        )

    return probe


@pytest.mark.parametrize("capacity", [1, 3, 7, 20, 33, 100])
def test_finds_the_boundary_of_a_monotone_backend(capacity):
    result = search_capacity(monotone_backend(capacity), SearchBounds(min_load=1, max_load=256, max_probes=30))
    assert result.capacity_load == capacity
    assert result.lowest_failing_load == capacity + 1
    assert [p.load for p in result.bounding_probes] == [capacity, capacity + 1]


def test_rate_search_within_resolution():
    result = search_capacity(
        monotone_backend(13.7), SearchBounds(min_load=0.5, max_load=100, max_probes=40, resolution=0.25, integer=False)
    )
    assert 13.7 - 0.25 <= result.capacity_load <= 13.7
    assert result.lowest_failing_load - result.capacity_load <= 0.25


def test_budget_is_never_exceeded():
    for budget in (1, 2, 3, 5):
        calls = []

        def probe(load, calls=calls):
            calls.append(load)
            return monotone_backend(50)(load)

        result = search_capacity(probe, SearchBounds(min_load=1, max_load=1000, max_probes=budget))
        assert len(calls) == len(result.probes) <= budget
        assert "budget" in result.stop_reason or budget >= 7


def test_minimum_load_failing_gives_no_capacity():
    result = search_capacity(monotone_backend(0.5), SearchBounds(min_load=1, max_load=64, max_probes=10))
    assert result.capacity_load is None and "minimum load" in result.stop_reason
    assert len(result.probes) == 1


def test_maximum_load_passing_stops_there():
    result = search_capacity(monotone_backend(1000), SearchBounds(min_load=1, max_load=40, max_probes=20))
    assert result.capacity_load == 40 and "maximum load" in result.stop_reason


def test_stops_on_saturation():
    def probe(load):
        # Throughput flat beyond 4 while latency keeps growing: saturated, SLO generous.
        return ProbeResult(load, True, throughput=min(load, 4.0), slo_figure_s=load * 0.1)

    result = search_capacity(probe, SearchBounds(min_load=1, max_load=1024, max_probes=30))
    assert result.saturated and "saturated" in result.stop_reason
    assert result.capacity_load == 8  # 4 -> 8 gained nothing
    assert len(result.probes) == 4


def test_noisy_backend_with_conservative_repeats_stays_below_the_true_boundary():
    rng = random.Random(7)
    true_capacity = 24

    def probe(load):
        samples = [10.0 * load / true_capacity * rng.uniform(0.9, 1.1) for _ in range(3)]
        passed, figure = conservative_pass(samples, 10.0)
        return ProbeResult(load, passed, throughput=load, slo_figure_s=figure)

    result = search_capacity(probe, SearchBounds(min_load=1, max_load=128, max_probes=30))
    assert result.capacity_load is not None
    assert 18 <= result.capacity_load <= true_capacity + 2


def test_conservative_pass_uses_the_upper_confidence_bound():
    assert conservative_pass([9.0], 10.0) == (True, 9.0)
    passed, figure = conservative_pass([9.0, 9.9, 9.5], 10.0)
    assert not passed and figure > 10.0  # the mean passes, the interval does not
    assert conservative_pass([], 10.0) == (False, None)


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"min_load": 8, "max_load": 4, "max_probes": 5}, "above the maximum"),
        ({"min_load": 1, "max_load": 4, "max_probes": 0}, "at least 1"),
        ({"min_load": 0, "max_load": 4, "max_probes": 3}, "above 0"),
        ({"min_load": 1, "max_load": 4, "max_probes": 3, "growth_factor": 1}, "growth factor"),
        ({"min_load": 1.5, "max_load": 4, "max_probes": 3}, "whole numbers"),
        ({"min_load": 1, "max_load": float("inf"), "max_probes": 3}, "finite"),
    ],
)
def test_impossible_bounds_are_refused(kwargs, fragment):
    with pytest.raises(CapacityError, match=fragment):
        SearchBounds(**kwargs)
