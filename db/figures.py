"""A run's figures, each declared once: name, type, unit, display unit, label, description, group.

:class:`RunFigures` is the one declaration. Each field is a figure: its name (units in the name),
its Python type (``int``, ``float`` or ``str``; None when not measured) and its :class:`Figure`
(unit, how it is shown, what it means, which group it belongs to). Everything else is derived:

- the store's result columns (``db.models.RunResultColumns``, one nullable column a figure);
- ``lab.measurement.results.RunResults`` (a subclass that adds foreign figures and methods), and
  so the run records, the CSV export and ``lab.api``'s columns;
- the pages' headers, rounding and tooltips (``pages.view.names``, ``pages.view.tables``) and the
  report's labels (``lab.report.tables``);
- the site's figure reference (``scripts/docs_reference.py``).

**Adding a figure**: a field here, its producer's field in ``lab.measurement.results`` (the part
whose code fills it) and a migration that adds its column (``db/migrations.py``).

This module sits in ``db`` because the store derives its columns from it and ``db`` imports
nothing from ``lab``; it imports nothing but the standard library.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Unit(StrEnum):
    """The unit a figure is stored in (its identity); :data:`UNIT_WORDS` says it in words."""

    COUNT = "count"
    TEXT = "text"
    SECONDS = "s"
    MILLISECONDS = "ms"
    REQUESTS_PER_S = "req/s"
    TOKENS_PER_S = "tok/s"
    SHARE = "share"
    PERCENT_OF_CORE = "% of a core"
    PERCENT = "%"
    MEBIBYTES = "MiB"


UNIT_WORDS: dict[Unit, str] = {
    Unit.COUNT: "count",
    Unit.TEXT: "text",
    Unit.SECONDS: "seconds",
    Unit.MILLISECONDS: "milliseconds",
    Unit.REQUESTS_PER_S: "requests per second",
    Unit.TOKENS_PER_S: "tokens per second",
    Unit.SHARE: "share, 0 to 1",
    Unit.PERCENT_OF_CORE: "% of one core",
    Unit.PERCENT: "%",
    Unit.MEBIBYTES: "MiB (2^20 bytes)",
}

# How a stored unit is shown unless a figure says otherwise: the unit in headers, the factor
# applied to the stored number, and the decimals.
_DISPLAY: dict[Unit, tuple[str, float, int | None]] = {
    Unit.COUNT: ("", 1.0, None),
    Unit.TEXT: ("", 1.0, None),
    Unit.SECONDS: ("s", 1.0, 3),
    Unit.MILLISECONDS: ("ms", 1.0, 1),
    Unit.REQUESTS_PER_S: ("req/s", 1.0, 2),
    Unit.TOKENS_PER_S: ("tok/s", 1.0, 1),
    Unit.SHARE: ("%", 100.0, 1),
    Unit.PERCENT_OF_CORE: ("% of a core", 1.0, 1),
    Unit.PERCENT: ("%", 1.0, 1),
    Unit.MEBIBYTES: ("MiB", 1.0, 0),
}


@dataclass(frozen=True)
class FigureGroup:
    """Figures that come from one place and are read together (a section of the reference)."""

    title: str
    description: str


CLIENT = FigureGroup(
    "Client side, from k6",
    "Counts, whole-test rates and latencies as k6 measured them (warm-up and drain included). "
    "Latencies are over successful requests only.",
)
STREAMING = FigureGroup(
    "Client-side streaming latency",
    "Streamed runs only, from k6/lib.js's lab_ttft/lab_tpot: TTFT is the time to first byte, sent with "
    "the first token's chunk; TPOT per request is (duration - TTFT) / (tokens - 1). *_hit/*_miss: split "
    "by the response cache's X-Cache. Answers that came back as one body although a stream was asked "
    "for have the whole body as their TTFT: a run with any is not a streamed measurement.",
)
SERVER = FigureGroup("Server side, from /metrics deltas", "The backend's and the response cache's counters.")
SEMANTIC_CACHE = FigureGroup(
    "The semantic cache",
    "Runs with cache.tier semantic (services/cache_proxy/semantic.py), from the proxy's counters over the load: "
    "each tier's hits over the requests looked up, the false-hit rate (verified semantic hits whose fresh answer's "
    "text differed) with its 95% Wilson interval, the share whose answers embed less than 0.8 alike, and the "
    "latency the tier added (embedding and search, its wait for the embedding thread included) on requests it "
    "answered and on requests that went upstream anyway.",
)
RESOURCES = FigureGroup("Resource use while the load ran", "CPU in % of one core, memory at its peak.")
SLO = FigureGroup(
    "Against an SLO",
    "Set when a run is evaluated, e.g. as a capacity probe: requests per second that met every "
    "per-request limit, their share of all requests, and the SLO used.",
)
CONTENTION = FigureGroup("Host contention", "CPU used by processes that are not the run's (% of one core), and steal.")
STEADY = FigureGroup(
    "Steady state",
    "Inside the load window only (no warm-up, no drain); the source says whose counters they come "
    "from (server counters or client series).",
)
MACHINE_SPEED = FigureGroup(
    "The machine's speed around the run",
    "Seconds a fixed CPU kernel took just before and just after the load "
    "(lab/measurement/machine_speed.py); over an experiment they give each run a machine-speed "
    "index (1.0 = the median run).",
)
CHECKS = FigureGroup(
    "Checks",
    "Every reason to read the figures with care (k6 CPU, dropped iterations, contention, count-check "
    "mismatch, a run too short for its latency...).",
)
TRACE = FigureGroup(
    "A trace replay",
    "Workload trace: the trace's identity, how late each request left against its time in the trace "
    "(send time less schedule), the hit rates the trace itself allows an unbounded exact response "
    "cache and an unbounded prefix cache, and what of the trace was not sent as it is (clipped or "
    "skipped for the context, cut at the duration).",
)


@dataclass(frozen=True)
class Figure:
    """One figure as declared: what it is called, in which unit, how it is shown and what it means.

    ``name`` and ``python_type`` come from its field in :class:`RunFigures`. ``label`` is the
    human name of tables, legends and the CSV's human headers; ``short_label`` the name of a
    narrow metric tile (the label when not given). ``max_length`` sizes a text column (None: no limit).
    """

    unit: Unit
    label: str
    description: str
    group: FigureGroup
    short_label: str | None = None
    decimals: int | None = None
    display_unit_override: str | None = None
    max_length: int | None = None
    name: str = ""
    python_type: type = float

    @property
    def display_unit(self) -> str:
        """The unit shown beside the number ("%" for a share, "" for a count or text)."""
        return self.display_unit_override if self.display_unit_override is not None else _DISPLAY[self.unit][0]

    @property
    def display_scale(self) -> float:
        """The factor from the stored number to the shown one (100 for a share shown in %)."""
        return _DISPLAY[self.unit][1]

    @property
    def display_decimals(self) -> int | None:
        """The decimals shown (None: a whole number or text)."""
        return self.decimals if self.decimals is not None else _DISPLAY[self.unit][2]

    @property
    def header_unit(self) -> str:
        """The unit a header adds after the label: none when the label already ends with it ("req/s")."""
        unit = self.display_unit
        return "" if not unit or self.label == unit or self.label.endswith(f" {unit}") else unit

    @property
    def header(self) -> str:
        """The column header: the label, and its unit in brackets unless the label carries it."""
        return f"{self.label} ({self.header_unit})" if self.header_unit else self.label

    @property
    def tile_label(self) -> str:
        return self.short_label or self.label


def figure(
    unit: Unit,
    label: str,
    description: str,
    group: FigureGroup,
    *,
    short_label: str | None = None,
    decimals: int | None = None,
    display_unit: str | None = None,
    max_length: int | None = None,
) -> Any:
    """A field of :class:`RunFigures` (default None: not measured) carrying its :class:`Figure`."""
    declared = Figure(
        unit,
        label,
        description,
        group,
        short_label=short_label,
        decimals=decimals,
        display_unit_override=display_unit,
        max_length=max_length,
    )
    return dataclasses.field(default=None, metadata={"figure": declared})


@dataclass(frozen=True, kw_only=True)
class RunFigures:
    """A run's figures, in the store's column order; None when not measured."""

    # k6: counts, rates over the whole test, latencies over successful requests
    requests_ok: int | None = figure(Unit.COUNT, "requests ok", "Requests that finished with a good answer.", CLIENT)
    requests_failed: int | None = figure(
        Unit.COUNT, "failed requests", "Requests that failed (an error status, a timeout, a broken stream).", CLIENT
    )
    req_per_s: float | None = figure(
        Unit.REQUESTS_PER_S, "req/s", "Requests finished per second over the whole test (k6, drain included).", CLIENT
    )
    output_tok_per_s: float | None = figure(
        Unit.TOKENS_PER_S, "output tok/s", "Output tokens over the whole test's duration (k6's convention).", CLIENT
    )
    input_tok_per_s: float | None = figure(
        Unit.TOKENS_PER_S, "input tok/s", "Prompt tokens over the whole test's duration.", CLIENT
    )
    latency_avg_s: float | None = figure(Unit.SECONDS, "avg latency", "Mean request latency.", CLIENT)
    latency_p50_s: float | None = figure(Unit.SECONDS, "p50 latency", "Median request latency.", CLIENT)
    latency_p90_s: float | None = figure(Unit.SECONDS, "p90 latency", "90th percentile of request latency.", CLIENT)
    latency_p95_s: float | None = figure(Unit.SECONDS, "p95 latency", "95th percentile of request latency.", CLIENT)
    latency_p99_s: float | None = figure(Unit.SECONDS, "p99 latency", "99th percentile of request latency.", CLIENT)
    latency_max_s: float | None = figure(Unit.SECONDS, "max latency", "The slowest request's latency.", CLIENT)
    iterations_completed: int | None = figure(
        Unit.COUNT, "iterations done", "k6 iterations that ran to their end.", CLIENT
    )
    iterations_interrupted: int | None = figure(
        Unit.COUNT, "iterations cut by the stop", "k6 iterations still running when the load stopped.", CLIENT
    )
    iterations_dropped: int | None = figure(
        Unit.COUNT,
        "iterations dropped",
        "Arrivals k6 could not start (no VU free): the load asked was not sent.",
        CLIENT,
    )
    measured_duration_s: float | None = figure(
        Unit.SECONDS, "measured", "The test's duration as k6 measured it.", CLIENT, decimals=1
    )
    # client-side streaming latency
    ttft_avg_s: float | None = figure(Unit.SECONDS, "TTFT avg", "Mean time to first token, client side.", STREAMING)
    ttft_p50_s: float | None = figure(Unit.SECONDS, "TTFT p50", "Median time to first token.", STREAMING)
    ttft_p95_s: float | None = figure(Unit.SECONDS, "TTFT p95", "95th percentile of time to first token.", STREAMING)
    ttft_p99_s: float | None = figure(Unit.SECONDS, "TTFT p99", "99th percentile of time to first token.", STREAMING)
    tpot_avg_s: float | None = figure(
        Unit.SECONDS, "time per output token avg", "Mean time per output token after the first.", STREAMING
    )
    tpot_p95_s: float | None = figure(
        Unit.SECONDS, "time per output token p95", "95th percentile of time per output token.", STREAMING
    )
    ttft_hit_avg_s: float | None = figure(
        Unit.SECONDS, "TTFT avg, cache hits", "Mean time to first token of response-cache hits.", STREAMING
    )
    ttft_hit_p95_s: float | None = figure(
        Unit.SECONDS, "TTFT p95, cache hits", "95th percentile of time to first token of cache hits.", STREAMING
    )
    ttft_miss_avg_s: float | None = figure(
        Unit.SECONDS, "TTFT avg, cache misses", "Mean time to first token of response-cache misses.", STREAMING
    )
    ttft_miss_p95_s: float | None = figure(
        Unit.SECONDS, "TTFT p95, cache misses", "95th percentile of time to first token of cache misses.", STREAMING
    )
    tpot_hit_avg_s: float | None = figure(
        Unit.SECONDS, "time per output token avg, cache hits", "Mean time per output token of cache hits.", STREAMING
    )
    tpot_miss_avg_s: float | None = figure(
        Unit.SECONDS,
        "time per output token avg, cache misses",
        "Mean time per output token of cache misses.",
        STREAMING,
    )
    unstreamed_answers: int | None = figure(
        Unit.COUNT,
        "answers not streamed",
        "Answers that came back as one body although a stream was asked for.",
        STREAMING,
    )
    # the backend's /metrics and the response cache
    prefix_cache_hit_rate: float | None = figure(
        Unit.SHARE,
        "vLLM prefix cache hit",
        "vLLM's prefix (KV) cache hit rate.",
        SERVER,
        short_label="prefix cache hit",
    )
    response_cache_hit_rate: float | None = figure(
        Unit.SHARE, "Redis cache hit", "The Redis response cache's hit rate (exact and semantic hits).", SERVER
    )
    response_cache_hits: int | None = figure(
        Unit.COUNT, "Redis cache hits", "Answers the response cache served.", SERVER
    )
    response_cache_store_errors: int | None = figure(
        Unit.COUNT, "cache store errors", "Answers the response cache failed to store.", SERVER
    )
    server_ttft_avg_s: float | None = figure(
        Unit.SECONDS, "server TTFT avg", "Time to first token, from /metrics.", SERVER
    )
    server_time_per_output_token_avg_s: float | None = figure(
        Unit.SECONDS, "server time per output token", "Time per output token, from /metrics.", SERVER
    )
    # the semantic tier of the response cache
    response_cache_exact_hit_rate: float | None = figure(
        Unit.SHARE, "exact cache hit", "Hits of the exact tier over the requests looked up.", SEMANTIC_CACHE
    )
    semantic_cache_hit_rate: float | None = figure(
        Unit.SHARE, "semantic cache hit", "Paraphrases answered SEMANTIC over the requests looked up.", SEMANTIC_CACHE
    )
    semantic_cache_verified_hits: int | None = figure(
        Unit.COUNT, "semantic hits verified", "Semantic hits also asked of the upstream and compared.", SEMANTIC_CACHE
    )
    semantic_cache_false_hit_rate: float | None = figure(
        Unit.SHARE, "semantic false hits", "Verified semantic hits whose fresh answer's text differed.", SEMANTIC_CACHE
    )
    semantic_cache_false_hit_rate_ci95_low: float | None = figure(
        Unit.SHARE, "semantic false hits, 95% low", "The Wilson interval's low end.", SEMANTIC_CACHE
    )
    semantic_cache_false_hit_rate_ci95_high: float | None = figure(
        Unit.SHARE, "semantic false hits, 95% high", "The Wilson interval's high end.", SEMANTIC_CACHE
    )
    semantic_cache_answer_mismatch_rate: float | None = figure(
        Unit.SHARE,
        "semantic answers unalike",
        "Verified semantic hits whose served and fresh answers embed less than 0.8 alike.",
        SEMANTIC_CACHE,
    )
    semantic_cache_added_hit_p50_ms: float | None = figure(
        Unit.MILLISECONDS, "semantic added on a hit p50", "Embedding and search on a SEMANTIC answer.", SEMANTIC_CACHE
    )
    semantic_cache_added_hit_p99_ms: float | None = figure(
        Unit.MILLISECONDS, "semantic added on a hit p99", "Embedding and search on a SEMANTIC answer.", SEMANTIC_CACHE
    )
    semantic_cache_added_miss_p50_ms: float | None = figure(
        Unit.MILLISECONDS,
        "semantic added on a miss p50",
        "Embedding and search on a request sent upstream.",
        SEMANTIC_CACHE,
    )
    semantic_cache_added_miss_p99_ms: float | None = figure(
        Unit.MILLISECONDS,
        "semantic added on a miss p99",
        "Embedding and search on a request sent upstream.",
        SEMANTIC_CACHE,
    )
    # resource use while the load ran
    k6_cpu_percent_avg: float | None = figure(
        Unit.PERCENT_OF_CORE, "k6 CPU avg", "k6's CPU, average, % of one core.", RESOURCES, short_label="k6 CPU"
    )
    backend_cpu_percent_avg: float | None = figure(
        Unit.PERCENT_OF_CORE,
        "backend CPU avg",
        "The backend's CPU, average, % of one core.",
        RESOURCES,
        short_label="backend CPU",
    )
    backend_rss_max_mb: float | None = figure(
        Unit.MEBIBYTES,
        "backend memory max",
        "The backend's largest resident memory (RSS).",
        RESOURCES,
        short_label="backend memory",
    )
    gpu_utilization_avg_percent: float | None = figure(
        Unit.PERCENT, "GPU use avg", "GPU utilisation, average over the load.", RESOURCES
    )
    # an SLO
    goodput_req_per_s: float | None = figure(
        Unit.REQUESTS_PER_S, "goodput", "Requests per second that met every per-request limit of the SLO.", SLO
    )
    slo_attainment: float | None = figure(
        Unit.SHARE, "SLO attainment", "The share of requests that met every limit of the SLO.", SLO
    )
    slo_evaluated: str | None = figure(Unit.TEXT, "SLO evaluated", "The SLO the run was evaluated against.", SLO)
    # host contention
    other_cpu_percent_avg: float | None = figure(
        Unit.PERCENT_OF_CORE,
        "other processes' CPU avg",
        "Other processes' CPU on the machine during the load, average, % of one core.",
        CONTENTION,
        short_label="other CPU",
    )
    steal_cpu_percent_avg: float | None = figure(
        Unit.PERCENT_OF_CORE,
        "CPU stolen by the hypervisor avg",
        "CPU time the hypervisor gave to other guests, average, % of one core.",
        CONTENTION,
    )
    # the load window
    steady_output_tok_per_s: float | None = figure(
        Unit.TOKENS_PER_S,
        "steady output tok/s",
        "Output tokens per second in the load window only.",
        STEADY,
        short_label="steady tok/s",
    )
    steady_req_per_s: float | None = figure(
        Unit.REQUESTS_PER_S, "steady req/s", "Requests per second in the load window only.", STEADY
    )
    steady_source: str | None = figure(
        Unit.TEXT, "steady window from", "Whose counters the steady figures come from.", STEADY, max_length=50
    )
    # machine speed
    machine_calibration_before_s: float | None = figure(
        Unit.SECONDS,
        "machine speed kernel before",
        "Seconds the fixed kernel took just before the load.",
        MACHINE_SPEED,
    )
    machine_calibration_after_s: float | None = figure(
        Unit.SECONDS, "machine speed kernel after", "Seconds the fixed kernel took just after the load.", MACHINE_SPEED
    )
    # checks
    measurement_warnings: str | None = figure(
        Unit.TEXT, "measurement warnings", "Every reason to read the figures with care, '; '-separated.", CHECKS
    )
    # a trace replay
    trace_name: str | None = figure(Unit.TEXT, "trace", "The replayed trace's name.", TRACE, max_length=200)
    trace_sha256: str | None = figure(Unit.TEXT, "trace sha256", "The replayed trace's sha256.", TRACE, max_length=64)
    lateness_p50_ms: float | None = figure(
        Unit.MILLISECONDS, "p50 lateness", "Send time less the trace's time, median.", TRACE
    )
    lateness_p99_ms: float | None = figure(
        Unit.MILLISECONDS, "p99 lateness", "Send time less the trace's time, p99.", TRACE
    )
    lateness_max_ms: float | None = figure(
        Unit.MILLISECONDS, "max lateness", "Send time less the trace's time, at most.", TRACE
    )
    requests_late_over_50ms: int | None = figure(
        Unit.COUNT, "requests > 50 ms late", "Requests sent over 50 ms late.", TRACE, short_label="late > 50 ms"
    )
    trace_response_cache_ceiling: float | None = figure(
        Unit.SHARE,
        "trace's response cache ceiling",
        "The hit rate an unbounded exact response cache reaches on this trace (beside Redis cache hit).",
        TRACE,
        short_label="response cache ceiling",
    )
    trace_prefix_reuse_ceiling: float | None = figure(
        Unit.SHARE,
        "trace's prefix reuse ceiling",
        "The share of prompt tokens an unbounded prefix cache serves (beside prefix cache hit).",
        TRACE,
        short_label="prefix reuse ceiling",
    )
    trace_semantic_cache_ceiling: float | None = figure(
        Unit.SHARE,
        "trace's semantic cache ceiling",
        "The hit rate an unbounded semantic response cache reaches on this trace at the run's cache.similarity "
        "(a prompt of the same output length at least that similar came before; lines with text only); "
        "runs with cache.tier semantic only.",
        TRACE,
        short_label="semantic cache ceiling",
    )
    trace_requests_clipped: int | None = figure(
        Unit.COUNT, "trace prompts clipped", "Prompts clipped to fit the context.", TRACE
    )
    trace_requests_skipped: int | None = figure(
        Unit.COUNT, "trace prompts skipped", "Prompts skipped: too long for the context.", TRACE
    )
    trace_requests_cut: int | None = figure(
        Unit.COUNT, "trace requests cut", "Requests of the trace not sent: cut at the duration.", TRACE
    )
    trace_cut_at_s: float | None = figure(
        Unit.SECONDS, "trace cut at", "Where the trace was cut (seconds into it).", TRACE, decimals=0
    )


def _declared(field: dataclasses.Field[Any], annotation: Any) -> Figure:
    """A field's :class:`Figure` with its name and its type (the one of ``T | None`` that is not None)."""
    (python_type,) = [kind for kind in typing.get_args(annotation) if kind is not type(None)]
    declared: Figure = field.metadata["figure"]
    return dataclasses.replace(declared, name=field.name, python_type=python_type)


# Every figure, in the store's column order.
_HINTS = typing.get_type_hints(RunFigures)
FIGURES: tuple[Figure, ...] = tuple(_declared(field, _HINTS[field.name]) for field in dataclasses.fields(RunFigures))
FIGURE_NAMES: tuple[str, ...] = tuple(item.name for item in FIGURES)
FIGURES_BY_NAME: dict[str, Figure] = {item.name: item for item in FIGURES}
# The groups, in the order their first figure comes.
GROUPS: tuple[FigureGroup, ...] = tuple(dict.fromkeys(item.group for item in FIGURES))


def figure_of(field_name: str) -> Figure | None:
    """The declaration of a figure by its name; None for a name that is not a figure."""
    return FIGURES_BY_NAME.get(field_name)


# Every figure's attribute holding its own name: what :func:`figure_by` reads a selector on.
_NAMES_OF_FIGURES = RunFigures(**dict[str, Any]({name: name for name in FIGURE_NAMES}))


def figure_by(select: typing.Callable[[RunFigures], object]) -> Figure:
    """The declaration of the figure ``select`` reads, e.g. ``figure_by(lambda f: f.req_per_s)``:
    a figure named by an attribute (typed, found by "find usages"), never by a string."""
    name = select(_NAMES_OF_FIGURES)
    if not isinstance(name, str) or name not in FIGURES_BY_NAME:
        raise ValueError(f"the selector reads no figure of RunFigures (it gave {name!r})")
    return FIGURES_BY_NAME[name]
