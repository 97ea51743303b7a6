"""Which cells the seed's scale cannot measure here, predicted before queueing, and how long each
must run to measure it: the adapted scale.

From what this machine measured of the same configuration before (its stored history), a cell
cannot measure its figures when:

- **its requests outlast the test**: a closed loop of V users at X req/s keeps each request
  about V / X seconds (Little's law); the report calls a mean latency cut off when the longest
  finished request took at least half the test (:data:`CENSORED_LATENCY_SHARE`), so the test
  must last at least twice that;
- **its cache cannot fill**: a response cache in front of a backend serving X req/s stores P
  distinct answers in no less than P / X seconds (each first request is a full generation);
- **its figure rests on fewer than** :data:`MIN_REQUESTS` completed requests.

Each need is stretched by :data:`MARGIN` (the machine drifts) and rounded up to 30 s; a cell
runs as long as its largest need within the cap (``--max-cell-s``). A need beyond the cap is
not met by lengthening: the figure stays "not measurable here", and the cell says why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The report's rule for a latency cut off by the test (lab/report/claim_reasons.py uses it too).
CENSORED_LATENCY_SHARE = 0.5
MIN_REQUESTS = 30
MARGIN = 1.25
DEFAULT_MAX_CELL_S = 600.0
_STEP_S = 30.0


@dataclass(frozen=True)
class CellHistory:
    """What this machine measured of a configuration before: medians over its stored done runs."""

    req_per_s: float | None
    latency_avg_s: float | None = None
    runs: int = 1


@dataclass(frozen=True)
class CellLoad:
    """What the prediction needs of a cell: its planned seconds, closed-loop users, and for a
    response cache that starts cold, its distinct prompts and the direct backend's history."""

    label: str
    duration_s: float
    vus: int | None
    history: CellHistory | None
    cache_prompts: int | None = None
    direct: CellHistory | None = None


@dataclass(frozen=True)
class CellNeed:
    """How long a cell runs under the adapted scale and why; ``over_cap``: what no cell under the cap measures."""

    label: str
    seed_s: float
    duration_s: float
    because: tuple[str, ...] = ()
    over_cap: tuple[str, ...] = ()

    @property
    def lengthened(self) -> bool:
        return self.duration_s > self.seed_s

    def sentence(self) -> str:
        """'240 s instead of 60 s, because ...' (or why the seed's length is kept)."""
        parts = []
        if self.lengthened:
            parts.append(f"{self.duration_s:,.0f} s instead of {self.seed_s:,.0f} s, because {'; '.join(self.because)}")
        if self.over_cap:
            kept = "" if self.lengthened else f"{self.seed_s:,.0f} s kept: "
            parts.append(f"{kept}not measurable under the cap: {'; '.join(self.over_cap)}")
        return ". ".join(parts)


def _rounded(seconds: float) -> float:
    return math.ceil(seconds * MARGIN / _STEP_S) * _STEP_S


def needs(cell: CellLoad) -> list[tuple[float, str]]:
    """(least seconds, why) for each reason the cell's planned length cannot measure it."""
    found: list[tuple[float, str]] = []
    rate = cell.history.req_per_s if cell.history else None
    if rate and rate > 0:
        if rate * cell.duration_s < MIN_REQUESTS:
            found.append(
                (
                    MIN_REQUESTS / rate,
                    f"at the {rate:.2g} req/s measured here {cell.duration_s:,.0f} s completes about "
                    f"{rate * cell.duration_s:.0f} requests, under {MIN_REQUESTS}",
                )
            )
        latency_s = max(cell.vus / rate if cell.vus else 0.0, (cell.history.latency_avg_s if cell.history else 0) or 0)
        if latency_s > CENSORED_LATENCY_SHARE * cell.duration_s:
            found.append(
                (
                    latency_s / CENSORED_LATENCY_SHARE,
                    f"a request takes about {latency_s:,.0f} s here ({cell.vus} users at {rate:.2g} req/s), so a "
                    f"{cell.duration_s:,.0f} s test cuts the latency off",
                )
            )
    direct = cell.direct.req_per_s if cell.direct else None
    if cell.cache_prompts and direct and direct > 0 and cell.cache_prompts / direct > cell.duration_s:
        found.append(
            (
                cell.cache_prompts / direct,
                f"storing {cell.cache_prompts:,} answers takes at least {cell.cache_prompts / direct:,.0f} s at the "
                f"direct {direct:.2f} req/s",
            )
        )
    return found


def adapt(cell: CellLoad, *, max_cell_s: float = DEFAULT_MAX_CELL_S) -> CellNeed:
    """The cell's length under the adapted scale: its largest need within ``max_cell_s``."""
    within = [(seconds, why) for seconds, why in needs(cell) if seconds <= max_cell_s]
    over = [
        f"{why}: it needs at least {seconds:,.0f} s, over the {max_cell_s:,.0f} s cap"
        for seconds, why in needs(cell)
        if seconds > max_cell_s
    ]
    duration_s = min(max([_rounded(seconds) for seconds, _ in within], default=cell.duration_s), max_cell_s)
    duration_s = max(duration_s, cell.duration_s)
    return CellNeed(cell.label, cell.duration_s, duration_s, tuple(why for _, why in within), tuple(over))
