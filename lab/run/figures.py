"""A run's figures from what its load left, as plain functions: the stored series document,
the client/server count cross-checks, resource use and the steady-state throughput.

``collect.RunCollector`` (driven by ``runner.RunExecutor``) reads k6's files and the servers' /metrics and hands them
here; nothing in this module reads a file or a socket.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from lab.measurement import server_metrics
from lab.measurement.checks import join_warnings, measurement_warnings, steady_throughput
from lab.measurement.k6_ndjson import PerSecondSeries, SeriesColumn
from lab.measurement.resources import summarise, summarise_host
from lab.measurement.results import CheckFigures, ResourceFigures, RunResults, SteadyFigures

# The backend's sampled gauges and counters kept in the stored series (``series["server"]``).
SERVER_SERIES_KEYS = ("t", "running_requests", "waiting_requests", "output_tokens", "requests")


def series_document(
    series: PerSecondSeries | None,
    *,
    resource_samples: Sequence[Mapping[str, Any]],
    server_samples: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """The run's stored series: every per-bucket list of k6's series (time_s, requests_ok,
    latency_avg_s, vus, ...), resource samples and the backend's samples on the same clock."""
    document: dict[str, Any] = {}
    if series is not None:
        document = {
            item.name: getattr(series, item.name)
            for item in dataclasses.fields(series)
            if isinstance(getattr(series, item.name), list)
        }
        document["start_epoch_s"] = series.start_epoch_s
        document["bucket_s"] = series.bucket_s
    if resource_samples:
        document["resources"] = {key: [s.get(key) for s in resource_samples] for key in resource_samples[-1]}
    if server_samples:
        document["server"] = {key: [s.get(key) for s in server_samples] for key in SERVER_SERIES_KEYS}
    return document


# How many mean prompts one request in flight at the end may carry (see count_checks).
IN_FLIGHT_PROMPT_FACTOR = 4


def count_checks(
    figures: dict[str, Any], *, backend: dict[str, Any], cache: dict[str, Any] | None, max_tokens: int
) -> dict[str, Any]:
    """k6's counts against the servers': requests (at the proxy behind the cache, else at the
    backend) and, direct only, output and prompt tokens.

    Requests still in flight at the graceful stop were (partly) served but never counted by k6:
    the server may count each of them, and their tokens, without anything being wrong. Their
    prompts may be longer than the finished ones' (a chat's later turns carry the earlier ones),
    hence :data:`IN_FLIGHT_PROMPT_FACTOR` times the mean prompt each; when more requests were in
    flight than finished, tokens are not compared at all."""
    interrupted = figures.get("requests_interrupted") or 0
    checks: dict[str, Any] = {}
    if cache is not None:
        checks["requests"] = server_metrics.count_check(
            client_count=figures.get("requests_total"),
            server_count=cache["proxy_requests"],
            in_flight_allowance=interrupted,
        )
        # Through the cache most answers never reach the backend: tokens only compare direct.
        return checks
    if backend["server_e2e_requests"] is not None:
        checks["requests"] = server_metrics.count_check(
            client_count=figures.get("requests_total"),
            server_count=backend["server_e2e_requests"],
            in_flight_allowance=interrupted,
        )
    completed = figures.get("requests_total") or 0
    if interrupted > completed:
        # Most of the server's work went to requests k6 never saw finish (a chat's long later
        # turns, still running at the end): their tokens cannot be bounded from the finished ones.
        return checks
    mean_prompt_tokens = (figures.get("input_tokens") or 0) / completed if completed else 0
    if backend["server_output_tokens"] is not None:
        checks["output_tokens"] = server_metrics.count_check(
            client_count=figures.get("output_tokens"),
            server_count=backend["server_output_tokens"],
            in_flight_allowance=interrupted * max_tokens,
        )
    if backend["server_prompt_tokens"] is not None:
        checks["input_tokens"] = server_metrics.count_check(
            client_count=figures.get("input_tokens"),
            server_count=backend["server_prompt_tokens"],
            in_flight_allowance=interrupted * mean_prompt_tokens * IN_FLIGHT_PROMPT_FACTOR,
        )
    return checks


def resource_figures(samples: Sequence[Mapping[str, Any]], *, backend_service: str | None) -> ResourceFigures:
    """Resource use while the load ran: k6, the backend, the GPU and the rest of the machine (None
    without samples)."""
    backend_usage = summarise(samples, backend_service) if backend_service else {}
    gpu = [s["gpu_utilization_percent"] for s in samples if "gpu_utilization_percent" in s]
    host = summarise_host(samples)
    return ResourceFigures(
        k6_cpu_percent_avg=summarise(samples, "k6")["cpu_percent_avg"],
        backend_cpu_percent_avg=backend_usage.get("cpu_percent_avg"),
        backend_rss_max_mb=backend_usage.get("rss_max_mb"),
        gpu_utilization_avg_percent=sum(gpu) / len(gpu) if gpu else None,
        # The host's figures that are this part's (its CPU in all is not a stored figure).
        **{name: value for name, value in host.items() if name in ResourceFigures.names()},
    )


def steady_figures(
    series_doc: dict[str, Any],
    figures: dict[str, Any],
    backend: dict[str, Any],
    *,
    load_duration_s: float,
    behind_cache: bool,
    response_cache_hits: int | None = None,
) -> SteadyFigures:
    """Steady-state throughput in the load window: the backend's counters, else k6's series.

    Behind the response cache the backend sees only the misses, so its counters stand for
    every answer only when the proxy counted no hit over the run (a cold 1,000-prompt cell,
    chat); with any hit, or no count, k6's series."""
    backend_saw_every_request = not behind_cache or response_cache_hits == 0
    server = (series_doc.get("server") or {}) if backend_saw_every_request else {}
    client_start = series_doc.get("start_epoch_s")
    bucket_s = float(series_doc.get("bucket_s") or 1.0)
    load_start = (server.get("t") or [None])[0] or client_start
    # Tokens per completed request from k6 first: the server's token counter also holds the
    # tokens of requests aborted at the graceful stop, which its request counter never counts.
    completed = RunResults.of_record(figures).requests_ok
    if figures.get("output_tokens") and completed:
        tokens_per_request = figures["output_tokens"] / completed
    elif server and backend.get("server_output_tokens") and backend.get("server_e2e_requests"):
        tokens_per_request = backend["server_output_tokens"] / backend["server_e2e_requests"]
    else:
        tokens_per_request = None
    steady = steady_throughput(
        load_start_epoch_s=load_start,
        load_duration_s=load_duration_s,
        server_times_epoch_s=server.get("t") or (),
        server_output_tokens=server.get("output_tokens") or (),
        server_requests=server.get("requests") or (),
        # A bucket's completions are counted at its end.
        client_times_epoch_s=[client_start + t + bucket_s for t in series_doc.get("time_s") or ()]
        if client_start is not None
        else (),
        client_output_tokens=series_doc.get("output_tokens") or (),
        client_requests_ok=series_doc.get(SeriesColumn.REQUESTS_OK) or (),
        tokens_per_request=tokens_per_request,
    )
    return steady.part()


def check_figures(
    results: RunResults,
    count_check: dict[str, Any],
    *,
    contention_threshold_percent: float,
    load_duration_s: float | None,
) -> CheckFigures:
    """Every reason to read the run's figures with care, from its other figures and count checks."""
    warnings = measurement_warnings(
        k6_cpu_percent_avg=results.k6_cpu_percent_avg,
        iterations_dropped=results.iterations_dropped,
        other_cpu_percent_avg=results.other_cpu_percent_avg,
        contention_threshold_percent=contention_threshold_percent,
        count_check=count_check,
        latency_avg_s=results.latency_avg_s,
        load_duration_s=load_duration_s,
        steady_figures_available=results.steady_output_tok_per_s is not None or results.steady_req_per_s is not None,
        requests_late=results.requests_late_over_50ms,
        lateness_p99_ms=results.lateness_p99_ms,
    )
    return CheckFigures(measurement_warnings=join_warnings(*warnings))
