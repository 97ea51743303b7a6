"""Compare draws the semantic cache's trade (hit rate against false hits) when a compared run ran
the semantic tier, and nothing of it otherwise."""

from __future__ import annotations

import json

from prometheus_client import generate_latest
from sqlalchemy import update
from sqlalchemy.orm import Session

from db.models import Run
from lab.measurement.server_metrics import parse_metrics_text
from services.cache_proxy.metrics import ProxyMetrics
from services.cache_proxy.semantic import SemanticMetrics
from tests.support.app_pages import PAGES, open_page
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
            spec = dict(session.get(Run, run_id).spec or {})  # type: ignore[union-attr]
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
