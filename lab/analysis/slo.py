"""Service-level objectives: limits on per-request figures, goodput and attainment.

An SLO is a set of limits such as ``latency_p95_s<=10`` (95% of requests finish within
10 s), ``ttft_p99_s<=1`` (client time to first token, streamed runs only) and
``failure_rate<=0.01``. Any run is evaluated after the fact from its stored per-request
figures: goodput is the requests per second that met every per-request limit, attainment
their share of all requests (failed ones never meet a limit).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from lab.measurement.k6_results import percentile
from lab.measurement.request_figures import RequestFigures

# Per-request figures an SLO may limit, with what a reader is told they are.
PER_REQUEST_FIGURES = {
    "latency": "end-to-end latency",
    "ttft": "client time to first token (streamed runs)",
    "tpot": "client time per output token (streamed runs)",
}
# Figures that exist only when the answer is streamed.
STREAM_ONLY_FIGURES = ("ttft", "tpot")
_LIMIT_PATTERN = re.compile(
    r"^\s*(?P<figure>[a-z]+)_(?P<statistic>p\d{1,2}(?:\.\d+)?|max)_s\s*(?:<=|=)\s*(?P<value>[0-9.eE+-]+)\s*$"
)
_FAILURE_PATTERN = re.compile(r"^\s*failure_rate\s*(?:<=|=)\s*(?P<value>[0-9.eE+-]+)\s*$")


class SloError(ValueError):
    """An SLO text or bound that cannot be used; the message says what is allowed."""


@dataclass(frozen=True)
class Limit:
    """``figure`` at ``quantile`` (0.95 for p95, 1.0 for max) must be <= ``threshold_s``."""

    figure: str
    quantile: float
    threshold_s: float

    @property
    def name(self) -> str:
        """The run column this limit reads, e.g. ``latency_p95_s``."""
        if self.quantile >= 1.0:
            return f"{self.figure}_max_s"
        return f"{self.figure}_p{self.quantile * 100:g}_s"

    def __str__(self) -> str:
        return f"{self.name}<={self.threshold_s:g}"


@dataclass(frozen=True)
class Slo:
    """Per-request limits plus a maximum failure rate (None: no limit on failures)."""

    limits: tuple[Limit, ...] = ()
    max_failure_rate: float | None = None

    @property
    def figures(self) -> set[str]:
        return {limit.figure for limit in self.limits}

    @property
    def needs_stream(self) -> bool:
        return any(figure in STREAM_ONLY_FIGURES for figure in self.figures)

    def __str__(self) -> str:
        parts = [str(limit) for limit in self.limits]
        if self.max_failure_rate is not None:
            parts.append(f"failure_rate<={self.max_failure_rate:g}")
        return ", ".join(parts)


def _positive_number(raw: str, text: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise SloError(f"SLO {text!r}: {raw!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise SloError(f"SLO {text!r}: the limit must be a finite number >= 0")
    return value


def parse_limit(text: str) -> Limit | float:
    """One ``figure_pNN_s<=value`` limit, or the float of ``failure_rate<=value``."""
    failure = _FAILURE_PATTERN.match(text)
    if failure:
        rate = _positive_number(failure["value"], text)
        if rate > 1:
            raise SloError(f"SLO {text!r}: a failure rate is a share between 0 and 1")
        return rate
    match = _LIMIT_PATTERN.match(text)
    if not match:
        raise SloError(
            f"SLO {text!r} is not understood; write e.g. latency_p95_s<=10, ttft_p99_s<=1 or failure_rate<=0.01"
        )
    figure = match["figure"]
    if figure not in PER_REQUEST_FIGURES:
        raise SloError(f"SLO {text!r}: unknown figure {figure!r}; figures: {', '.join(PER_REQUEST_FIGURES)}")
    statistic = match["statistic"]
    quantile = 1.0 if statistic == "max" else float(statistic[1:]) / 100
    if not 0 < quantile <= 1:
        raise SloError(f"SLO {text!r}: the percentile must be between p1 and p99.9")
    threshold = _positive_number(match["value"], text)
    if threshold == 0:
        raise SloError(f"SLO {text!r}: a limit of 0 s can never be met")
    return Limit(figure, quantile, threshold)


def parse_slo(texts: Sequence[str]) -> Slo:
    """An SLO from texts such as ``["latency_p95_s<=10", "failure_rate<=0.01"]``;
    each text may also hold several limits separated by commas."""
    limits: list[Limit] = []
    max_failure_rate: float | None = None
    for text in texts:
        for part in str(text).split(","):
            if not part.strip():
                continue
            parsed = parse_limit(part)
            if isinstance(parsed, Limit):
                if any(existing.name == parsed.name for existing in limits):
                    raise SloError(f"SLO limit {parsed.name} is given twice")
                limits.append(parsed)
            else:
                max_failure_rate = parsed
    if not limits and max_failure_rate is None:
        raise SloError("an SLO needs at least one limit, e.g. latency_p95_s<=10")
    return Slo(tuple(limits), max_failure_rate)


def check_slo_applies(slo: Slo, *, streamed: bool) -> None:
    """Refuse an SLO on figures a run will not have (TTFT/TPOT of a non-streamed run)."""
    missing = sorted(figure for figure in slo.figures if figure in STREAM_ONLY_FIGURES and not streamed)
    if missing:
        raise SloError(
            f"the SLO limits {', '.join(missing)}, which only streamed runs measure: "
            "set workload.stream=true or drop that limit"
        )


@dataclass(frozen=True)
class LimitOutcome:
    limit: Limit
    value_s: float | None  # the figure at the limit's percentile over successful requests
    passed: bool


@dataclass(frozen=True)
class SloEvaluation:
    """How one run fared against an SLO."""

    slo: Slo
    passed: bool
    limits: tuple[LimitOutcome, ...]
    failure_rate: float | None
    requests_total: int
    requests_good: int
    goodput_req_per_s: float | None
    attainment: float | None
    reason: str


def evaluate(slo: Slo, requests: RequestFigures, *, duration_s: float | None) -> SloEvaluation:
    """Evaluate ``slo`` on one run's per-request figures over ``duration_s`` of load."""
    total = len(requests)
    successes = [index for index, ok in enumerate(requests.ok) if ok]
    outcomes: list[LimitOutcome] = []
    for limit in slo.limits:
        values = requests.values(limit.figure)
        present = sorted(v for i in successes if i < len(values) and (v := values[i]) is not None)
        if not present:
            outcomes.append(LimitOutcome(limit, None, False))
            continue
        value = percentile(present, limit.quantile)
        outcomes.append(LimitOutcome(limit, value, value is not None and value <= limit.threshold_s))
    failure_rate = (total - len(successes)) / total if total else None
    failures_ok = slo.max_failure_rate is None or (failure_rate is not None and failure_rate <= slo.max_failure_rate)
    good = 0
    for index in successes:
        if all(_meets(requests.values(limit.figure), index, limit.threshold_s) for limit in slo.limits):
            good += 1
    passed = total > 0 and failures_ok and all(outcome.passed for outcome in outcomes)
    return SloEvaluation(
        slo=slo,
        passed=passed,
        limits=tuple(outcomes),
        failure_rate=failure_rate,
        requests_total=total,
        requests_good=good,
        goodput_req_per_s=good / duration_s if duration_s else None,
        attainment=good / total if total else None,
        reason=_reason(outcomes, failure_rate, slo.max_failure_rate, total),
    )


def _meets(values: Sequence[float | None], index: int, threshold_s: float) -> bool:
    value = values[index] if index < len(values) else None
    return value is not None and value <= threshold_s


def _reason(
    outcomes: list[LimitOutcome], failure_rate: float | None, max_failure_rate: float | None, total: int
) -> str:
    if total == 0:
        return "no request finished"
    broken = []
    for outcome in outcomes:
        if outcome.value_s is None:
            broken.append(f"{outcome.limit.name} unknown (no such figure in this run)")
        elif not outcome.passed:
            broken.append(f"{outcome.limit.name} = {outcome.value_s:.3g} s > {outcome.limit.threshold_s:g} s")
    if max_failure_rate is not None and failure_rate is not None and failure_rate > max_failure_rate:
        broken.append(f"failure rate {failure_rate:.1%} > {max_failure_rate:.1%}")
    return "; ".join(broken) if broken else "every limit met"
