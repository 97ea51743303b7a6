"""Capacity on the pages: the "Find capacity" form, a search on Run detail, Pareto on Compare."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from db import store
from db.models import RunStatus
from tests.support.app_pages import PAGES, open_page, texts, widget
from tests.support.seeded_lab import SeededLab


def test_find_capacity_refuses_impossible_bounds_and_launches_a_search(
    seed_lab: SeededLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pages.view.capacity_form as capacity_view

    started: list[int] = []
    monkeypatch.setattr(capacity_view, "start_search_in_background", started.append)
    app = open_page(PAGES["New experiment"])
    widget(app.number_input, "capacity_min").set_value(8.0).run()
    widget(app.number_input, "capacity_max").set_value(2.0).run()
    assert "the minimum load 8 is above the maximum 2" in texts(app)
    assert not [b for b in app.button if b.key == "capacity_launch"]
    widget(app.number_input, "capacity_max").set_value(16.0).run()
    # At most 12 probes with a vLLM start-up: over ten minutes, so it asks first.
    assert "12 runs, about " in texts(app) and widget(app.button, "capacity_launch").disabled
    widget(app.checkbox, "capacity_launch_confirm").check().run()
    widget(app.button, "capacity_launch").click().run()
    assert not app.exception, [item.value for item in app.exception]
    assert [heading.value for heading in app.title] == ["Runs"]
    with Session(seed_lab.engine) as session:
        experiment = store.get_experiment(session=session, experiment_id=started[0])
        assert experiment is not None and experiment.capacity is not None
        assert experiment.capacity["plan"]["backends"] == ["naive", "vllm"]
        assert experiment.capacity["plan"]["min_load"] == 8


def test_run_detail_shows_the_search_and_compare_the_pareto_chart(seed_lab: SeededLab) -> None:
    from lab.queue.capacity_plan import CapacityPlan, create_experiment
    from lab.queue.experiments import run_columns

    plan = CapacityPlan.model_validate({"backends": ["naive"], "slo": ["latency_p95_s<=10"], "max_load": 8})
    with Session(seed_lab.engine) as session:
        experiment_id = create_experiment(session=session, plan=plan)
        [run_id] = store.add_experiment_runs(
            session=session,
            experiment_id=experiment_id,
            runs=[{"cell_label": "naive vus=1", "repeat_index": 0, **run_columns(plan.probe_spec("naive", 1))}],
        )
    store.set_run_status(engine=seed_lab.engine, run_id=run_id, status=RunStatus.DONE, req_per_s=0.2, latency_p95_s=6.0)
    state = {
        **plan.model_dump(),
        "plan": plan.model_dump(mode="json"),
        "unit": "VUs",
        "slo_figure": "latency_p95_s",
        "slo_threshold_s": 10.0,
        "state": "running",
        "backends": {
            "naive": {
                "state": "searching",
                "probes": [
                    {
                        "load": 1,
                        "passed": True,
                        "throughput": 0.2,
                        "slo_figure_s": 6.0,
                        "goodput_req_per_s": 0.2,
                        "run_ids": [run_id],
                        "note": "latency_p95_s 6 s <= 10 s",
                    }
                ],
            }
        },
    }
    store.set_experiment_capacity(engine=seed_lab.engine, experiment_id=experiment_id, capacity=state)
    app = open_page(PAGES["Run detail"], run=str(run_id))
    assert f"Capacity search #{experiment_id} (running)" in texts(app)
    assert any("The probes: green passed the SLO" in str(chart.proto.spec) for chart in app.get("plotly_chart"))
    # A search between two probes is followed live on Runs, like a run.
    app = open_page(PAGES["Runs"])
    assert f"Live: capacity search #{experiment_id}** · running · 1 probe so far" in texts(app)
    app = open_page(PAGES["Compare"])
    assert "Throughput against latency (Pareto)" in texts(app)
    pareto = [str(chart.proto.spec) for chart in app.get("plotly_chart") if chart.key == "compare_pareto_chart"]
    assert "against p95 latency (labels: the load)" in pareto[0] and "p95 latency (s)" in pareto[0]
    assert "latency_p95_s" not in pareto[0]
