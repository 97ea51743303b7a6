"""A semantic run's figures from the proxy's own metrics (its registry's text, parsed as a run
parses it), the Wilson interval of the false-hit rate, the Pareto front of a sweep, and the
settings a spec hands the proxy."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from lab.analysis.semantic_cache import (
    ThresholdPoint,
    histogram_quantile,
    pareto_front,
    run_semantic_figures,
    semantic_figures,
    semantic_part,
    threshold_point,
)
from lab.analysis.statistics import proportion_interval
from lab.measurement.results import RunResults
from lab.measurement.server_metrics import delta, parse_metrics_text
from lab.specs.schema import CacheSpec, ExperimentSpec, RunSpec
from services.cache_proxy.metrics import ProxyMetrics
from services.cache_proxy.semantic import SemanticMetrics
from services.catalog import build_service, cache_proxy_config


def proxy_snapshot(metrics: ProxyMetrics) -> dict[str, float]:
    return parse_metrics_text(generate_latest(metrics.registry).decode())


def test_a_runs_figures_come_from_the_change_of_the_proxys_metrics() -> None:
    proxy = ProxyMetrics()
    semantic = SemanticMetrics(proxy.registry)
    proxy.misses.inc(5)  # counted before the run: not the run's
    before = proxy_snapshot(proxy)
    for _ in range(6):
        proxy.hits.inc()
        proxy.exact_hits.inc()
    for _ in range(4):
        proxy.hits.inc()
        semantic.hits.inc()
        semantic.hit_path.observe(0.012)
    proxy.misses.inc(10)
    semantic.lookups.inc(14)
    for seconds in [0.011] * 9 + [0.09]:
        semantic.miss_path.observe(seconds)
    semantic.verified.inc(4)
    semantic.false_hits.inc(1)
    semantic.answer_similarity.observe(0.9)
    semantic.answer_similarity.observe(0.7)
    change = delta(before, proxy_snapshot(proxy))
    figures = semantic_figures(change)
    assert figures is not None
    part = semantic_part(change)  # what the store keeps of them
    assert part is not None and part.semantic_cache_hit_rate == figures.semantic_hit_rate
    assert part.semantic_cache_false_hit_rate_ci95_high == figures.false_hit_rate_ci95_high
    assert RunResults.from_parts(part).semantic_cache_added_miss_p99_ms == figures.miss_path_added_p99_ms
    assert (figures.lookups, figures.exact_hits, figures.semantic_hits) == (20, 6, 4)
    assert figures.exact_hit_rate == pytest.approx(0.3) and figures.semantic_hit_rate == pytest.approx(0.2)
    assert figures.hit_rate == pytest.approx(0.5)
    assert figures.false_hit_rate == pytest.approx(0.25)
    assert figures.false_hit_rate_ci95_low == pytest.approx(0.0456, abs=1e-3)
    assert figures.false_hit_rate_ci95_high == pytest.approx(0.6994, abs=1e-3)
    assert figures.answer_similarity_mean == pytest.approx(0.8)
    assert figures.answer_mismatches == 1 and figures.answer_mismatch_rate == pytest.approx(0.5)  # the 0.7 one
    assert 10 < figures.hit_path_added_p50_ms < 15  # type: ignore[operator]  # measured here, so not None
    assert 10 < figures.miss_path_added_p50_ms < 15  # type: ignore[operator]  # measured here, so not None
    assert 75 < figures.miss_path_added_p99_ms <= 100  # type: ignore[operator]  # the one slow miss


def test_no_semantic_figures_without_the_tier_or_a_baseline() -> None:
    exact_only = proxy_snapshot(ProxyMetrics())
    assert semantic_figures(delta(exact_only, exact_only)) is None
    assert semantic_part(delta(exact_only, exact_only)) is None
    assert semantic_figures({}) is None
    assert run_semantic_figures(None) is None
    assert run_semantic_figures({"before": {}, "after": {"cache_proxy": exact_only}}) is None


def test_histogram_quantile_interpolates_within_a_bucket() -> None:
    change = {'h_bucket{le="0.01"}': 50.0, 'h_bucket{le="0.02"}': 100.0, 'h_bucket{le="+Inf"}': 100.0}
    assert histogram_quantile(change, "h", 0.5) == pytest.approx(0.01)
    assert histogram_quantile(change, "h", 0.75) == pytest.approx(0.015)
    assert histogram_quantile({**change, 'h_bucket{le="+Inf"}': 200.0}, "h", 0.99) == pytest.approx(0.02)
    assert histogram_quantile({'h_bucket{le="+Inf"}': 0.0}, "h", 0.5) is None


def test_the_wilson_interval_is_not_empty_at_zero_and_stays_in_zero_one() -> None:
    none_false = proportion_interval(0, 40)
    assert none_false.mean == 0 and none_false.ci95_low == 0
    assert none_false.ci95_high == pytest.approx(0.0876, abs=1e-3)
    all_false = proportion_interval(5, 5)
    assert all_false.ci95_high == 1 and 0.5 < all_false.ci95_low < 0.6  # type: ignore[operator]  # measured here, so not None
    assert proportion_interval(0, 0).mean is None


def point(hit_rate: float, false_hit_rate: float | None, label: str = "") -> ThresholdPoint:
    return ThresholdPoint(0, label, "semantic", 0.9, hit_rate, false_hit_rate, None, None, None)


def test_the_pareto_front_keeps_the_thresholds_nothing_beats_on_both() -> None:
    points = [
        point(0.0, 0.0, "off"),
        point(0.1, 0.0, "exact"),
        point(0.4, 0.1, "0.95"),
        point(0.3, 0.2, "0.90 dominated"),
        point(0.6, 0.5, "0.80"),
        point(0.5, None, "unverified"),
    ]
    assert [found.label for found in pareto_front(points)] == ["exact", "0.95", "0.80"]


def test_exact_and_off_runs_are_points_without_false_hits() -> None:
    exact = threshold_point(1, "exact", {"tier": "exact"}, None, 0.2)
    off = threshold_point(2, "off", {"tier": "off"}, None, None)
    assert exact is not None and (exact.hit_rate, exact.false_hit_rate, exact.similarity) == (0.2, 0.0, None)
    assert off is not None and (off.hit_rate, off.false_hit_rate) == (0.0, 0.0)
    assert threshold_point(3, "semantic", {"tier": "semantic", "similarity": 0.9}, None, 0.5) is None


def test_a_spec_hands_the_proxy_its_tier_and_a_section_axis_labels_its_cells(tmp_path) -> None:
    assert CacheSpec().tier_settings() == {"tier": "exact"}
    semantic = CacheSpec(tier="semantic", similarity=0.85, verify_fraction=0.5)
    config = cache_proxy_config(upstream_url="http://up", redis_url="redis://r", **semantic.tier_settings())
    argv = build_service("proxy", config, log_path=tmp_path / "log", port=1).argv
    assert argv[argv.index("--cache") + 1] == "semantic"
    assert argv[argv.index("--similarity") + 1] == "0.85"
    assert argv[argv.index("--semantic-verify-fraction") + 1] == "0.5"
    exact_argv = build_service("proxy", cache_proxy_config(upstream_url="u", redis_url="r"), log_path=tmp_path).argv
    assert "--similarity" not in exact_argv and exact_argv[exact_argv.index("--cache") + 1] == "exact"
    with pytest.raises(ValueError, match="similarity"):
        CacheSpec(tier="semantic", similarity=1.5)
    experiment = ExperimentSpec(
        name="sweep",
        base=RunSpec(backend="naive+cache"),
        grid={"cache": [{"tier": "off"}, {"tier": "semantic", "similarity": 0.9}]},
    )
    assert [label for label, _ in experiment.distinct_cells()] == ["tier=off", "tier=semantic similarity=0.9"]


def test_the_tradeoff_chart_and_table_name_every_run_and_the_front(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lab.report import charts
    from lab.report.semantic_cache import table_lines, tradeoff_figure, write_semantic_report

    monkeypatch.setattr(charts, "write_pngs", lambda found, folder: ({}, "no browser in the fast tier"))
    proxy = ProxyMetrics()
    semantic = SemanticMetrics(proxy.registry)
    before = proxy_snapshot(proxy)
    proxy.hits.inc()
    semantic.hits.inc()
    proxy.misses.inc()
    semantic.lookups.inc()
    semantic.verified.inc()
    semantic.false_hits.inc()
    server_metrics = {"before": {"cache_proxy": before}, "after": {"cache_proxy": proxy_snapshot(proxy)}}
    points = [
        threshold_point(1, "off", {"tier": "off"}, None, None),
        threshold_point(2, "exact", {"tier": "exact"}, None, 0.1),
        threshold_point(3, "0.8", {"tier": "semantic", "similarity": 0.8}, server_metrics, None),
    ]
    chosen = [found for found in points if found is not None]
    figure = tradeoff_figure(chosen)
    assert [trace.name for trace in figure.data] == [
        "cache off",
        "exact cache",
        "semantic, by threshold",
        "Pareto front",
    ]
    assert list(figure.data[2].text) == ["semantic 0.8"] and list(figure.data[2].y) == [100.0]
    assert tradeoff_figure(chosen[:2]) is None  # nothing semantic: no chart
    table = table_lines(chosen)
    assert table[-1].startswith(
        "| 3 | semantic 0.8 | 50.0% | 0 | 1 | 1 | 1 | 100.0% | 20.7% to 100.0% | n/a | n/a | n/a |"
    )
    keyed = table_lines(chosen, source="points.json")[-1]
    assert "<!-- src: points.json key=[run_id=3].run_id;[run_id=3].similarity;[run_id=3].figures.hit_rate;" in keyed
    folder = tmp_path / "report"
    written = write_semantic_report(chosen, folder, heading="Sweep", notes=["A note."])
    readme = (folder / "README.md").read_text()
    assert readme.startswith("# Sweep\n\nA note.") and "<!-- src:" in readme
    assert "(no chart: no browser in the fast tier)" in readme
    assert folder / "points.json" in written


def test_two_workloads_are_drawn_and_tabulated_apart_each_with_its_front(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lab.report import charts
    from lab.report.semantic_cache import table_lines, tradeoff_figure, write_semantic_report

    monkeypatch.setattr(charts, "write_pngs", lambda found, folder: ({}, "no browser in the fast tier"))
    points = [
        ThresholdPoint(1, "exact", "exact", None, 0.0, 0.0, 0.0, 0.0, None, "paraphrases"),
        ThresholdPoint(2, "0.8", "semantic", 0.8, 0.6, 0.5, 0.3, 0.7, None, "paraphrases"),
        ThresholdPoint(3, "exact", "exact", None, 0.0, 0.0, 0.0, 0.0, None, "sharegpt-chat"),
        ThresholdPoint(4, "0.8", "semantic", 0.8, 0.05, 1.0, 0.2, 1.0, None, "sharegpt-chat"),
    ]
    names = [trace.name for trace in tradeoff_figure(points).data]
    assert names == [
        "paraphrases: exact cache",
        "paraphrases: semantic, by threshold",
        "paraphrases: Pareto front",
        "sharegpt-chat: exact cache",
        "sharegpt-chat: semantic, by threshold",
        "sharegpt-chat: Pareto front",
    ]
    table = table_lines(points)
    assert table[0].startswith("| run | workload | tier | hit rate |") and table[1].count("---") == 17
    assert table[-1].startswith("| 4 | sharegpt-chat | semantic 0.8 | 5.0% |")
    assert table_lines(points[:2])[0].startswith("| run | tier |")  # one workload: no column for it
    write_semantic_report(points, tmp_path, heading="Two workloads")
    readme = (tmp_path / "README.md").read_text()
    assert "paraphrases: exact, semantic 0.8; sharegpt-chat: exact, semantic 0.8." in readme
