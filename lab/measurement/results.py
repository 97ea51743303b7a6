"""A run's results, typed: one declared field per figure, units in the names, None when not measured.

:class:`RunResults` is assembled from typed parts, one per producer, and each figure has
exactly one producer:

- :class:`ClientFigures`: k6 (its summary, ``k6_results.client_figures``; without one, the
  per-second stream, ``PerSecondSeries.client_figures``): counts, whole-test rates, latencies,
  client-side streaming latencies.
- :class:`ServerFigures`: the backend's /metrics deltas (``server_metrics.backend_part``).
- :class:`ResponseCacheFigures`: the response cache (``server_metrics.response_cache_part``).
- :class:`SemanticCacheFigures`: its semantic tier (``lab.analysis.semantic_cache.semantic_part``).
- :class:`ResourceFigures`: resource use while the load ran (``run_figures.resource_figures``).
- :class:`SteadyFigures`: the load window only (``checks.SteadyThroughput.part``).
- :class:`SloFigures`: an SLO evaluation (``lab.analysis.run_slo.save_evaluation``).
- :class:`MachineSpeedFigures`: the machine-speed calibration around the run (``runner.RunExecutor``).
- :class:`TraceFigures`: a trace replay (``trace_figures.trace_part``): the trace's identity,
  lateness against its schedule, its cache ceilings, what was clipped, skipped or cut.
- :class:`CheckFigures`: every reason to read the figures with care (``checks.measurement_warnings``).

A part is a frozen dataclass: a misspelt figure name is a ``TypeError`` where the part is
built (and a mypy error); a producer that hands over a mapping goes through
:meth:`FigurePart.from_figures`, which raises :class:`UnknownFigureError` for a name it
does not know instead of dropping the figure.

Output tokens per second are three figures with three names: ``output_tok_per_s`` (whole
test, k6's convention: tokens over the test's duration, :func:`whole_test_rate`, from the
summary or, without one, from the stream), ``steady_output_tok_per_s`` (the load window
only) and the live view's per-second series (``live.StreamTail.series``, ``output_tokens``
per second, shown while a run goes and never stored as a figure).

Each figure is declared once, in ``db.figures.RunFigures`` (name, type, unit, label, description,
group); :class:`RunResults` is that declaration with the foreign figures and the methods, and the
store's columns are derived from it (``db`` imports nothing from here). A unit test
(tests/unit/lab/measurement/test_figures_contract.py) fails when a figure has no producer.
**Adding a figure**: its declaration in ``db/figures.py``, a field in the part of its producer
(below) and a migration that adds its column (db/migrations.py).

Figures from outside the lab (another tool's result, a trace's own statistics) are not
the lab's columns: they go in :class:`ForeignFigures` (a source and a mapping of names to
numbers), stored in the runs' ``foreign_figures`` JSON column, keyed by their source.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from db.figures import FIGURE_NAMES, RunFigures

RESULT_FIELDS: tuple[str, ...] = FIGURE_NAMES


class UnknownFigureError(ValueError):
    """A producer handed over a figure name that no part (and so no column) knows."""


def whole_test_rate(amount: float | None, duration_s: float | None) -> float | None:
    """``amount`` per second of the whole test (k6's convention: warm-up and drain included);
    None without a duration. The one definition of ``req_per_s``, ``output_tok_per_s`` and
    ``input_tok_per_s``, whether from k6's summary or its stream."""
    if amount is None or not duration_s or duration_s <= 0:
        return None
    return amount / duration_s


@dataclass(frozen=True, kw_only=True)
class FigurePart:
    """One producer's share of :class:`RunResults` (subclasses declare the figures)."""

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The figures this part carries, in declaration order."""
        return tuple(item.name for item in dataclasses.fields(cls))

    @classmethod
    def from_figures(cls, figures: Mapping[str, Any], *, not_figures: Collection[str] = ()) -> Self:
        """This part from a producer's mapping. A key that is neither one of its figures nor
        in ``not_figures`` (the producer's declared raw counts) raises :class:`UnknownFigureError`;
        a figure the mapping lacks is None (not measured)."""
        names = cls.names()
        unknown = sorted(set(figures) - set(names) - set(not_figures))
        if unknown:
            raise UnknownFigureError(
                f"{cls.__name__} has no figure named {', '.join(unknown)} (its figures: {', '.join(names)})"
            )
        return cls(**{name: figures[name] for name in names if name in figures})

    def figures(self) -> dict[str, Any]:
        """Every figure of this part by name."""
        return {name: getattr(self, name) for name in self.names()}


@dataclass(frozen=True, kw_only=True)
class ClientFigures(FigurePart):
    """k6's side. Latencies are over successful requests only; rates over the whole test."""

    requests_ok: int | None = None
    requests_failed: int | None = None
    req_per_s: float | None = None
    output_tok_per_s: float | None = None
    input_tok_per_s: float | None = None
    latency_avg_s: float | None = None
    latency_p50_s: float | None = None
    latency_p90_s: float | None = None
    latency_p95_s: float | None = None
    latency_p99_s: float | None = None
    latency_max_s: float | None = None
    iterations_completed: int | None = None
    iterations_interrupted: int | None = None
    iterations_dropped: int | None = None
    measured_duration_s: float | None = None
    ttft_avg_s: float | None = None
    ttft_p50_s: float | None = None
    ttft_p95_s: float | None = None
    ttft_p99_s: float | None = None
    tpot_avg_s: float | None = None
    tpot_p95_s: float | None = None
    ttft_hit_avg_s: float | None = None
    ttft_hit_p95_s: float | None = None
    ttft_miss_avg_s: float | None = None
    ttft_miss_p95_s: float | None = None
    tpot_hit_avg_s: float | None = None
    tpot_miss_avg_s: float | None = None
    unstreamed_answers: int | None = None


@dataclass(frozen=True, kw_only=True)
class ServerFigures(FigurePart):
    """The backend's /metrics deltas over the run."""

    prefix_cache_hit_rate: float | None = None
    server_ttft_avg_s: float | None = None
    server_time_per_output_token_avg_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class ResponseCacheFigures(FigurePart):
    """The response cache: the proxy's counters when it ran, else what k6 saw in X-Cache."""

    response_cache_hit_rate: float | None = None
    response_cache_hits: int | None = None
    response_cache_store_errors: int | None = None


@dataclass(frozen=True, kw_only=True)
class SemanticCacheFigures(FigurePart):
    """The response cache's semantic tier, from the proxy's counters over the load."""

    response_cache_exact_hit_rate: float | None = None
    semantic_cache_hit_rate: float | None = None
    semantic_cache_verified_hits: int | None = None
    semantic_cache_false_hit_rate: float | None = None
    semantic_cache_false_hit_rate_ci95_low: float | None = None
    semantic_cache_false_hit_rate_ci95_high: float | None = None
    semantic_cache_answer_mismatch_rate: float | None = None
    semantic_cache_added_hit_p50_ms: float | None = None
    semantic_cache_added_hit_p99_ms: float | None = None
    semantic_cache_added_miss_p50_ms: float | None = None
    semantic_cache_added_miss_p99_ms: float | None = None


@dataclass(frozen=True, kw_only=True)
class ResourceFigures(FigurePart):
    """Resource use while the load ran (CPU in % of one core)."""

    k6_cpu_percent_avg: float | None = None
    backend_cpu_percent_avg: float | None = None
    backend_rss_max_mb: float | None = None
    gpu_utilization_avg_percent: float | None = None
    other_cpu_percent_avg: float | None = None
    steal_cpu_percent_avg: float | None = None


@dataclass(frozen=True, kw_only=True)
class SloFigures(FigurePart):
    """Against an SLO: goodput, the share of requests that met it, and the SLO used."""

    goodput_req_per_s: float | None = None
    slo_attainment: float | None = None
    slo_evaluated: str | None = None


@dataclass(frozen=True, kw_only=True)
class SteadyFigures(FigurePart):
    """Inside the load window only; the source says whose counters they come from."""

    steady_output_tok_per_s: float | None = None
    steady_req_per_s: float | None = None
    steady_source: str | None = None


@dataclass(frozen=True, kw_only=True)
class MachineSpeedFigures(FigurePart):
    """Seconds a fixed CPU kernel took just before and just after the load."""

    machine_calibration_before_s: float | None = None
    machine_calibration_after_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class CheckFigures(FigurePart):
    """Every reason to read the figures with care, "; "-separated."""

    measurement_warnings: str | None = None


@dataclass(frozen=True, kw_only=True)
class TraceFigures(FigurePart):
    """A trace replay: which trace (name, sha256), how late requests left against their time
    in it (ms; late: more than 50 ms), the hit rates the trace allows an unbounded exact
    response cache, an unbounded prefix cache and (a run with the semantic tier) an unbounded
    semantic cache at the run's threshold, and the requests not sent as the trace has them."""

    trace_name: str | None = None
    trace_sha256: str | None = None
    lateness_p50_ms: float | None = None
    lateness_p99_ms: float | None = None
    lateness_max_ms: float | None = None
    requests_late_over_50ms: int | None = None
    trace_response_cache_ceiling: float | None = None
    trace_prefix_reuse_ceiling: float | None = None
    trace_semantic_cache_ceiling: float | None = None
    trace_requests_clipped: int | None = None
    trace_requests_skipped: int | None = None
    trace_requests_cut: int | None = None
    trace_cut_at_s: float | None = None


# Every producer's part; each figure of RunResults is in exactly one (held by a unit test).
PARTS: tuple[type[FigurePart], ...] = (
    ClientFigures,
    ServerFigures,
    ResponseCacheFigures,
    SemanticCacheFigures,
    ResourceFigures,
    SloFigures,
    SteadyFigures,
    MachineSpeedFigures,
    CheckFigures,
    TraceFigures,
)


@dataclass(frozen=True)
class ForeignFigures:
    """Figures from outside the lab (another tool's result, a trace's own statistics):
    ``source`` names where they come from; the names are that source's, not the lab's."""

    source: str
    figures: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class RunResults(RunFigures):
    """A run's figures (declared once, in ``db.figures.RunFigures``: one per result column of the
    store, units in the names; None when not measured), and the foreign figures beside them."""

    # Not a lab figure: other tools' figures, by source (the runs' foreign_figures column).
    foreign: tuple[ForeignFigures, ...] = ()

    NOT_FIGURES: ClassVar[tuple[str, ...]] = ("foreign",)

    @classmethod
    def figure_names(cls) -> tuple[str, ...]:
        """The lab's figures (every field but ``foreign``), in declaration order."""
        return tuple(item.name for item in dataclasses.fields(cls) if item.name not in cls.NOT_FIGURES)

    @classmethod
    def from_parts(cls, *parts: FigurePart, foreign: tuple[ForeignFigures, ...] = ()) -> RunResults:
        """The results of ``parts`` (at most one of each kind); figures no part gives are None."""
        return cls(foreign=foreign).with_parts(*parts)

    def with_parts(self, *parts: FigurePart) -> RunResults:
        """A copy with the figures of ``parts`` that are known (not None) written over."""
        kinds = [type(part) for part in parts]
        if len(set(kinds)) != len(kinds):
            raise ValueError(f"one part of each kind, got {', '.join(kind.__name__ for kind in kinds)}")
        known = {name: value for part in parts for name, value in part.figures().items() if value is not None}
        return dataclasses.replace(self, **known)

    def part(self, kind: type[FigurePart]) -> FigurePart:
        """This run's figures of one part."""
        return kind(**{name: getattr(self, name) for name in kind.names()})

    @classmethod
    def from_columns(cls, row: object) -> RunResults:
        """The results stored on a run row (anything with the columns as attributes)."""
        stored = getattr(row, "foreign_figures", None) or {}
        foreign = tuple(ForeignFigures(source, dict(figures)) for source, figures in stored.items())
        return cls(**{name: getattr(row, name) for name in cls.figure_names()}, foreign=foreign)

    @classmethod
    def of_record(cls, record: Mapping[str, Any]) -> RunResults:
        """The figures of a run record or of a row of means (other keys ignored), typed. A record
        that already carries its results (``lab.analysis.compare.RunRecord``) gives them as they are."""
        carried = getattr(record, "results", None)
        if isinstance(carried, RunResults):
            return carried
        return cls(**{name: record[name] for name in cls.figure_names() if name in record})

    def foreign_figures(self) -> dict[str, dict[str, float]] | None:
        """The foreign figures as stored (``{source: {name: value}}``); None without any."""
        if not self.foreign:
            return None
        return {item.source: {name: float(value) for name, value in item.figures.items()} for item in self.foreign}

    def figure_values(self) -> dict[str, Any]:
        """Every figure by name (the lab's figures only, in declaration order)."""
        return {name: getattr(self, name) for name in self.figure_names()}

    def as_columns(self) -> dict[str, Any]:
        """Every figure as a run column (what the store writes), and the foreign figures when there are any."""
        columns = self.figure_values()
        if self.foreign:
            columns["foreign_figures"] = self.foreign_figures()
        return columns
