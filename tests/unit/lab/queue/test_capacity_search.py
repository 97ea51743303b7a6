"""The capacity search experiment: orchestration over the store with a synthetic backend,
SLO evaluation from stored per-request figures, per-request extraction from k6's NDJSON,
and the bad inputs refused at launch."""

from __future__ import annotations

import json
from array import array
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from db import store
from db.models import Run, RunStatus, utc_now
from lab import cli
from lab.analysis import run_slo
from lab.analysis.capacity_search import CapacityError
from lab.analysis.slo import SloError, evaluate, parse_slo
from lab.context import LabContext
from lab.measurement import request_figures
from lab.measurement.k6_ndjson import RequestSamples
from lab.measurement.k6_ndjson_files import stream_request_samples
from lab.queue import submit as queue_submit
from lab.queue.capacity_plan import CapacityPlan, check_plan, create_experiment, decide_probe, run_search


def stored_capacity(session: Session, experiment_id: int) -> dict[str, Any]:
    """The capacity search's stored state of ``experiment_id``."""
    experiment = store.get_experiment(session=session, experiment_id=experiment_id)
    assert experiment is not None and experiment.capacity is not None
    return experiment.capacity


FIXTURE_NDJSON = Path(__file__).resolve().parents[3] / "fixtures" / "k6" / "number_story.ndjson"


def samples(
    latencies_s: list[float], ok: list[bool] | None = None, ttft_s: list[float] | None = None
) -> RequestSamples:
    ok = ok if ok is not None else [True] * len(latencies_s)
    return RequestSamples(
        array("f", latencies_s), bytearray(int(flag) for flag in ok), array("f", ttft_s or []), array("f")
    )


class QueueModel:
    """A synthetic backend standing in for the worker. With ``parallel`` set it serves that
    many requests at once (throughput flat beyond: saturation, latency queues); without, it
    batches: latency ``base_s * (1 + vus / 10)``, throughput still rising. ``wait`` plays the
    worker: it finishes the queued runs and stores their per-request figures."""

    def __init__(self, engine, *, parallel: int | None = None, base_s: float = 2.0) -> None:
        self.engine, self.parallel, self.base_s = engine, parallel, base_s
        self.waited: list[list[int]] = []

    def latency_s(self, vus: int) -> float:
        if self.parallel:
            return self.base_s * max(1.0, vus / self.parallel)
        return self.base_s * (1 + vus / 10)

    def wait(self, run_ids: list[int]) -> None:
        self.waited.append(list(run_ids))
        with Session(self.engine) as session:
            runs = store.list_runs(session=session, run_ids=run_ids)
            loads = {run.id: (run.vus, run.duration_s) for run in runs}
        for run_id, (vus, duration_s) in loads.items():
            assert vus is not None and duration_s is not None  # constant-VUs probes
            latency = self.latency_s(vus)
            count = max(1, int(duration_s * vus / latency))
            values = [latency * (0.9 + 0.2 * i / count) for i in range(count)]
            store.save_run_requests(engine=self.engine, run_id=run_id, **request_figures.encode(samples(values)))
            store.set_run_status(
                engine=self.engine,
                run_id=run_id,
                status=RunStatus.DONE,
                req_per_s=count / duration_s,
                measured_duration_s=duration_s,
            )


def external_plan(**overrides) -> CapacityPlan:
    data = {
        "backends": ["external"],
        "base": {"backend": "external", "target_url": "http://127.0.0.1:9"},
        "slo": ["latency_p95_s<=10"],
        "min_load": 1,
        "max_load": 64,
        "max_probes": 10,
        "probe_s": 30,
    }
    return CapacityPlan.model_validate({**data, **overrides})


def test_search_finds_the_boundary_and_stores_every_probe_in_one_experiment(engine) -> None:
    # Per-request latencies spread over +-10% of 2 s * (1 + vus/10): p95 = 1.09 x that <= 10 s up to 35 VUs.
    model = QueueModel(engine)
    plan = external_plan(max_probes=12)
    with Session(engine) as session:
        experiment_id = create_experiment(session=session, plan=plan)
    state = run_search(engine=engine, experiment_id=experiment_id, plan=plan, wait=model.wait)
    entry = state["backends"]["external"]
    assert entry["state"] == "done"
    assert entry["capacity_load"] == 35, entry["stop_reason"]
    assert entry["lowest_failing_load"] == entry["capacity_load"] + 1
    probe_run_ids = [run_id for probe in entry["probes"] for run_id in probe["run_ids"]]
    assert len(probe_run_ids) == len(entry["probes"]) <= plan.max_probes
    with Session(engine) as session:
        runs = store.list_runs(session=session, experiment_ids=[experiment_id])
        assert sorted(run.id for run in runs) == sorted(probe_run_ids)
        assert all(run.goodput_req_per_s is not None and run.slo_evaluated == "latency_p95_s<=10" for run in runs)
        stored = stored_capacity(session, experiment_id)
    assert stored["backends"]["external"]["capacity_load"] == entry["capacity_load"]
    assert set(entry["bounding_run_ids"]) <= set(probe_run_ids) and len(entry["bounding_run_ids"]) == 2
    # One probe queued at a time: the search decides each load from the previous one.
    assert all(len(batch) == 1 for batch in model.waited)


def test_a_saturated_backend_stops_the_growth_early(engine) -> None:
    # 4 requests at once: from 4 VUs on, more load only queues (throughput flat, latency up).
    model = QueueModel(engine, parallel=4)
    plan = external_plan()
    with Session(engine) as session:
        experiment_id = create_experiment(session=session, plan=plan)
    entry = run_search(engine=engine, experiment_id=experiment_id, plan=plan, wait=model.wait)["backends"]["external"]
    assert entry["saturated"] and entry["stop_reason"].startswith("saturated")
    assert [probe["load"] for probe in entry["probes"]] == [1, 2, 4, 8]


def test_the_search_state_is_stored_after_every_probe(engine) -> None:
    model = QueueModel(engine)
    plan = external_plan(max_probes=3)
    with Session(engine) as session:
        experiment_id = create_experiment(session=session, plan=plan)
    seen: list[int] = []

    def wait(run_ids: list[int]) -> None:
        with Session(engine) as session:
            state = stored_capacity(session, experiment_id)
        seen.append(len(state["backends"]["external"]["probes"]))
        model.wait(run_ids)

    run_search(engine=engine, experiment_id=experiment_id, plan=plan, wait=wait)
    assert seen == [0, 1, 2]


def test_repeats_decide_conservatively(engine) -> None:
    slo = parse_slo(["latency_p95_s<=10"])
    close = [
        evaluate(slo, request_figures.decode(**request_figures.encode(samples([v] * 20))), duration_s=10)
        for v in (8.0, 9.9)
    ]
    single_passed, _, _ = decide_probe(slo, close[:1])
    both_passed, deciding, note = decide_probe(slo, close)
    assert single_passed
    # Mean 8.95 s is within the limit, the upper end of its 95% interval is not.
    assert not both_passed and deciding is not None and deciding > 10 and ">" in note


def test_a_failed_probe_run_stops_that_backend_with_its_reason(engine) -> None:
    plan = external_plan()
    with Session(engine) as session:
        experiment_id = create_experiment(session=session, plan=plan)

    def wait(run_ids: list[int]) -> None:
        for run_id in run_ids:
            store.set_run_status(engine=engine, run_id=run_id, status=RunStatus.FAILED, reason="backend never ready")

    state = run_search(engine=engine, experiment_id=experiment_id, plan=plan, wait=wait)
    entry = state["backends"]["external"]
    assert entry["state"] == "failed" and "backend never ready" in entry["stop_reason"]


def test_a_probe_whose_load_ran_but_no_request_finished_fails_the_slo(engine) -> None:
    plan = external_plan(max_probes=3)
    with Session(engine) as session:
        experiment_id = create_experiment(session=session, plan=plan)

    def wait(run_ids: list[int]) -> None:
        for run_id in run_ids:
            store.set_run_status(
                engine=engine,
                run_id=run_id,
                status=RunStatus.FAILED,
                load_started_at=utc_now(),
                reason="no request completed successfully (0 failed, 1 still in flight at the end)",
            )

    entry = run_search(engine=engine, experiment_id=experiment_id, plan=plan, wait=wait)["backends"]["external"]
    assert entry["state"] == "done" and entry["capacity_load"] is None
    assert "still in flight" in entry["probes"][0]["note"] and not entry["probes"][0]["passed"]


def test_probes_let_in_flight_requests_finish_within_the_latency_limit() -> None:
    plan = external_plan(
        slo=["latency_p95_s<=45", "failure_rate<=0.01"],
        base={"backend": "external", "target_url": "http://127.0.0.1:9", "load": {"graceful_stop_s": 15}},
    )
    spec = plan.probe_spec("external", 3)
    assert spec.load.graceful_stop_s == 45 and spec.load.vus == 3 and spec.load.duration_s == 30


def test_a_stopped_search_is_stored_as_interrupted(engine) -> None:
    plan = external_plan()
    with Session(engine) as session:
        experiment_id = create_experiment(session=session, plan=plan)

    def wait(run_ids: list[int]) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_search(engine=engine, experiment_id=experiment_id, plan=plan, wait=wait)
    with Session(engine) as session:
        state = stored_capacity(session, experiment_id)
    assert state["state"] == "interrupted" and state["backends"]["external"]["state"] == "interrupted"


def test_slo_evaluation_of_a_stored_run_matches_hand_computed_goodput(engine) -> None:
    with Session(engine) as session:
        experiment_id = create_experiment(session=session, plan=external_plan())
        [run_id] = store.add_experiment_runs(
            session=session,
            experiment_id=experiment_id,
            runs=[
                {
                    "spec": {},
                    "backend": "external",
                    "model": "m",
                    "workload": "number-story",
                    "load_kind": "constant-vus",
                    "vus": 1,
                    "duration_s": 10.0,
                    "max_tokens": 8,
                    "random_seed": 1,
                }
            ],
        )
    # 10 requests in 10 s: 6 within 5 s, 2 slower, 2 failed -> goodput 0.6 req/s, attainment 60%.
    figures = samples([1, 2, 3, 4, 4.5, 5, 6, 7, 0.1, 0.1], ok=[True] * 8 + [False] * 2)
    store.save_run_requests(engine=engine, run_id=run_id, **request_figures.encode(figures))
    store.set_run_status(engine=engine, run_id=run_id, status=RunStatus.DONE, measured_duration_s=10.0)
    with Session(engine) as session:
        evaluation = run_slo.evaluate_run(session=session, run_id=run_id, slo=parse_slo(["latency_max_s<=5"]))
    assert evaluation.requests_total == 10 and evaluation.requests_good == 6
    assert evaluation.goodput_req_per_s == pytest.approx(0.6)
    assert evaluation.attainment == pytest.approx(0.6)
    assert not evaluation.passed


def test_stored_figures_are_compact_and_round_trip() -> None:
    values = [0.5 + (i % 997) / 100 for i in range(100_000)]
    columns = request_figures.encode(samples(values, ttft_s=[0.1] * 100_000))
    assert len(columns["latency_s"]) + len(columns["ok"]) + len(columns["ttft_s"]) < 100_000 * 5
    figures = request_figures.decode(**columns)
    assert figures.latency_s[123] == pytest.approx(values[123], rel=1e-6)
    assert figures.ttft_s[5] == pytest.approx(0.1) and len(figures.tpot_s) == 0


def test_per_request_samples_from_k6_ndjson(tmp_path: Path) -> None:
    plain = stream_request_samples(FIXTURE_NDJSON)
    durations = []
    for line in FIXTURE_NDJSON.read_text().splitlines():
        record = json.loads(line)
        tags = record.get("data", {}).get("tags") or {}
        if (
            record.get("metric") == "http_req_duration"
            and record["type"] == "Point"
            and tags.get("lab_request") == "chat"
        ):
            durations.append((record["data"]["value"] / 1000, tags.get("expected_response") == "true"))
    assert len(plain) == len(durations) > 0
    assert [bool(flag) for flag in plain.ok] == [ok for _, ok in durations]
    assert plain.latency_s[0] == pytest.approx(durations[0][0], rel=1e-6)
    assert len(plain.ttft_s) == 0
    # A streamed run: lab_ttft / lab_tpot Trend points (ms) of the same requests.
    streamed = tmp_path / "streamed.ndjson"
    extra = []
    for index in range(len(durations)):
        for metric, value in (("lab_ttft", 100 + index), ("lab_tpot", 20.5)):
            extra.append(
                json.dumps(
                    {
                        "metric": metric,
                        "type": "Point",
                        "data": {
                            "time": "2026-11-29T08:27:40.1Z",
                            "value": value,
                            "tags": {"lab_request": "chat", "scenario": "default"},
                        },
                    },
                    separators=(",", ":"),
                )
            )
    streamed.write_text(FIXTURE_NDJSON.read_text() + "\n".join(extra) + "\n")
    result = stream_request_samples(streamed)
    assert len(result.ttft_s) == len(durations) and result.ttft_s[1] == pytest.approx(0.101)
    assert result.tpot_s[0] == pytest.approx(0.0205)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--backend", "naive", "--backend", "vlm"], "unknown backend 'vlm'"),
        (["--backend", "naive", "--min", "8", "--max", "2"], "the minimum load 8 is above the maximum 2"),
        (["--backend", "naive", "--max-probes", "0"], "the probe budget must be at least 1"),
        (["--backend", "naive", "--slo", "ttft_p95_s=1"], "only streamed runs measure"),
        (["--backend", "naive", "--slo", "latency_p95=10"], "is not understood"),
        (["--backend", "external"], "need --target-url"),
        (["--backend", "naive", "--min", "1.5"], "VU bounds must be whole numbers"),
        (["--preset", "capacity-seed", "--max-probes", "0"], "the probe budget must be at least 1"),
        (["--preset", "nope"], "unknown capacity preset 'nope'"),
        ([], "give --backend and --slo"),
    ],
)
def test_bad_capacity_input_is_refused_at_launch_with_one_line(argv, message, capsys, tmp_path, monkeypatch) -> None:
    if "--slo" not in argv and "--preset" not in argv and argv:
        argv = [*argv, "--slo", "latency_p95_s=10"]
    assert cli.main(["capacity", *argv, "--quick"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_an_slo_on_stream_figures_is_allowed_when_the_workload_streams() -> None:
    plan = external_plan(slo=["ttft_p95_s<=1"])
    with pytest.raises(SloError):
        check_plan(plan)
    plan.base.workload.stream = True
    check_plan(plan)


def test_runs_slo_cli_evaluates_a_stored_run(engine, capsys, monkeypatch) -> None:
    with Session(engine) as session:
        [run_id] = store.add_experiment_runs(
            session=session,
            experiment_id=None,  # type: ignore[arg-type]  # a run outside any experiment, as `lab runs slo` may read
            runs=[
                {
                    "spec": {},
                    "backend": "external",
                    "model": "m",
                    "workload": "number-story",
                    "load_kind": "constant-vus",
                    "vus": 1,
                    "duration_s": 4.0,
                    "max_tokens": 8,
                    "random_seed": 1,
                }
            ],
        )
    store.save_run_requests(engine=engine, run_id=run_id, **request_figures.encode(samples([1, 2, 3, 20])))
    store.set_run_status(engine=engine, run_id=run_id, status=RunStatus.DONE, measured_duration_s=4.0)
    monkeypatch.setattr(LabContext, "engine", engine)
    assert cli.main(["runs", "slo", str(run_id), "--slo", "latency_p50_s=10", "--json", "--save"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["passed"] and result["requests_good"] == 3 and result["goodput_req_per_s"] == pytest.approx(0.75)
    with Session(engine) as session:
        assert session.get_one(Run, run_id).slo_attainment == pytest.approx(0.75)
    assert cli.main(["runs", "slo", str(run_id + 1), "--slo", "latency_p50_s=10"]) == 2
    assert "no run with id" in capsys.readouterr().err


def test_bounds_error_type() -> None:
    with pytest.raises(CapacityError):
        check_plan(external_plan(min_load=0))


def test_the_report_section_shows_the_three_capacities_and_the_pareto_chart(tmp_path: Path) -> None:
    from datetime import datetime

    from lab.report import write_report
    from lab.report.capacity_section import SECTION_TITLE, CapacitySection, pareto_points

    def record(run_id: int, backend: str, vus: int, p95: float, rate: float) -> dict:
        return {
            "run_id": run_id,
            "backend": backend,
            "vus": vus,
            "load_kind": "constant-vus",
            "status": "done",
            "latency_p95_s": p95,
            "req_per_s": rate,
        }

    records = [
        record(1, "naive", 1, 12.0, 0.1),
        record(2, "vllm", 1, 6.0, 0.2),
        record(3, "vllm", 2, 7.0, 0.35),
        record(4, "vllm+cache", 16, 0.1, 300.0),
        record(5, "vllm", 2, 9.0, 0.25),
    ]
    state = {
        "plan": {"slo": ["latency_p95_s<=10"]},
        "unit": "VUs",
        "slo_figure": "latency_p95_s",
        "slo_threshold_s": 10.0,
        "state": "done",
        "backends": {
            "naive": {
                "state": "done",
                "capacity_load": None,
                "probes": [{"load": 1, "passed": False, "slo_figure_s": 12.0}],
                "stop_reason": "the minimum load 1 already broke the SLO",
            },
            "vllm": {
                "state": "done",
                "capacity_load": 2,
                "goodput_req_per_s": 0.3,
                "bounding_run_ids": [3, 5],
                "probes": [],
                "stop_reason": "probe budget spent",
            },
            "vllm+cache": {
                "state": "done",
                "capacity_load": 16,
                "goodput_req_per_s": 300.0,
                "probes": [],
                "stop_reason": "the maximum load 16 met the SLO",
            },
        },
    }
    # Repeats at one load are averaged into one point of the backend's curve.
    assert pareto_points(records)["vllm"][1] == {"load": 2.0, "latency_p95_s": 8.0, "req_per_s": 0.3, "runs": [3, 5]}
    written = write_report(
        records_by_preset={},
        experiments_meta={},
        environment={},
        output_dir=tmp_path,
        generated_at=datetime(2026, 12, 1, tzinfo=UTC),
        write_png=False,
        capacity=CapacitySection(7, state, records),
    )
    markdown = written["README.md"].read_text()
    section = markdown[markdown.index(SECTION_TITLE) :]
    assert "none (the smallest load broke the SLO)" in section and "| vllm | 2 | 0.3 |" in section
    assert "| vllm+cache | 16 | 300 |" in section and "#3, #5" in section
    assert "Throughput against latency_p95_s" in written["report.html"].read_text()


def test_a_search_stored_by_the_pages_runs_from_the_cli(engine, capsys, monkeypatch) -> None:
    model = QueueModel(engine)
    plan = external_plan(max_load=4, max_probes=3)
    with Session(engine) as session:
        experiment_id = create_experiment(session=session, plan=plan)

    class Waiter:
        def __init__(self, **_: object) -> None:
            self.wait = model.wait

        def __enter__(self) -> Waiter:
            return self

        def __exit__(self, *_: object) -> None:
            pass

    monkeypatch.setattr(LabContext, "engine", engine)
    monkeypatch.setattr(queue_submit, "RunWaiter", Waiter)  # SQLite: the CLI executes the probes itself
    assert cli.main(["capacity", "--experiment", str(experiment_id), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["experiment_id"] == experiment_id and result["backends"]["external"]["capacity_load"] == 4
    assert cli.main(["capacity", "--experiment", str(experiment_id + 1)]) == 2
    assert "is not a capacity search" in capsys.readouterr().err
