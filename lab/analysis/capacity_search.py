"""Capacity search: the largest load a backend holds under an SLO.

Pure logic, driven by a ``probe(load) -> ProbeResult`` callable (the runner measures; a
unit test passes a synthetic backend). The method follows ``vllm bench sweep serve_sla``
and GuideLLM's sweep: grow the load geometrically from ``min_load`` until the SLO fails,
the backend saturates (throughput stops rising while latency grows) or ``max_load`` is
met; then bisect between the last pass and the first fail down to ``resolution``. The
probe budget is never exceeded.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from lab.analysis.statistics import mean_interval

# Throughput must grow by at least this share between two passing loads, or the backend is
# saturated (more load only queues) while the SLO figure grows.
SATURATION_MIN_GAIN = 0.05


class CapacityError(ValueError):
    """Search bounds that make the search impossible; the message says why."""


@dataclass(frozen=True)
class SearchBounds:
    """Where and how far to search. ``integer`` loads (VUs) step by whole units."""

    min_load: float
    max_load: float
    max_probes: int
    growth_factor: float = 2.0
    resolution: float = 1.0
    integer: bool = True

    def __post_init__(self) -> None:
        if not (math.isfinite(self.min_load) and math.isfinite(self.max_load)):
            raise CapacityError("the load bounds must be finite numbers")
        if self.min_load <= 0:
            raise CapacityError(f"the minimum load must be above 0, got {self.min_load:g}")
        if self.min_load > self.max_load:
            raise CapacityError(f"the minimum load {self.min_load:g} is above the maximum {self.max_load:g}")
        if self.max_probes < 1:
            raise CapacityError(f"the probe budget must be at least 1, got {self.max_probes}")
        if not self.growth_factor > 1:
            raise CapacityError(f"the growth factor must be above 1, got {self.growth_factor:g}")
        if not self.resolution > 0:
            raise CapacityError(f"the resolution must be above 0, got {self.resolution:g}")
        if self.integer and (self.min_load != int(self.min_load) or self.max_load != int(self.max_load)):
            raise CapacityError("VU bounds must be whole numbers")


@dataclass(frozen=True)
class ProbeResult:
    """One measured load: whether it met the SLO, its throughput and the SLO figure."""

    load: float
    passed: bool
    throughput: float | None = None  # requests (or tokens) per second
    slo_figure_s: float | None = None  # e.g. the measured latency_p95_s
    goodput_req_per_s: float | None = None
    run_ids: tuple[int, ...] = ()
    note: str = ""


@dataclass
class CapacityResult:
    """The search's answer for one backend."""

    capacity_load: float | None  # largest load that met the SLO; None if even min_load failed
    stop_reason: str
    probes: list[ProbeResult] = field(default_factory=list)
    lowest_failing_load: float | None = None
    saturated: bool = False

    @property
    def capacity_probe(self) -> ProbeResult | None:
        passing = [p for p in self.probes if p.passed and p.load == self.capacity_load]
        return passing[-1] if passing else None

    @property
    def bounding_probes(self) -> list[ProbeResult]:
        """The passing probe at the capacity and the lowest failing probe above it."""
        bounds = [p for p in (self.capacity_probe,) if p is not None]
        failing = [p for p in self.probes if not p.passed and p.load == self.lowest_failing_load]
        return bounds + failing[:1]


def _grow(load: float, bounds: SearchBounds) -> float:
    grown = load * bounds.growth_factor
    if bounds.integer:
        grown = max(math.ceil(grown), int(load) + 1)
    return min(grown, bounds.max_load)


def _is_saturated(previous: ProbeResult, current: ProbeResult) -> bool:
    if previous.throughput is None or current.throughput is None or previous.throughput <= 0:
        return False
    gain = current.throughput / previous.throughput - 1
    latency_grew = (
        previous.slo_figure_s is not None
        and current.slo_figure_s is not None
        and current.slo_figure_s > previous.slo_figure_s
    )
    return gain < SATURATION_MIN_GAIN and latency_grew


def search_capacity(probe: Callable[[float], ProbeResult], bounds: SearchBounds) -> CapacityResult:
    """Find the largest load in ``bounds`` whose probe passes (see the module docstring)."""
    probes: list[ProbeResult] = []

    def measure(load: float) -> ProbeResult:
        result = probe(load)
        probes.append(result)
        return result

    first = measure(bounds.min_load)
    if not first.passed:
        return CapacityResult(
            None, f"the minimum load {bounds.min_load:g} already broke the SLO", probes, lowest_failing_load=first.load
        )
    last_pass, first_fail = first, None
    # Phase 1: geometric growth.
    while first_fail is None:
        if last_pass.load >= bounds.max_load:
            return CapacityResult(last_pass.load, f"the maximum load {bounds.max_load:g} met the SLO", probes)
        if len(probes) >= bounds.max_probes:
            return CapacityResult(last_pass.load, "probe budget spent while growing the load", probes)
        current = measure(_grow(last_pass.load, bounds))
        if not current.passed:
            first_fail = current
        elif _is_saturated(last_pass, current):
            return CapacityResult(
                current.load,
                f"saturated: throughput rose under {SATURATION_MIN_GAIN:.0%} from load {last_pass.load:g} to "
                f"{current.load:g} while the SLO figure grew",
                probes,
                saturated=True,
            )
        else:
            last_pass = current
    # Phase 2: bisection between the last pass and the first fail.
    low, high = last_pass.load, first_fail.load
    stop_reason = f"boundary found within {bounds.resolution:g}"
    while high - low > bounds.resolution:
        if len(probes) >= bounds.max_probes:
            stop_reason = "probe budget spent while bisecting"
            break
        middle = (low + high) / 2
        if bounds.integer:
            middle = math.floor(middle)
            if middle <= low:
                break
        if measure(middle).passed:
            low = middle
        else:
            high = middle
    return CapacityResult(low, stop_reason, probes, lowest_failing_load=high)


def conservative_pass(values_s: Sequence[float | None], threshold_s: float) -> tuple[bool, float | None]:
    """Whether repeated measurements of an SLO figure meet ``threshold_s``, conservatively.

    With two or more repeats the upper end of the 95% confidence interval must be within the
    limit; with one, the value itself. Returns (passed, the figure used for the decision).
    """
    interval = mean_interval(values_s)
    if interval.n == 0:
        return False, None
    deciding = interval.ci95_high if interval.ci95_high is not None else interval.mean
    return deciding is not None and deciding <= threshold_s, deciding
