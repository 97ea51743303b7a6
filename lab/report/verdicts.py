"""Verdicts: the rules that judge our figure against the seed's, as data, so the report prints
exactly the rule each verdict used (see :mod:`lab.report.claims` for the claims they judge)."""

from __future__ import annotations

import math
from typing import Any

from lab.analysis.interval_verdicts import Verdict

# Every verdict, in the order a report counts them (the enum's order).
VERDICTS: tuple[Verdict, ...] = tuple(Verdict)
# Verdicts more rounds may turn into a decided one (--until-decided adds rounds for these).
UNDECIDED: tuple[Verdict, ...] = (Verdict.INCONCLUSIVE, Verdict.NOT_JUDGED_BUSY)
# The rules' version: a reproduction freezes the rules (with this) when it is queued, and its
# report judges with those. Bump it with any change to VERDICT_RULES or to how they are applied.
# 3: an A/A check too wide to show agreement widens ratio intervals by its ratio.
# 4: the A/A check compares the backend's steady output rate where every run has one.
# 5: no verdict from runs with the contention warning; until-decided experiments judge on
#    sequential intervals; the machine-speed index names no run.
RULES_VERSION = 5


def frozen_rules() -> dict[str, Any]:
    """The rules in force now, as an experiment stores them when it is queued."""
    return {
        "version": RULES_VERSION,
        "rules": {name: dict(rule) for name, rule in VERDICT_RULES.items()},
        "interval_rule": "held or did not hold only when the whole 95% interval lies on that side; "
        "inconclusive otherwise",
        "drift_rule": "ratio intervals are widened by an A/A check's ratio when it drifted beyond 10% or its "
        "interval reaches beyond 1.5x either side of 1",
        "aa_figure": "the backend's steady output tok/s where every run of both cells has it from its counters, "
        "else k6's req/s",
        "busy_rule": "a round in which a run of the claim's cells carries the contention warning is left out; "
        "with fewer quiet rounds than planned the claim is not judged (machine busy)",
        "sequential_rule": "an experiment run until decided judges each look on intervals widened for repeated "
        "looks (Pocock-type alpha spending over at most 20 rounds) and stops a claim at its first decided look",
    }


# The rules, as data. Each verdict names its rule; the report prints these parameters.
VERDICT_RULES: dict[str, dict[str, Any]] = {
    # A claimed factor ("~5x faster", "grows ~25x").
    "factor": {
        "held_within_factor": 2.0,  # ours between seed/2 and seed*2
        "direction_margin": 0.10,  # "same direction": ours above 1.1 where the seed's is above 1 (below 0.9 if below)
        "text": "held if ours is within a factor of 2 of the seed's figure; partly if it points the same way "
        "(above 1.1 where the seed's is above 1) but is further off; did not hold otherwise",
    },
    # A claimed gain ("~5x faster", "~100x more req/s"): a stronger gain holds the claim too.
    "gain": {
        "held_at_least_fraction": 0.5,  # ours at least half the seed's
        "direction_margin": 0.10,
        "text": "held if ours is at least half the seed's figure (a larger gain holds the claim too); partly if "
        "it is still a gain (above 1.1); did not hold otherwise",
    },
    # A claimed near-constant ("latency grows only 1.2x", "max latency unchanged").
    "steady": {
        "held_within_factor": 1.5,
        "partly_within_factor": 3.0,
        "text": "held if ours is within a factor of 1.5 of the seed's figure; partly within a factor of 3; "
        "did not hold otherwise",
    },
    # A claimed share ("hit rate 98%", "prefix cache hits 82%").
    "share": {
        "held_within_points": 0.10,
        "partly_at_least_fraction": 0.5,
        "text": "held if ours is within 10 percentage points of the seed's; partly if at least half of it; "
        "did not hold otherwise",
    },
    # "Prefix caching reuses the shared prompt prefix" (hit rates "very high").
    "high_share": {
        "held_at_least": 0.5,
        "partly_at_least": 0.1,
        "text": "held if ours is at least 50%; partly if at least 10%; did not hold otherwise",
    },
    # "Almost never hits".
    "rare": {
        "held_at_most": 0.05,
        "partly_at_most": 0.20,
        "text": "held if ours is at most 5%; partly if at most 20%; did not hold otherwise",
    },
    # "Costs almost nothing": cached over direct throughput.
    "cheap": {
        "held_at_least": 0.90,
        "partly_at_least": 0.75,
        "text": "held if the cached set-up keeps at least 90% of the direct req/s; partly at least 75%; "
        "did not hold otherwise",
    },
}


def judge(rule: str, ours: float | None, seed: float | None) -> Verdict:
    """The verdict of one figure under ``VERDICT_RULES[rule]``; ``not measured`` when a figure is missing."""
    params = VERDICT_RULES[rule]
    if ours is None or (isinstance(ours, float) and math.isnan(ours)):
        return Verdict.NOT_MEASURED
    if rule == "factor":
        if seed is None or seed <= 0 or ours <= 0:
            return Verdict.NOT_MEASURED if seed is None else Verdict.NOT_HELD
        factor = params["held_within_factor"]
        if seed / factor <= ours <= seed * factor:
            return Verdict.HELD
        margin = params["direction_margin"]
        same_way = ours > 1 + margin if seed > 1 else ours < 1 - margin
        return Verdict.PARTLY if same_way else Verdict.NOT_HELD
    if rule == "gain":
        if seed is None or seed <= 0 or ours <= 0:
            return Verdict.NOT_MEASURED if seed is None else Verdict.NOT_HELD
        if ours >= seed * params["held_at_least_fraction"]:
            return Verdict.HELD
        return Verdict.PARTLY if ours > 1 + params["direction_margin"] else Verdict.NOT_HELD
    if rule == "steady":
        if seed is None or seed <= 0 or ours <= 0:
            return Verdict.NOT_MEASURED if seed is None else Verdict.NOT_HELD
        off_by = max(ours / seed, seed / ours)
        if off_by <= params["held_within_factor"]:
            return Verdict.HELD
        return Verdict.PARTLY if off_by <= params["partly_within_factor"] else Verdict.NOT_HELD
    if rule == "share":
        if seed is None:
            return Verdict.NOT_MEASURED
        if abs(ours - seed) <= params["held_within_points"]:
            return Verdict.HELD
        return Verdict.PARTLY if ours >= seed * params["partly_at_least_fraction"] else Verdict.NOT_HELD
    if rule in ("high_share", "cheap"):
        if ours >= params["held_at_least"]:
            return Verdict.HELD
        return Verdict.PARTLY if ours >= params["partly_at_least"] else Verdict.NOT_HELD
    if rule == "rare":
        if ours <= params["held_at_most"]:
            return Verdict.HELD
        return Verdict.PARTLY if ours <= params["partly_at_most"] else Verdict.NOT_HELD
    raise ValueError(f"unknown verdict rule {rule!r}")
