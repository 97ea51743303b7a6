"""Parsing /metrics text (vLLM's names) and figures from before/after deltas."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lab.backends import VLLM_METRICS, MetricNames
from lab.measurement.server_metrics import (
    MetricsUnreadable,
    backend_figures,
    cache_figures,
    count_check,
    delta,
    parse_metrics_text,
)

VLLM_BEFORE = """
# HELP vllm:prefix_cache_queries_total Prefix cache queries
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 40.0
vllm:prefix_cache_queries_created{engine="0",model_name="m"} 1.79e+09
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 0.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 128.0
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 0.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 1.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 1.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 1.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.05
"""

VLLM_AFTER = (
    VLLM_BEFORE.replace(
        'queries_total{engine="0",model_name="m"} 40.0', 'queries_total{engine="0",model_name="m"} 1040.0'
    )
    .replace('hits_total{engine="0",model_name="m"} 0.0', 'hits_total{engine="0",model_name="m"} 768.0')
    .replace(
        'generation_tokens_total{engine="0",model_name="m"} 128.0',
        'generation_tokens_total{engine="0",model_name="m"} 1408.0',
    )
    .replace('finished_reason="length",model_name="m"} 1.0', 'finished_reason="length",model_name="m"} 11.0')
    .replace('seconds_count{engine="0",model_name="m"} 1.0', 'seconds_count{engine="0",model_name="m"} 11.0')
    .replace('seconds_sum{engine="0",model_name="m"} 0.05', 'seconds_sum{engine="0",model_name="m"} 2.05')
)


def test_parse_sums_labels_and_drops_buckets_and_created() -> None:
    snapshot = parse_metrics_text(VLLM_BEFORE, ("vllm:",))
    assert snapshot["vllm:request_success_total"] == 1.0
    assert snapshot["vllm:prefix_cache_queries_total"] == 40.0
    assert not any(name.endswith(("_bucket", "_created")) for name in snapshot)


def test_backend_figures_from_deltas() -> None:
    change = delta(parse_metrics_text(VLLM_BEFORE, ("vllm:",)), parse_metrics_text(VLLM_AFTER, ("vllm:",)))
    figures = backend_figures(change, VLLM_METRICS)
    assert figures["prefix_cache_hit_rate"] == 768 / 1000
    assert figures["server_ttft_avg_s"] == pytest.approx(0.2)
    assert figures["server_requests"] == 10
    assert figures["server_output_tokens"] == 1280


def test_cache_figures_and_count_check() -> None:
    change = {"lab_cache_hits_total": 98.0, "lab_cache_misses_total": 2.0, "lab_cache_store_errors_total": 0.0}
    figures = cache_figures(change)
    assert figures["response_cache_hit_rate"] == 0.98
    assert figures["response_cache_hits"] == 98
    check = count_check(client_count=100, server_count=101)
    assert check["difference"] == 1 and check["difference_ratio"] == 0.01
    assert count_check(client_count=None, server_count=3)["difference"] is None


def test_missing_scrape_gives_empty_delta() -> None:
    assert delta({"a": 1.0}, None) == {}
    assert backend_figures({}, VLLM_METRICS)["prefix_cache_hit_rate"] is None


def test_no_baseline_gives_no_figures_rather_than_totals() -> None:
    assert delta(None, {"vllm:prefix_cache_hits_total": 5.0}) == {}


def test_every_answer_of_the_proxy_counts_for_the_client_check() -> None:
    figures = cache_figures(
        {
            "lab_cache_hits_total": 90.0,
            "lab_cache_misses_total": 5.0,
            "lab_cache_bypasses_total": 3.0,
            "lab_cache_errors_total": 2.0,
        }
    )
    assert figures["proxy_requests"] == 100
    assert figures["response_cache_hit_rate"] == 90 / 95
    assert figures["response_cache_errors"] == 2


# -- text that is not Prometheus': never an exception out of a scrape, never a NaN figure --
@given(st.text(max_size=300) | st.binary(max_size=300).map(lambda b: b.decode("latin-1")))
def test_any_text_parses_to_finite_figures_or_is_refused_cleanly(text: str) -> None:
    try:
        snapshot = parse_metrics_text(text, ("vllm:",))
    except MetricsUnreadable:
        return
    assert all(isinstance(value, float) and math.isfinite(value) for value in snapshot.values())


@pytest.mark.parametrize("text", ["<html><body>hi</body></html>", '{"a": 1}', "a b c", "vllm:x{"])
def test_html_json_and_garbage_are_refused(text: str) -> None:
    with pytest.raises(MetricsUnreadable, match="not Prometheus text"):
        parse_metrics_text(text, ("vllm:",))


def test_non_finite_values_are_skipped() -> None:
    assert parse_metrics_text("vllm:a_total NaN\nvllm:b_total 1e400\nvllm:c_total 2\n", ("vllm:",)) == {
        "vllm:c_total": 2.0
    }


def test_a_backend_without_a_metric_leaves_its_figure_unknown_not_zero() -> None:
    change = delta(parse_metrics_text(VLLM_BEFORE, ("vllm:",)), parse_metrics_text(VLLM_AFTER, ("vllm:",)))
    figures = backend_figures(change, MetricNames())
    assert all(value is None for value in figures.values())
    partial = MetricNames(prefixes=("vllm:",), output_tokens="vllm:generation_tokens_total")
    assert backend_figures(change, partial)["server_output_tokens"] == 1280
    assert backend_figures(change, partial)["prefix_cache_hit_rate"] is None


def test_count_check_keeps_an_allowance_for_requests_in_flight_only_when_there_is_one() -> None:
    assert count_check(client_count=1000, server_count=1120, in_flight_allowance=512)["in_flight_allowance"] == 512
    assert "in_flight_allowance" not in count_check(client_count=1000, server_count=1120, in_flight_allowance=0)
