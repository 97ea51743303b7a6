"""The adapted scale's predictions: which cells the seed's 60 s cannot measure here, and how long each runs."""

from __future__ import annotations

from lab.analysis.measurability import CellHistory, CellLoad, adapt, needs


def test_a_cache_that_cannot_fill_within_the_cap_keeps_the_seed_length_and_says_why() -> None:
    cell = CellLoad("backend=vllm+cache prompts=1000", 60, 32, CellHistory(1.2), 1000, CellHistory(0.3925))
    need = adapt(cell, max_cell_s=600)
    assert not need.lengthened and need.duration_s == 60
    assert "storing 1,000 answers takes at least 2,548 s at the direct 0.39 req/s" in need.sentence()
    assert "over the 600 s cap" in need.sentence() and need.sentence().startswith("60 s kept")


def test_a_cache_that_fills_within_the_cap_is_lengthened_with_a_margin() -> None:
    cell = CellLoad("backend=vllm+cache prompts=50", 60, 32, CellHistory(30.0), 50, CellHistory(0.39))
    need = adapt(cell)
    assert need.duration_s == 180  # 128 s x 1.25, rounded up to 30 s
    assert need.sentence().startswith("180 s instead of 60 s, because storing 50 answers takes at least 128 s")


def test_requests_longer_than_the_test_and_too_few_requests() -> None:
    naive_32 = CellLoad("backend=naive vus=32", 60, 32, CellHistory(0.094, 33.6))
    reasons = [why for _, why in needs(naive_32)]
    assert any("under 30" in why for why in reasons) and any("cuts the latency off" in why for why in reasons)
    need = adapt(naive_32, max_cell_s=600)
    assert need.duration_s == 420  # 30 requests at 0.094 req/s: 319 s x 1.25, rounded up
    assert need.over_cap and "a request takes about 340 s" in need.over_cap[0]


def test_a_cell_that_measures_is_left_alone_and_no_history_predicts_nothing() -> None:
    assert adapt(CellLoad("backend=vllm vus=1", 60, 1, CellHistory(2.0, 0.5))).sentence() == ""
    assert needs(CellLoad("backend=vllm vus=1", 60, 1, None)) == []


def test_the_cap_bounds_every_cell() -> None:
    need = adapt(CellLoad("slow", 60, 1, CellHistory(0.06)), max_cell_s=300)  # 30 requests need 500 s
    assert need.duration_s == 60 and "over the 300 s cap" in need.sentence()
