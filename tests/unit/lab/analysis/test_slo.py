"""SLO parsing and evaluation against hand-computed goodput and attainment."""

import pytest

from lab.analysis.slo import Limit, SloError, check_slo_applies, evaluate, parse_slo
from lab.measurement.request_figures import RequestFigures


def test_parse_limits_and_failure_rate():
    slo = parse_slo(["latency_p95_s<=10", "ttft_p99_s <= 1, failure_rate<=0.01"])
    assert slo.limits == (Limit("latency", 0.95, 10.0), Limit("ttft", 0.99, 1.0))
    assert slo.max_failure_rate == 0.01
    assert slo.needs_stream
    assert str(slo) == "latency_p95_s<=10, ttft_p99_s<=1, failure_rate<=0.01"
    assert parse_slo(["latency_max_s<=3"]).limits[0].name == "latency_max_s"


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("latency_p95<=10", "not understood"),
        ("speed_p95_s<=10", "unknown figure"),
        ("latency_p95_s<=-1", "finite number"),
        ("latency_p95_s<=nan", "not understood"),
        ("latency_p95_s<=0", "can never be met"),
        ("failure_rate<=2", "between 0 and 1"),
        ("latency_p0_s<=1", "between p1"),
        ("", "at least one limit"),
    ],
)
def test_bad_slo_texts_are_refused_with_a_reason(text, fragment):
    with pytest.raises(SloError, match=fragment):
        parse_slo([text])


def test_duplicate_limit_is_refused():
    with pytest.raises(SloError, match="twice"):
        parse_slo(["latency_p95_s<=1", "latency_p95_s<=2"])


def test_ttft_slo_on_non_streamed_run_is_refused():
    slo = parse_slo(["ttft_p95_s<=1"])
    with pytest.raises(SloError, match="streamed"):
        check_slo_applies(slo, streamed=False)
    check_slo_applies(slo, streamed=True)
    check_slo_applies(parse_slo(["latency_p95_s<=1"]), streamed=False)


def test_goodput_and_attainment_by_hand():
    # 10 requests over 5 s: 2 failed; of the 8 successes, 6 are within 2 s.
    requests = RequestFigures(
        latency_s=[0.5, 1.0, 1.5, 2.0, 1.2, 0.9, 3.0, 4.0, 0.1, 0.2],
        ok=[True, True, True, True, True, True, True, True, False, False],
    )
    evaluation = evaluate(parse_slo(["latency_p50_s<=2", "failure_rate<=0.25"]), requests, duration_s=5.0)
    assert evaluation.requests_total == 10
    assert evaluation.requests_good == 6
    assert evaluation.goodput_req_per_s == pytest.approx(6 / 5)
    assert evaluation.attainment == pytest.approx(0.6)
    assert evaluation.failure_rate == pytest.approx(0.2)
    assert evaluation.passed  # p50 of successes = 1.35 s <= 2
    assert evaluation.limits[0].value_s == pytest.approx(1.35)


def test_failing_limit_and_failure_rate_are_named_in_the_reason():
    requests = RequestFigures(latency_s=[1.0, 5.0, 9.0, 12.0], ok=[True, True, True, False])
    evaluation = evaluate(parse_slo(["latency_p95_s<=6", "failure_rate<=0.1"]), requests, duration_s=2.0)
    assert not evaluation.passed
    assert "latency_p95_s" in evaluation.reason and "failure rate 25.0%" in evaluation.reason
    assert evaluation.requests_good == 2


def test_every_limit_must_hold_per_request():
    requests = RequestFigures(
        latency_s=[1.0, 1.0, 1.0], ok=[True, True, True], ttft_s=[0.1, 0.9, None], tpot_s=[0.01, 0.01, 0.01]
    )
    evaluation = evaluate(parse_slo(["latency_p99_s<=2", "ttft_max_s<=0.5"]), requests, duration_s=1.0)
    assert evaluation.requests_good == 1  # the second is too slow to start, the third has no TTFT
    assert not evaluation.passed


def test_missing_figure_fails_the_limit_and_empty_run_fails():
    evaluation = evaluate(parse_slo(["ttft_p95_s<=1"]), RequestFigures(latency_s=[1.0], ok=[True]), duration_s=1)
    assert not evaluation.passed and "unknown" in evaluation.reason
    empty = evaluate(parse_slo(["latency_p95_s<=1"]), RequestFigures(), duration_s=1)
    assert not empty.passed and empty.attainment is None and empty.reason == "no request finished"
