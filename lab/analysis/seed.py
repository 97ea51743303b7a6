"""The seed reproduction in one place: the seed's published figures, how our runs line up beside
its rows, and the ratios it drew its conclusions from, computed by the same code over its rows
and over ours.

Everything here is typed (the report in :mod:`lab.report` and the Compare page render these
objects; neither rebuilds them). The seed's three set-ups map onto our backends through the
registry (:class:`lab.backends.SeedSetup`, declared by each kind), never by a backend's name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from lab.analysis.aggregation import aggregate, done_runs, mean_of, ratio, ratio_between, vus_range
from lab.analysis.statistics import RatioInterval, positive_mean_interval
from lab.backends import SeedSetup, seed_setup_backend, seed_setup_of

OUTPUT_TOK_PER_S, REQ_PER_S = "output_tok_per_s", "req_per_s"
LATENCY_AVG_S, LATENCY_MAX_S = "latency_avg_s", "latency_max_s"
PREFIX_HIT_RATE, RESPONSE_HIT_RATE = "prefix_cache_hit_rate", "response_cache_hit_rate"


@dataclass(frozen=True)
class SeedFigures:
    """One row of a seed table as the seed study published it (transcribed here), latencies in seconds."""

    setup: SeedSetup
    vus: int | None = None
    prompts: int | None = None
    output_tok_per_s: float | None = None
    input_tok_per_s: float | None = None
    req_per_s: float | None = None
    latency_avg_s: float | None = None
    latency_p95_s: float | None = None
    latency_max_s: float | None = None
    prefix_cache_hit_rate: float | None = None
    response_cache_hit_rate: float | None = None
    response_cache_hits_as_written: str | None = None  # "1/836": the seed's words, not a rounded share

    def as_record(self) -> dict[str, Any]:
        """The row as a done run of the backend that reproduces its set-up, so one code computes
        the seed's ratios and ours."""
        figures = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in ("setup", "response_cache_hits_as_written")
        }
        return {**figures, "status": "done", "backend": seed_setup_backend(self.setup)}


# How the seed's tables name its set-ups, and experiment 2's "set-up" column.
SERVER_NAMES: dict[SeedSetup, str] = {
    SeedSetup.NAIVE: "Transformers",
    SeedSetup.VLLM: "vLLM",
    SeedSetup.VLLM_CACHE: "vLLM + Redis",
}
EXP2_SETUP_NAMES: dict[SeedSetup, str] = {SeedSetup.VLLM: "vLLM direct", SeedSetup.VLLM_CACHE: "vLLM + Redis"}

_NAIVE, _VLLM, _CACHED = SeedSetup.NAIVE, SeedSetup.VLLM, SeedSetup.VLLM_CACHE
SEED_EXP1: tuple[SeedFigures, ...] = (
    SeedFigures(_NAIVE, vus=1, output_tok_per_s=27.0, req_per_s=0.21, latency_avg_s=4.73, latency_p95_s=6.51),
    SeedFigures(_VLLM, vus=1, output_tok_per_s=139.0, req_per_s=1.09, latency_avg_s=0.92, latency_p95_s=0.96),
    SeedFigures(_NAIVE, vus=8, output_tok_per_s=25.6, req_per_s=0.20, latency_avg_s=31.08, latency_p95_s=43.39),
    SeedFigures(_VLLM, vus=8, output_tok_per_s=1045.0, req_per_s=8.17, latency_avg_s=0.98, latency_p95_s=1.05),
    SeedFigures(_NAIVE, vus=32, output_tok_per_s=19.9, req_per_s=0.16, latency_avg_s=46.89, latency_p95_s=81.0),
    SeedFigures(_VLLM, vus=32, output_tok_per_s=3463.0, req_per_s=27.05, latency_avg_s=1.18, latency_p95_s=1.25),
)
SEED_EXP2: tuple[SeedFigures, ...] = (
    SeedFigures(_VLLM, prompts=50, req_per_s=27.4, latency_avg_s=1.16, latency_p95_s=1.20, latency_max_s=1.42),
    SeedFigures(_CACHED, prompts=50, req_per_s=2811.0, latency_avg_s=0.0113, latency_p95_s=0.0144, latency_max_s=1.43),
    SeedFigures(_VLLM, prompts=1000, req_per_s=27.1, latency_avg_s=1.17, latency_p95_s=1.23, latency_max_s=1.46),
    # The seed states experiment 2's hit rate for 1,000 prompts only ("hit rate 98%").
    SeedFigures(
        _CACHED,
        prompts=1000,
        req_per_s=944.0,
        latency_avg_s=0.0338,
        latency_p95_s=0.0151,
        latency_max_s=1.58,
        response_cache_hit_rate=0.98,
    ),
)
SEED_EXP3: tuple[SeedFigures, ...] = (
    SeedFigures(
        _NAIVE, req_per_s=0.29, output_tok_per_s=27.0, input_tok_per_s=276.0, latency_avg_s=48.2, latency_p95_s=87.0
    ),
    SeedFigures(
        _VLLM,
        req_per_s=11.8,
        output_tok_per_s=1195.0,
        input_tok_per_s=14049.0,
        latency_avg_s=2.53,
        latency_p95_s=4.66,
        prefix_cache_hit_rate=0.821,
    ),
    SeedFigures(
        _CACHED,
        req_per_s=11.9,
        output_tok_per_s=1213.0,
        input_tok_per_s=14144.0,
        latency_avg_s=2.55,
        latency_p95_s=4.53,
        prefix_cache_hit_rate=0.821,
        response_cache_hit_rate=1 / 836,
        response_cache_hits_as_written="1/836",
    ),
)


@dataclass(frozen=True)
class SeedExperiment:
    """One of the seed's experiments: its preset, its published rows, the load its rows vary
    (``vus``, ``prompts``, or None for one load) and the figures of ours shown beside them."""

    preset: str
    published: tuple[SeedFigures, ...]
    load: str | None
    figures: tuple[str, ...]

    @property
    def keys(self) -> tuple[str, ...]:
        """How our runs are grouped into the table's rows."""
        return (self.load, "backend") if self.load else ("backend",)

    def published_row(self, setup: SeedSetup | None, load_value: Any = None) -> SeedFigures | None:
        """The seed's row for ``setup`` at ``load_value`` of the experiment's load; None if it has none."""
        return next(
            (
                row
                for row in self.published
                if row.setup is setup and (self.load is None or getattr(row, self.load) == load_value)
            ),
            None,
        )

    def records(self) -> list[dict[str, Any]]:
        """The published rows as done run records (see :meth:`SeedFigures.as_record`)."""
        return [row.as_record() for row in self.published]


SEED_EXPERIMENTS: dict[str, SeedExperiment] = {
    experiment.preset: experiment
    for experiment in (
        SeedExperiment(
            "seed-exp1",
            SEED_EXP1,
            "vus",
            (OUTPUT_TOK_PER_S, REQ_PER_S, LATENCY_AVG_S, "latency_p95_s", "steady_output_tok_per_s"),
        ),
        SeedExperiment(
            "seed-exp2",
            SEED_EXP2,
            "prompts",
            (REQ_PER_S, LATENCY_AVG_S, "latency_p95_s", LATENCY_MAX_S, RESPONSE_HIT_RATE),
        ),
        SeedExperiment(
            "seed-exp3",
            SEED_EXP3,
            None,
            (
                REQ_PER_S,
                OUTPUT_TOK_PER_S,
                "input_tok_per_s",
                LATENCY_AVG_S,
                "latency_p95_s",
                PREFIX_HIT_RATE,
                RESPONSE_HIT_RATE,
                "response_cache_hits",
            ),
        ),
    )
}


@dataclass(frozen=True)
class SeedMatch:
    """Whether the seed's table applies to chosen runs: the preset they all come from, and None
    as ``why_not`` when they ran the seed's backends and workload, measured by the lab."""

    preset: str | None
    why_not: str | None = None

    @property
    def applies(self) -> bool:
        return self.preset is not None and self.why_not is None


def matching_seed_preset(records: Sequence[Mapping[str, Any]]) -> SeedMatch:
    """The seed preset all ``records`` come from (exactly one), and why its table does not apply
    when they ran other backends or another workload than the seed's, or were imported."""
    from lab.specs.schema import load_preset

    presets = {record.get("preset") for record in records}
    if len(presets) != 1:
        return SeedMatch(None)
    preset = presets.pop()
    if preset not in SEED_EXPERIMENTS:
        return SeedMatch(None)
    spec = load_preset(str(preset))
    backends = {str(value) for value in spec.grid.get("backend", [spec.base.backend])}
    workload = spec.base.workload.kind
    problems = []
    if others := sorted({str(r.get("backend")) for r in records} - backends):
        problems.append(f"backend {', '.join(others)} (the seed's: {', '.join(sorted(backends))})")
    if others := sorted({str(r.get("workload")) for r in records} - {workload}):
        problems.append(f"workload {', '.join(others)} (the seed's: {workload})")
    if imported := sorted({str(r.get("source")) for r in records if r.get("source") not in (None, "lab")}):
        problems.append(f"runs imported from {', '.join(imported)}")
    if problems:
        return SeedMatch(str(preset), f"runs of {preset} with {'; '.join(problems)} are not the seed's set-up")
    return SeedMatch(str(preset))


# -- ours beside the seed's ------------------------------------------------------------------


@dataclass(frozen=True)
class SeedTableRow:
    """One row of ours beside the seed's: the done runs' means with their 95% CI and counts
    (an :func:`lab.analysis.aggregation.aggregate` row), and the seed's row for the same set-up
    and load (None where the seed has none)."""

    backend: str
    setup: SeedSetup | None
    ours: dict[str, Any]
    seed: SeedFigures | None


def seed_table_rows(preset: str, records: Sequence[Mapping[str, Any]]) -> list[SeedTableRow]:
    """Our done runs of ``preset`` grouped like the seed's table, each beside the seed's row:
    by load then backend name, or in the seed's set-up order where its rows have one load."""
    experiment = SEED_EXPERIMENTS[preset]
    setup_order = list(SeedSetup)

    def order(row: dict[str, Any]) -> tuple[Any, ...]:
        if experiment.load:
            return (row[experiment.load] or 0, row["backend"])
        setup = seed_setup_of(row["backend"])
        return (setup_order.index(setup) if setup else len(setup_order),)

    rows = []
    for ours in sorted(aggregate(records, experiment.keys, experiment.figures), key=order):
        setup = seed_setup_of(ours["backend"])
        seed = experiment.published_row(setup, ours.get(experiment.load) if experiment.load else None)
        rows.append(SeedTableRow(backend=ours["backend"], setup=setup, ours=ours, seed=seed))
    return rows


# -- the ratios the seed drew its conclusions from ---------------------------------------------


@dataclass(frozen=True)
class SetupRatio:
    """``numerator``'s mean ``figure`` over ``denominator``'s, at ``vus`` or ``prompts`` when given."""

    figure: str
    numerator: SeedSetup
    denominator: SeedSetup
    value: float | None
    vus: int | None = None
    prompts: int | None = None
    interval: RatioInterval | None = None  # 95%, over the repeats (None for the seed's single rows)


@dataclass(frozen=True)
class GrowthRatio:
    """A set-up's mean ``figure`` at ``high_vus`` over its mean at ``low_vus``."""

    setup: SeedSetup
    figure: str
    low_vus: int
    high_vus: int
    value: float | None
    interval: RatioInterval | None = None  # 95%, over the repeats


@dataclass(frozen=True)
class HitRate:
    """A set-up's mean cache hit rate (a share, not a ratio), at ``prompts`` when given."""

    setup: SeedSetup
    figure: str
    value: float | None
    prompts: int | None = None
    ci95_low: float | None = None  # a share: the interval stays within [0, 1]
    ci95_high: float | None = None


Ratio = SetupRatio | GrowthRatio


def seed_records(preset: str) -> list[dict[str, Any]]:
    """The seed study's published figures of ``preset`` as run records (one per cell)."""
    return SEED_EXPERIMENTS[preset].records()


def setup_mean(records: Sequence[Mapping[str, Any]], figure: str, setup: SeedSetup, **match: Any) -> float | None:
    """Mean of ``figure`` over the done runs of the backend reproducing ``setup`` that match ``match``."""
    return mean_of(records, figure, backend=seed_setup_backend(setup), **match)


def hit_rate(
    records: Sequence[Mapping[str, Any]], figure: str, setup: SeedSetup, prompts: int | None = None
) -> HitRate:
    """``setup``'s mean ``figure`` (a share) with its 95% interval, kept within [0, 1]."""
    match = {"prompts": prompts} if prompts is not None else {}
    values = [
        r.get(figure)
        for r in done_runs(records)
        if r.get("backend") == seed_setup_backend(setup) and all(r.get(k) == v for k, v in match.items())
    ]
    interval = positive_mean_interval(values)
    high = None if interval.ci95_high is None else min(1.0, interval.ci95_high)
    return HitRate(setup, figure, setup_mean(records, figure, setup, **match), prompts, interval.ci95_low, high)


def setup_ratio(
    records: Sequence[Mapping[str, Any]], figure: str, numerator: SeedSetup, denominator: SeedSetup, **load: Any
) -> SetupRatio:
    """``numerator`` over ``denominator`` in ``figure``, at one ``vus=`` or ``prompts=`` when given."""
    interval = ratio_between(
        records,
        figure,
        {"backend": seed_setup_backend(numerator), **load},
        {"backend": seed_setup_backend(denominator), **load},
    )
    # One estimator a figure: the point is the interval's own (paired rounds: the geometric mean
    # of the per-round ratios), the ratio of means only where no interval's point exists.
    value = interval.ratio
    if value is None:
        value = ratio(setup_mean(records, figure, numerator, **load), setup_mean(records, figure, denominator, **load))
    return SetupRatio(figure, numerator, denominator, value, **load, interval=interval)


def growth(
    records: Sequence[Mapping[str, Any]], setup: SeedSetup, figure: str, low_vus: int, high_vus: int
) -> GrowthRatio:
    """``setup``'s ``figure`` at ``high_vus`` over at ``low_vus``."""
    backend = seed_setup_backend(setup)
    interval = ratio_between(
        records, figure, {"backend": backend, "vus": high_vus}, {"backend": backend, "vus": low_vus}
    )
    value = interval.ratio  # one estimator a figure, as in setup_ratio
    if value is None:
        value = ratio(setup_mean(records, figure, setup, vus=high_vus), setup_mean(records, figure, setup, vus=low_vus))
    return GrowthRatio(setup, figure, low_vus, high_vus, value, interval)


@dataclass(frozen=True)
class Exp1Ratios:
    """Experiment 1: vLLM over naive output tok/s per VU count; each set-up's output tok/s and
    average latency growth from the lowest to the highest VUs; vLLM's prefix-cache hit rate."""

    speedups: tuple[SetupRatio, ...]
    growths: tuple[GrowthRatio, ...]  # empty under two VU counts
    prefix_cache_hit_rate: HitRate

    def speedup_at(self, vus: int) -> float | None:
        return next((r.value for r in self.speedups if r.vus == vus), None)

    def growth_of(self, setup: SeedSetup, figure: str) -> GrowthRatio | None:
        return next((g for g in self.growths if g.setup is setup and g.figure == figure), None)

    @property
    def ratios(self) -> tuple[Ratio, ...]:
        return (*self.speedups, *self.growths)


def exp1_ratios(records: Sequence[Mapping[str, Any]]) -> Exp1Ratios:
    """Experiment 1's ratios over ``records`` (ours, or the seed's as records)."""
    vus_values = sorted({r["vus"] for r in done_runs(records) if r.get("vus") is not None})
    speedups = tuple(setup_ratio(records, OUTPUT_TOK_PER_S, _VLLM, _NAIVE, vus=vus) for vus in vus_values)
    span = vus_range(records)
    growths = (
        ()
        if span is None
        else tuple(
            growth(records, setup, figure, *span)
            for setup in (_NAIVE, _VLLM)
            for figure in (OUTPUT_TOK_PER_S, LATENCY_AVG_S)
        )
    )
    return Exp1Ratios(speedups, growths, hit_rate(records, PREFIX_HIT_RATE, _VLLM))


def seed_growth(setup: SeedSetup, figure: str, low_vus: int, high_vus: int) -> GrowthRatio:
    """The seed's own growth of ``figure`` from ``low_vus`` to ``high_vus``, or from 1 to 32
    VUs where it measured no such VU counts."""
    measured = {row.vus for row in SEED_EXP1}
    if low_vus not in measured or high_vus not in measured:
        low_vus, high_vus = 1, 32
    return growth(SEED_EXPERIMENTS["seed-exp1"].records(), setup, figure, low_vus, high_vus)


@dataclass(frozen=True)
class Exp2Ratios:
    """Experiment 2 at one PROMPTS: cached over direct req/s and max latency; the hit rate."""

    prompts: int
    cached_over_direct: SetupRatio
    hit_rate: HitRate
    max_latency_cached_over_direct: SetupRatio

    @property
    def ratios(self) -> tuple[Ratio, ...]:
        return (self.cached_over_direct, self.max_latency_cached_over_direct)


def exp2_ratios(records: Sequence[Mapping[str, Any]]) -> dict[int, Exp2Ratios]:
    """Experiment 2's ratios per PROMPTS value, in ascending order."""
    result = {}
    for prompts in sorted({r["prompts"] for r in records if r.get("prompts") is not None}):
        result[prompts] = Exp2Ratios(
            prompts,
            setup_ratio(records, REQ_PER_S, _CACHED, _VLLM, prompts=prompts),
            hit_rate(records, RESPONSE_HIT_RATE, _CACHED, prompts),
            setup_ratio(records, LATENCY_MAX_S, _CACHED, _VLLM, prompts=prompts),
        )
    return result


@dataclass(frozen=True)
class Exp3Ratios:
    """Experiment 3 (multi-turn chat): vLLM over naive and cached over direct req/s; the hit rates."""

    vllm_over_naive: SetupRatio
    prefix_cache_hit_rate: HitRate
    response_cache_hit_rate: HitRate
    cached_over_direct: SetupRatio

    @property
    def ratios(self) -> tuple[Ratio, ...]:
        return (self.vllm_over_naive, self.cached_over_direct)


def exp3_ratios(records: Sequence[Mapping[str, Any]]) -> Exp3Ratios:
    """Experiment 3's ratios over ``records``."""
    return Exp3Ratios(
        setup_ratio(records, REQ_PER_S, _VLLM, _NAIVE),
        hit_rate(records, PREFIX_HIT_RATE, _VLLM),
        hit_rate(records, RESPONSE_HIT_RATE, _CACHED),
        setup_ratio(records, REQ_PER_S, _CACHED, _VLLM),
    )


def seed_ratios(preset: str, records: Sequence[Mapping[str, Any]]) -> tuple[Ratio, ...]:
    """The ratios (hit rates left out: they are shares) of ``preset`` over ``records``, in reading order."""
    if preset == "seed-exp1":
        return exp1_ratios(records).ratios
    if preset == "seed-exp2":
        return tuple(ratio for at_prompts in exp2_ratios(records).values() for ratio in at_prompts.ratios)
    if preset == "seed-exp3":
        return exp3_ratios(records).ratios
    raise ValueError(f"no seed experiment {preset!r}")
