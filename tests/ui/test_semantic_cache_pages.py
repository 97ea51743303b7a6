"""The semantic cache on the pages: Compare draws its trade (hit rate against false hits) when a
compared run ran the semantic tier, and nothing of it otherwise; Run detail shows a semantic run's
hit rates, false hits with their interval and added latency as tiles, and none for another run;
New experiment's grid form chooses the tier and queues a threshold sweep."""

from __future__ import annotations

import json

from prometheus_client import generate_latest
from sqlalchemy import update
from sqlalchemy.orm import Session

from db.models import Run
from lab.measurement.server_metrics import parse_metrics_text
from services.cache_proxy.metrics import ProxyMetrics
from services.cache_proxy.semantic import SemanticMetrics
from tests.support.app_pages import PAGES, open_page, runs_in_db, seen, widget
from tests.support.seeded_lab import SeededLab, add_done_run

SUBHEADER = "Semantic cache: hit rate against false hits (Pareto)"


def semantic_server_metrics() -> dict:
    """The proxy's snapshots around a load of 10 lookups: 2 exact hits, 4 semantic (all 4
    verified, 1 false), 4 misses."""
    proxy = ProxyMetrics()
    semantic = SemanticMetrics(proxy.registry)
    before = parse_metrics_text(generate_latest(proxy.registry).decode())
    for _ in range(2):
        proxy.hits.inc()
        proxy.exact_hits.inc()
    for _ in range(4):
        proxy.hits.inc()
        semantic.hits.inc()
        semantic.hit_path.observe(0.02)
    proxy.misses.inc(4)
    semantic.lookups.inc(8)
    semantic.verified.inc(4)
    semantic.false_hits.inc(1)
    after = parse_metrics_text(generate_latest(proxy.registry).decode())
    return {"before": {"cache_proxy": before}, "after": {"cache_proxy": after}}


def test_compare_draws_the_semantic_trade_only_with_a_semantic_run(seed_lab: SeededLab) -> None:
    exact = add_done_run(seed_lab.engine, vus=1, max_tokens=16, tok=16.0, p95=2.0)
    semantic = add_done_run(seed_lab.engine, vus=1, max_tokens=17, tok=16.0, p95=2.0)
    uncached = add_done_run(seed_lab.engine, vus=2, max_tokens=16, tok=20.0, p95=3.0)
    with Session(seed_lab.engine) as session:
        for run_id, cache, metrics, hit_rate in (
            (exact, {"tier": "exact"}, None, 0.2),
            (semantic, {"tier": "semantic", "similarity": 0.9}, semantic_server_metrics(), 0.6),
        ):
            spec = dict(session.get(Run, run_id).spec or {})  # type: ignore[union-attr]  # the run was just stored
            session.execute(
                update(Run)
                .where(Run.id == run_id)
                .values(spec={**spec, "cache": cache}, server_metrics=metrics, response_cache_hit_rate=hit_rate)
            )
        session.commit()
    app = open_page(PAGES["Compare"], runs=f"{exact},{semantic}")
    assert SUBHEADER in [header.value for header in app.subheader]
    (chart,) = [chart for chart in app.get("plotly_chart") if chart.key == "compare_semantic"]
    names = [trace["name"] for trace in json.loads(chart.proto.spec)["data"]]
    assert names[:2] == ["exact cache", "semantic, by threshold"] and names[-1] == "Pareto front"
    without = open_page(PAGES["Compare"], runs=f"{exact},{uncached}")
    headers = [header.value for header in without.subheader]
    assert "Charts" in headers and SUBHEADER not in headers


def test_run_detail_shows_a_semantic_runs_tiles_and_none_for_another(seed_lab: SeededLab) -> None:
    semantic = add_done_run(seed_lab.engine, vus=1, max_tokens=18, tok=16.0, p95=2.0)
    other = add_done_run(seed_lab.engine, vus=1, max_tokens=19, tok=16.0, p95=2.0)
    with Session(seed_lab.engine) as session:
        session.execute(
            update(Run)
            .where(Run.id == semantic)
            .values(
                response_cache_exact_hit_rate=0.2,
                semantic_cache_hit_rate=0.4,
                semantic_cache_verified_hits=4,
                semantic_cache_false_hit_rate=0.25,
                semantic_cache_false_hit_rate_ci95_low=0.046,
                semantic_cache_false_hit_rate_ci95_high=0.699,
                semantic_cache_added_hit_p50_ms=12.5,
                semantic_cache_added_miss_p50_ms=14.0,
            )
        )
        session.commit()
    tiles = {
        metric.label: (metric.value, metric.help) for metric in open_page(PAGES["Run detail"], run=str(semantic)).metric
    }
    assert tiles["exact cache hit"][0] == "20.0%" and tiles["semantic cache hit"][0] == "40.0%"
    value, help_text = tiles["semantic false hits"]
    assert value == "25.0%" and "Of 4 verified. 95% interval 4.6% to 69.9%." in (help_text or "")
    assert tiles["semantic added on a hit p50"][0] == "12.5 ms"
    others = [metric.label for metric in open_page(PAGES["Run detail"], run=str(other)).metric]
    assert others and "semantic cache hit" not in others


def test_the_grid_form_chooses_the_semantic_tier_and_queues_a_threshold_sweep(seed_lab: SeededLab) -> None:
    app = open_page(PAGES["New experiment"])
    assert "grid_similarity" not in [field.key for field in app.text_input]  # the exact tier: no threshold
    widget(app.multiselect, "grid_backends").set_value(["naive+cache"]).run()
    widget(app.selectbox, "grid_cache_tier").select("semantic").run()
    widget(app.text_input, "grid_similarity").input("0.8, 1.5").run()
    widget(app.text_input, "grid_name").input("ui semantic").run()
    before = len(runs_in_db(seed_lab))
    widget(app.button, "launch_grid").click().run()
    assert not app.exception
    assert "similarity thresholds must be above 0 and at most 1 (got 1.5)" in [seen(error.value) for error in app.error]
    assert len(runs_in_db(seed_lab)) == before
    widget(app.text_input, "grid_similarity").input("0.8, 0.95").run()
    widget(app.number_input, "grid_verify_fraction").set_value(1.0).run()
    widget(app.button, "launch_grid").click().run()
    assert not app.exception
    new = [run for run in runs_in_db(seed_lab) if run.experiment and run.experiment.name == "ui semantic"]
    assert sorted(run.spec["cache"]["similarity"] for run in new) == [0.8, 0.95]
    assert all(run.spec["cache"]["tier"] == "semantic" and run.spec["cache"]["verify_fraction"] == 1.0 for run in new)
    assert sorted(run.cell_label for run in new) == ["similarity=0.8", "similarity=0.95"]
