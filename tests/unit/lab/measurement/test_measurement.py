"""Trustworthy measurement: warnings, steady-state window maths, CI columns, significance labels,
the load_generator_warning -> measurement_warnings upgrade and the naive server's threads."""

from __future__ import annotations

import dataclasses
import math

import pytest
from scipy import stats as scipy_stats
from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from db import migrations
from db.models import Run
from lab.analysis.aggregation import aggregate
from lab.analysis.compare import cell_comparisons, split_warned
from lab.analysis.safe_csv import records_to_csv
from lab.backends import VLLM_METRICS
from lab.backends.naive import NaiveBackend, NaiveOptions, best_torch_threads
from lab.measurement.checks import (
    STEADY_FROM_CLIENT,
    STEADY_FROM_SERVER,
    join_warnings,
    measurement_warnings,
    steady_rate,
    steady_throughput,
)
from lab.measurement.server_metrics import counters
from lab.queue import experiments
from lab.settings import Settings
from lab.specs.schema import load_preset

# -- warnings ---------------------------------------------------------------------------------


def test_a_clean_run_has_no_warning() -> None:
    assert (
        measurement_warnings(
            k6_cpu_percent_avg=20,
            iterations_dropped=0,
            other_cpu_percent_avg=10,
            count_check={"requests": {"client": 100, "server": 101, "difference_ratio": 0.01}},
            latency_avg_s=1.0,
            load_duration_s=60,
        )
        == []
    )
    assert join_warnings() is None


def test_contention_warns_above_the_threshold_setting() -> None:
    [warning] = measurement_warnings(other_cpu_percent_avg=30)
    assert "other processes used 30% of a core" in warning
    assert measurement_warnings(other_cpu_percent_avg=30, contention_threshold_percent=50) == []
    assert Settings().contention_warning_cpu_percent == 25.0


def test_each_reason_gives_its_own_sentence() -> None:
    warnings = measurement_warnings(
        k6_cpu_percent_avg=95,
        iterations_dropped=3,
        other_cpu_percent_avg=80,
        count_check={"output_tokens": {"client": 1000, "server": 950, "difference_ratio": -0.05}},
        latency_avg_s=8.0,
        load_duration_s=30,
    )
    assert len(warnings) == 5
    assert "k6 used 95%" in warnings[0] and "3 iterations were dropped" in warnings[1]
    assert "client and server output tokens differ by -5.0%" in warnings[3]
    assert "less than 10 times the mean latency" in warnings[4]
    joined = join_warnings(*warnings)
    assert joined is not None and joined.count("; ") == 4


def test_a_short_run_with_steady_figures_is_no_warning() -> None:
    assert measurement_warnings(latency_avg_s=8.0, load_duration_s=60, steady_figures_available=True) == []
    [warning] = measurement_warnings(latency_avg_s=8.0, load_duration_s=60)
    assert "less than 10 times the mean latency" in warning and "prefer the steady figures" in warning


def test_every_warning_says_what_to_do() -> None:
    warnings = measurement_warnings(
        k6_cpu_percent_avg=95,
        iterations_dropped=3,
        other_cpu_percent_avg=80,
        count_check={"requests": {"client": 100, "server": 90, "difference": -10, "difference_ratio": -0.1}},
        latency_avg_s=8.0,
        load_duration_s=30,
    )
    actions = (
        "give k6 more CPU",
        "raise load.max_vus",
        "rerun it on a quiet machine",
        "read the service log",
        "or a longer run",
    )
    assert len(warnings) == len(actions)
    for warning, action in zip(warnings, actions, strict=True):
        assert action in warning, warning


def test_a_count_mismatch_of_two_percent_or_less_is_no_warning() -> None:
    check = {"requests": {"client": 100, "server": 102, "difference_ratio": 0.02}}
    assert measurement_warnings(count_check=check) == []


# -- steady window ----------------------------------------------------------------------------


def test_steady_rate_of_a_lock_step_counter_is_event_to_event() -> None:
    # 8 requests complete together every 8 s from t=8; the window ends at 30 s, the drain
    # brings a last batch at 32 s that must not count.
    times = list(range(0, 40))
    counts = [8 * (t // 8) for t in times]
    assert steady_rate(times, counts, start_s=0, end_s=30) == pytest.approx(1.0)
    # k6's convention would give 32 requests over the 34 s test, drain included.
    assert pytest.approx(1.0, rel=0.05) != 32 / 34


def test_steady_rate_of_a_smooth_counter_and_its_edge_cases() -> None:
    times = [100.0 + t for t in range(11)]
    tokens = [50.0 * t for t in range(11)]
    assert steady_rate(times, tokens, start_s=100, end_s=110) == pytest.approx(50.0)
    assert steady_rate(times, [0.0] * 11, start_s=100, end_s=110) is None  # never moved
    assert (
        steady_rate(times, [5.0, 10.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 0.5], start_s=100, end_s=101.5) is None
    )  # fewer than two moves inside
    assert steady_rate([1.0, 2.0, 3.0], [10.0, 20.0, 5.0], start_s=0, end_s=5) is None  # went backwards


def test_two_batches_of_completions_close_together_are_no_steady_rate() -> None:
    """Requests longer than the run complete in one or two batches: 32 at 58 s and 32 at
    59 s are not 32 req/s (the seed-scale reproduction of b062e68 stored 55 req/s that way)."""
    times = [1000.0 + t for t in range(1, 61)]
    per_bucket = [0] * 57 + [32, 32, 0]
    steady = steady_throughput(
        load_start_epoch_s=1000.0,
        load_duration_s=60,
        client_times_epoch_s=times,
        client_output_tokens=[r * 128 for r in per_bucket],
        client_requests_ok=per_bucket,
        tokens_per_request=128.0,
    )
    assert (steady.req_per_s, steady.output_tok_per_s, steady.source) == (None, None, None)
    assert steady_rate(times, [float(sum(per_bucket[: i + 1])) for i in range(60)], start_s=1000, end_s=1060) == 32.0
    assert (
        steady_rate(
            times, [float(sum(per_bucket[: i + 1])) for i in range(60)], start_s=1000, end_s=1060, min_span_s=30
        )
        is None
    )


def test_steady_req_per_s_counts_tokens_per_completed_request_from_k6() -> None:
    """vLLM's token counter includes the tokens of requests aborted at the graceful stop; its
    request counter does not: dividing them would make every request look longer."""
    from lab.run.figures import steady_figures

    series_doc = {
        "server": {
            "t": [100.0 + t for t in range(61)],
            "output_tokens": [90.0 * t for t in range(61)],
            "requests": [float(t // 30) for t in range(61)],
        },
        "start_epoch_s": 100.0,
        "bucket_s": 1.0,
        "time_s": [],
        "requests_ok": [],
        "output_tokens": [],
    }
    figures = {"output_tokens": 37 * 126, "requests_ok": 37}
    backend = {"server_output_tokens": 7200.0, "server_e2e_requests": 37.0}  # 1,300 tokens of aborted requests
    steady = steady_figures(series_doc, figures, backend, load_duration_s=60.0, behind_cache=False)
    assert steady.steady_output_tok_per_s == pytest.approx(90.0)
    assert steady.steady_req_per_s == pytest.approx(90.0 / 126)


def test_steady_throughput_prefers_the_server_counters_and_derives_req_per_s_from_tokens() -> None:
    times = [1000.0 + t for t in range(70)]
    tokens = [min(t, 60) * 128.0 for t in range(70)]  # 128 tok/s during the 60 s window, then nothing
    steady = steady_throughput(
        load_start_epoch_s=1000.0,
        load_duration_s=60,
        server_times_epoch_s=times,
        server_output_tokens=tokens,
        server_requests=[float(t // 8) for t in range(70)],
        client_times_epoch_s=times,
        client_output_tokens=[1.0] * 70,
        client_requests_ok=[1.0] * 70,
        tokens_per_request=128.0,
    )
    assert steady.source == STEADY_FROM_SERVER
    assert steady.output_tok_per_s == pytest.approx(128.0)
    assert steady.req_per_s == pytest.approx(1.0)
    assert steady.as_figures()["steady_source"] == "server counters"


def test_steady_throughput_falls_back_to_the_clients_series() -> None:
    times = [2000.0 + t + 1 for t in range(30)]  # bucket ends
    per_bucket_requests = [1 if t % 5 == 4 else 0 for t in range(30)]
    steady = steady_throughput(
        load_start_epoch_s=2000.0,
        load_duration_s=30,
        client_times_epoch_s=times,
        client_output_tokens=[r * 100 for r in per_bucket_requests],
        client_requests_ok=per_bucket_requests,
        tokens_per_request=100.0,
    )
    assert steady.source == STEADY_FROM_CLIENT
    assert steady.req_per_s == pytest.approx(0.2)
    assert steady.output_tok_per_s == pytest.approx(20.0)
    assert steady_throughput(load_start_epoch_s=None, load_duration_s=30).as_figures() == {
        "steady_output_tok_per_s": None,
        "steady_req_per_s": None,
        "steady_source": None,
    }


def test_a_server_without_a_token_counter_gives_tokens_from_its_request_rate() -> None:
    times = [float(t) for t in range(21)]
    steady = steady_throughput(
        load_start_epoch_s=0.0,
        load_duration_s=20,
        server_times_epoch_s=times,
        server_output_tokens=[None] * 21,
        server_requests=[float(t // 5) for t in range(21)],
        tokens_per_request=128.0,
    )
    assert steady.source == STEADY_FROM_SERVER
    assert steady.req_per_s == pytest.approx(0.2)
    assert steady.output_tok_per_s == pytest.approx(25.6)


def test_counters_read_the_backends_names() -> None:
    snapshot = {"vllm:generation_tokens_total": 640.0, "vllm:e2e_request_latency_seconds_count": 5.0}
    assert counters(snapshot, VLLM_METRICS) == {"output_tokens": 640.0, "requests": 5.0}


# -- confidence intervals and significance --------------------------------------------------


def _record(backend: str, vus: int, value: float, **extra: object) -> dict:
    return {
        "status": "done",
        "backend": backend,
        "vus": vus,
        "prompts": 50,
        "output_tok_per_s": value,
        "requests_failed": 0,
        **extra,
    }


def test_aggregate_gives_the_mean_and_a_log_scale_95_percent_interval() -> None:
    values = [20.0, 22.0, 21.0, 25.0]
    [row] = aggregate([_record("naive", 1, v) for v in values], ("backend", "vus"), ("output_tok_per_s",))
    # A rate cannot be negative: the interval is scipy's t interval of log(mean) (delta method).
    half = scipy_stats.t.ppf(0.975, df=3) * scipy_stats.sem(values) / 22.0
    low, high = 22.0 * math.exp(-half), 22.0 * math.exp(half)
    assert row["output_tok_per_s"] == pytest.approx(22.0)
    assert (row["output_tok_per_s_ci95_low"], row["output_tok_per_s_ci95_high"]) == (
        pytest.approx(low),
        pytest.approx(high),
    )
    header = records_to_csv([row]).splitlines()[0].split(",")
    mean_at = header.index("output_tok_per_s")
    assert header[mean_at + 1 : mean_at + 3] == ["output_tok_per_s_ci95_low", "output_tok_per_s_ci95_high"]
    [single] = aggregate([_record("naive", 1, 20.0)], ("backend",), ("output_tok_per_s",))
    assert single["output_tok_per_s_ci95_low"] is None


def test_cell_comparisons_label_significance_and_small_samples() -> None:
    records = (
        [_record("naive", 8, v) for v in (20.0, 21.0, 22.0)]
        + [_record("vllm", 8, v) for v in (120.0, 121.0, 119.0)]
        + [_record("vllm", 1, v) for v in (100.0, 104.0)]
    )
    rows = {row["cell"]: row for row in cell_comparisons(records, ("backend", "vus"), "output_tok_per_s")}
    vllm_over_naive = rows["backend vllm over backend naive (vus 8)"]
    assert vllm_over_naive["ratio"] == pytest.approx(120.0 / 21.0)
    expected_p = scipy_stats.ttest_ind([120.0, 121.0, 119.0], [20.0, 21.0, 22.0], equal_var=False).pvalue
    assert vllm_over_naive["significance"] == f"significant (p={expected_p:.3g})"
    assert rows["vus 8 over vus 1 (backend vllm)"]["significance"].startswith("n too small")
    assert not any("naive" in cell and "vus 1" in cell for cell in rows)  # differs in two keys: no pair


def test_similar_cells_are_not_significant() -> None:
    records = [_record("a", 1, v) for v in (20.0, 25.0, 22.0)] + [_record("b", 1, v) for v in (21.0, 24.0, 23.0)]
    [row] = cell_comparisons(records, ("backend", "vus"), "output_tok_per_s")
    assert row["significance"].startswith("not significant")


def test_split_warned_leaves_warned_runs_out() -> None:
    kept, warned = split_warned([_record("a", 1, 1.0), _record("a", 1, 2.0, measurement_warnings="busy machine")])
    assert [r["output_tok_per_s"] for r in kept] == [1.0] and len(warned) == 1


# -- schema upgrade ---------------------------------------------------------------------------

MEASUREMENT_COLUMNS = (
    "other_cpu_percent_avg",
    "steal_cpu_percent_avg",
    "steady_output_tok_per_s",
    "steady_req_per_s",
    "steady_source",
    "measurement_warnings",
)


def test_upgrade_copies_load_generator_warning_into_measurement_warnings(engine: Engine) -> None:
    with Session(engine) as session:
        experiments.enqueue_experiment(session=session, spec=load_preset("seed-exp1", quick=True))
    with engine.begin() as connection:  # back to version 2: the old column, none of the new ones
        connection.execute(text("ALTER TABLE runs ADD COLUMN load_generator_warning TEXT"))
        for column in MEASUREMENT_COLUMNS:
            connection.execute(text(f"ALTER TABLE runs DROP COLUMN {column}"))
        connection.execute(text("UPDATE runs SET load_generator_warning = 'k6 used 95% of a core' WHERE id = 1"))
        connection.execute(text("UPDATE schema_version SET version = 2"))
    assert migrations.upgrade(engine) == 2
    with Session(engine) as session:
        runs = session.query(Run).order_by(Run.id).all()
        assert len(runs) == 6  # quick experiment 1: 2 backends x VUs 1, 8, 32
        assert runs[0].measurement_warnings == "k6 used 95% of a core"
        assert runs[1].measurement_warnings is None and runs[0].other_cpu_percent_avg is None


# -- naive server threads ---------------------------------------------------------------------


def test_torch_threads_best_leaves_a_core_and_torch_leaves_it_to_torch() -> None:
    assert [best_torch_threads(cores) for cores in (1, 2, 4, 16)] == [1, 1, 3, 15]
    assert NaiveOptions(torch_threads="torch").resolved_torch_threads(8) is None
    assert NaiveOptions(torch_threads=3).resolved_torch_threads(8) == 3
    with pytest.raises(ValueError):
        NaiveOptions(torch_threads=0)


def test_the_resolved_thread_count_is_in_the_servers_argv() -> None:
    settings = Settings()
    argv = NaiveBackend().launch(model="m", options=NaiveOptions(), settings=settings).argv
    assert argv[argv.index("--torch-threads") + 1].isdigit()
    assert (
        "--torch-threads"
        not in NaiveBackend().launch(model="m", options=NaiveOptions(torch_threads="torch"), settings=settings).argv
    )


# -- the runner's choice of source ----------------------------------------------------------


def test_the_runner_uses_the_clients_series_behind_the_response_cache() -> None:
    from lab.run.figures import steady_figures
    from lab.specs.schema import RunSpec

    spec = RunSpec.model_validate(
        {"backend": "external", "target_url": "http://127.0.0.1:9", "model": "m", "load": {"vus": 1, "duration_s": 10}}
    )
    series_doc = {
        "server": {
            "t": [100.0 + t for t in range(12)],
            "output_tokens": [10.0 * t for t in range(12)],
            "requests": [float(t) for t in range(12)],
        },
        "start_epoch_s": 100.0,
        "bucket_s": 1.0,
        "time_s": [float(t) for t in range(11)],
        "requests_ok": [2] * 11,
        "output_tokens": [40] * 11,
    }
    figures = {"output_tokens": 440, "requests_ok": 22}
    backend = {"server_output_tokens": 110.0, "server_e2e_requests": 11.0}
    direct = steady_figures(
        series_doc, figures, backend, load_duration_s=spec.load.planned_duration_s, behind_cache=False
    )
    assert direct.steady_source == STEADY_FROM_SERVER and direct.steady_output_tok_per_s == pytest.approx(10.0)
    cached = steady_figures(
        series_doc, figures, backend, load_duration_s=spec.load.planned_duration_s, behind_cache=True
    )
    assert cached.steady_source == STEADY_FROM_CLIENT
    assert cached.steady_output_tok_per_s == pytest.approx(40.0)
    assert cached.steady_req_per_s == pytest.approx(2.0)
    hits_unknown = steady_figures(
        series_doc,
        figures,
        backend,
        load_duration_s=spec.load.planned_duration_s,
        behind_cache=True,
        response_cache_hits=None,
    )
    assert hits_unknown.steady_source == STEADY_FROM_CLIENT


def test_behind_a_response_cache_that_never_hit_the_backends_counters_count_every_answer() -> None:
    """A cold cache (every prompt new) or chat: every request reached the backend, so its
    counters give steady figures where a run shorter than its latency has too few client
    completions for them."""
    from lab.run.figures import steady_figures

    series_doc = {
        "server": {
            "t": [100.0 + t for t in range(32)],
            "output_tokens": [30.0 * t for t in range(32)],
            "requests": [t / 4 for t in range(32)],
        },
        # 40 s latency in a 30 s run: one batch of 32 completions, at the end.
        "start_epoch_s": 100.0,
        "bucket_s": 1.0,
        "time_s": [float(t) for t in range(31)],
        "requests_ok": [0] * 30 + [32],
        "output_tokens": [0] * 30 + [3840],
    }
    figures = {"output_tokens": 3840, "requests_ok": 32}
    backend = {"server_output_tokens": 900.0, "server_e2e_requests": 7.5}
    cold = steady_figures(series_doc, figures, backend, load_duration_s=30.0, behind_cache=True, response_cache_hits=0)
    assert cold.steady_source == STEADY_FROM_SERVER and cold.steady_output_tok_per_s == pytest.approx(30.0)
    assert cold.steady_req_per_s == pytest.approx(0.25)
    some_hits = steady_figures(
        series_doc, figures, backend, load_duration_s=30.0, behind_cache=True, response_cache_hits=3
    )
    assert some_hits.steady_output_tok_per_s is None  # one client batch: no steady rate, and the run is warned


def test_server_tokens_for_requests_in_flight_at_the_end_are_no_mismatch() -> None:
    in_flight = {
        "client": 1000,
        "server": 1120,
        "difference": 120,
        "difference_ratio": 0.12,
        "in_flight_allowance": 4 * 128,
    }
    assert measurement_warnings(count_check={"output_tokens": in_flight}) == []
    beyond = {**in_flight, "server": 1700, "difference": 700, "difference_ratio": 0.7}
    assert measurement_warnings(count_check={"output_tokens": beyond})
    fewer = {**in_flight, "server": 880, "difference": -120, "difference_ratio": -0.12}
    assert measurement_warnings(count_check={"output_tokens": fewer})  # the server missing tokens is never excused


def test_stored_warnings_are_recomputed_by_todays_rules_and_event_notes_kept() -> None:
    from lab.measurement.checks import recomputed_warnings
    from lab.measurement.results import RunResults

    stored = (
        "the load lasted 60 s, less than 10 times the mean latency (12.00 s): where the last requests end "
        "moves req/s and tok/s, prefer the steady figures or a longer run; client and server requests differ "
        "by +10.0% (client 100, server 110); the response cache was unreachable for 3 s: 12 answers uncached"
    )
    # The 10 extra requests were the ones still in flight at the end: within today's allowance.
    checks = {
        "requests": {"client": 100, "server": 110, "difference": 10, "difference_ratio": 0.1, "in_flight_allowance": 32}
    }
    results = RunResults(latency_avg_s=12.0, steady_output_tok_per_s=250.0, other_cpu_percent_avg=2)
    assert recomputed_warnings(stored, results=results, load_duration_s=60, count_check=checks) == (
        "the response cache was unreachable for 3 s: 12 answers uncached"
    )
    busy = recomputed_warnings(
        None, results=dataclasses.replace(results, other_cpu_percent_avg=90), load_duration_s=60, count_check=None
    )
    assert busy is not None and busy.startswith("other processes used 90% of a core")
