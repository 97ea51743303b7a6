"""Whether a run's figures can be trusted: its measurement warnings and its steady-state throughput.

Pure functions (no I/O): the runner hands them what it sampled and stores what they return.

Steady state: k6's convention divides everything completed by the whole test, drain
included, so where the last closed-loop batch happens to end moves the figure by ~10%.
The steady figures count only inside the load window (from the first completion after
the start to the last one before the planned end), measured event to event: a counter
that steps at each completed batch and one that grows token by token give the same rate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lab.measurement.results import RunResults, SteadyFigures

# k6 using more than this share of a core on average may have limited the load it applied.
K6_CPU_WARNING_PERCENT = 80.0
# Other processes using more than this share of a core on average: the run shared the machine.
CONTENTION_WARNING_CPU_PERCENT = 25.0
# How the contention warning begins: a run carrying it shared the machine (see contention_warned).
CONTENTION_WARNING_START = "other processes used"
# A client/server count differing by more than this share: one side missed requests or tokens.
COUNT_MISMATCH_WARNING_RATIO = 0.02
# A run shorter than this many mean request latencies: where the last batch ends moves the figures.
MIN_LATENCIES_PER_RUN = 10.0

# A trace request sent more than this after its time in the trace is late (k6/trace_replay.js).
LATE_WARNING_MS = 50

STEADY_FROM_SERVER = "server counters"
STEADY_FROM_CLIENT = "client series"
# A steady rate needs the counter's moves to span at least this share of the load window:
# with requests longer than the run, completions come in one or two batches and give none.
STEADY_MIN_SPAN_SHARE = 0.5


def load_generator_warnings(
    *,
    k6_cpu_percent_avg: float | None,
    iterations_dropped: int | None,
    requests_late: int | None,
    lateness_p99_ms: float | None,
) -> list[str]:
    """The warnings that the load generator did not apply the load asked for: k6 short of CPU,
    arrival-rate iterations dropped, trace requests sent late."""
    warnings: list[str] = []
    if (k6_cpu_percent_avg or 0) > K6_CPU_WARNING_PERCENT:
        warnings.append(
            f"k6 used {k6_cpu_percent_avg:.0f}% of a core on average: the load generator may have limited the "
            "load, so give k6 more CPU (fewer other processes) or lower the load, and compare with care"
        )
    if iterations_dropped:
        warnings.append(
            f"{iterations_dropped} iterations were dropped (arrival rate not reached): raise "
            "load.max_vus or lower the rate"
        )
    if requests_late:
        p99 = "" if lateness_p99_ms is None else f" (p99 lateness {lateness_p99_ms:,.0f} ms)"
        warnings.append(
            f"{requests_late} requests were sent more than {LATE_WARNING_MS} ms after their time in the trace{p99}: "
            "the load generator could not keep the schedule, so raise load.max_vus (requests in flight) or lower "
            "workload.trace.speedup"
        )
    return warnings


def measurement_warnings(
    *,
    k6_cpu_percent_avg: float | None = None,
    iterations_dropped: int | None = None,
    other_cpu_percent_avg: float | None = None,
    contention_threshold_percent: float = CONTENTION_WARNING_CPU_PERCENT,
    count_check: Mapping[str, Mapping[str, Any]] | None = None,
    latency_avg_s: float | None = None,
    load_duration_s: float | None = None,
    steady_figures_available: bool = False,
    requests_late: int | None = None,
    lateness_p99_ms: float | None = None,
) -> list[str]:
    """One sentence per reason to read the run's figures with care, each saying what to do
    (empty: none).

    A run shorter than :data:`MIN_LATENCIES_PER_RUN` mean latencies is warned only when it
    has no steady-state figures: those count inside the load window and do not depend on
    where the last requests end, so a seed-length run that has them is no reason for care."""
    warnings = load_generator_warnings(
        k6_cpu_percent_avg=k6_cpu_percent_avg,
        iterations_dropped=iterations_dropped,
        requests_late=requests_late,
        lateness_p99_ms=lateness_p99_ms,
    )
    if other_cpu_percent_avg is not None and other_cpu_percent_avg > contention_threshold_percent:
        warnings.append(
            f"{CONTENTION_WARNING_START} {other_cpu_percent_avg:.0f}% of a core on average (threshold "
            f"{contention_threshold_percent:g}%): the machine was shared, the figures may be low, so rerun it on a "
            "quiet machine"
        )
    for what, check in (count_check or {}).items():
        ratio = check.get("difference_ratio")
        # Work for requests still in flight at the end: counted by the server, never by k6.
        if 0 < (check.get("difference") or 0) <= (check.get("in_flight_allowance") or 0):
            continue
        if ratio is not None and abs(ratio) > COUNT_MISMATCH_WARNING_RATIO:
            warnings.append(
                f"client and server {what.replace('_', ' ')} differ by {ratio * 100:+.1f}% "
                f"(client {check.get('client'):g}, server {check.get('server'):g}): one side missed requests, so read "
                "the service log for errors"
            )
    if (
        not steady_figures_available
        and latency_avg_s
        and load_duration_s
        and load_duration_s < MIN_LATENCIES_PER_RUN * latency_avg_s
    ):
        warnings.append(
            f"the load lasted {load_duration_s:g} s, less than {MIN_LATENCIES_PER_RUN:g} times the mean latency "
            f"({latency_avg_s:.2f} s): where the last requests end moves req/s and tok/s, prefer the steady figures "
            "or a longer run"
        )
    return warnings


def contention_warned(warnings: str | None) -> bool:
    """Whether a run's stored warnings say other processes used more than the lab's contention
    threshold while it ran (the threshold in force when it ran)."""
    return bool(warnings) and CONTENTION_WARNING_START in str(warnings)


def join_warnings(*parts: str | None) -> str | None:
    """The warnings as one column value ("; "-separated), None when there are none."""
    return "; ".join(part for part in parts if part) or None


def steady_rate(
    times_s: Sequence[float],
    cumulative: Sequence[float | None],
    *,
    start_s: float,
    end_s: float,
    min_span_s: float = 0.0,
) -> float | None:
    """Rate of a cumulative counter inside ``[start_s, end_s]``, event to event.

    Between the first and the last sample inside the window at which the counter moved,
    the increase over the time between them; None with fewer than two such samples, moves
    spanning less than ``min_span_s`` (two batches of completions a second apart are no
    rate: 32 requests in 1 s would read 32 req/s) or a counter that went backwards (a
    restarted server).
    """
    moves: list[tuple[float, float]] = []
    previous: float | None = None
    for time_s, value in zip(times_s, cumulative, strict=False):
        if value is None:
            continue
        if previous is not None and value != previous and start_s <= time_s <= end_s:
            moves.append((time_s, value))
        previous = value
    if len(moves) < 2:
        return None
    (first_t, first_value), (last_t, last_value) = moves[0], moves[-1]
    if last_t <= first_t or last_t - first_t < min_span_s or last_value < first_value:
        return None
    return (last_value - first_value) / (last_t - first_t)


def cumulative(values: Sequence[float | None]) -> list[float]:
    """Running totals of per-bucket counts (None counts as 0)."""
    total, out = 0.0, []
    for value in values:
        total += value or 0.0
        out.append(total)
    return out


@dataclass(frozen=True)
class SteadyThroughput:
    """Steady-state figures and where they come from (``source``: server counters or client series)."""

    output_tok_per_s: float | None
    req_per_s: float | None
    source: str | None

    def part(self) -> SteadyFigures:
        """The run's steady figures (no source when there is no figure)."""
        measured = self.output_tok_per_s is not None or self.req_per_s is not None
        return SteadyFigures(
            steady_output_tok_per_s=self.output_tok_per_s,
            steady_req_per_s=self.req_per_s,
            steady_source=self.source if measured else None,
        )

    def as_figures(self) -> dict[str, Any]:
        """:meth:`part` by name."""
        return self.part().figures()


def steady_throughput(
    *,
    load_start_epoch_s: float | None,
    load_duration_s: float,
    server_times_epoch_s: Sequence[float] = (),
    server_output_tokens: Sequence[float | None] = (),
    server_requests: Sequence[float | None] = (),
    client_times_epoch_s: Sequence[float] = (),
    client_output_tokens: Sequence[float | None] = (),
    client_requests_ok: Sequence[float | None] = (),
    tokens_per_request: float | None = None,
) -> SteadyThroughput:
    """Steady output tok/s and req/s over the load window, from the backend's counters
    (cumulative, sampled each second) when it has them, else from the client's per-second
    completions (``client_*`` are per bucket, timed at the bucket's end).

    Requests complete in lock-step under closed-loop load, so req/s comes, when a token
    rate exists, from it divided by ``tokens_per_request`` (the run's own, server or client):
    smooth, where a count of whole batches inside the window is not.
    """
    if load_start_epoch_s is None or load_duration_s <= 0:
        return SteadyThroughput(None, None, None)
    window = {
        "start_s": load_start_epoch_s,
        "end_s": load_start_epoch_s + load_duration_s,
        "min_span_s": STEADY_MIN_SPAN_SHARE * load_duration_s,
    }
    for source, times, tokens, requests in (
        (STEADY_FROM_SERVER, server_times_epoch_s, server_output_tokens, server_requests),
        (
            STEADY_FROM_CLIENT,
            client_times_epoch_s,
            cumulative(client_output_tokens) if client_output_tokens else (),
            cumulative(client_requests_ok) if client_requests_ok else (),
        ),
    ):
        token_rate = steady_rate(times, tokens, **window) if tokens and any(v for v in tokens) else None
        request_rate = steady_rate(times, requests, **window) if requests else None
        if token_rate is None and request_rate is None:
            continue
        if token_rate is not None and tokens_per_request:
            request_rate = token_rate / tokens_per_request
        elif request_rate is not None and tokens_per_request:  # a server that counts requests, not tokens
            token_rate = request_rate * tokens_per_request
        return SteadyThroughput(token_rate, request_rate, source)
    return SteadyThroughput(None, None, None)


# The warnings measurement_warnings writes, by their opening words: these are recomputed from a
# run's stored figures; any other note (a fail-open cache, a full disk, unreadable /metrics) is
# an event of the run itself and kept as stored.
_RECOMPUTED_OPENINGS = (
    "k6 used ",
    "iterations were dropped",
    "requests were sent more than",
    "other processes used ",
    "client and server ",
    "the load lasted ",
)


def recomputed_warnings(
    stored: str | None,
    *,
    results: RunResults,
    load_duration_s: float | None,
    count_check: Mapping[str, Any] | None,
    contention_threshold_percent: float = CONTENTION_WARNING_CPU_PERCENT,
) -> str | None:
    """A stored run's warnings as the current code would write them: the figure-based ones
    recomputed from its stored figures and count check, the event notes kept as they were."""
    kept = [
        note
        for note in (stored or "").split("; ")
        if note and not any(opening in note[:40] for opening in _RECOMPUTED_OPENINGS)
    ]
    fresh = measurement_warnings(
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
    return join_warnings(*fresh, *kept)
