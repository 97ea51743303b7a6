"""Intervals that stay 95% intervals when the lab looks after every round and stops once decided.

``--until-decided`` adds rounds until a figure's interval is decided. Judged after each round
with the plain t interval, such a rule stops on the first round whose interval happens to lie
on one side, and the error rate grows with every look (about 1 in 4 wrong after 20 looks at a
5% level). The lab instead spends its 5% over the looks (an alpha-spending function, Lan and
DeMets, Biometrika 70, 1983; reviewed in DeMets and Lan, Statistics in Medicine 13:1341-1352,
1994): the look after round ``n`` of at most :data:`MAX_ROUNDS` uses the part
``alpha(n / N) - alpha(previous look / N)`` of the 5%, with the Pocock-type function
``alpha(t) = 0.05 * ln(1 + (e - 1) t)``, and its interval is Student's t at that level with
n - 1 degrees of freedom. The parts add up to 5% at most, so by the union (Bonferroni) bound
the chance that any look's interval misses the true value is at most 5%, whatever the looks'
correlation and whatever rule picks the stop (a valid, conservative group-sequential bound;
Wassmer and Brannath, Group Sequential and Confirmatory Adaptive Designs, 2016). Exact for
normal per-round log ratios; :func:`simulate_coverage` measures it
(docs/records/2026-12-03-sequential-interval-coverage.md).

Why not a confidence sequence (Howard, Ramdas, McAuliffe and Sekhon, "Time-uniform,
nonparametric, nonasymptotic confidence sequences", Annals of Statistics 49(2), 2021;
Waudby-Smith and Ramdas, "Estimating means of bounded random variables by betting", 2023):
their normal-mixture and betting boundaries need a known sub-Gaussian scale or bounded
observations; a round's log ratio has neither, and with 3 to 20 rounds an estimated scale is
itself the largest uncertainty, which the t quantile carries and those boundaries do not.

Pure: the intervals the report prints are log-symmetric about their point (paired t on log
ratios, delta method on the log of a ratio or mean), so a look's interval is the fixed-n one
with its log half-width stretched by :func:`widening`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lab.analysis._scipy_stats import t_quantile, t_quantiles

ALPHA = 0.05
# The most rounds an experiment run until decided may have: the spending function's horizon.
MAX_ROUNDS = 20
SEQUENTIAL_METHOD = (
    "Pocock-type alpha spending over at most 20 rounds (Lan-DeMets), Student's t at each look's share of the 5%"
)


def spent_alpha(rounds: int, *, max_rounds: int = MAX_ROUNDS, alpha: float = ALPHA) -> float:
    """The share of ``alpha`` spent by the looks up to round ``rounds``: alpha * ln(1 + (e - 1) t),
    t = rounds / max_rounds (capped at 1)."""
    fraction = min(max(rounds, 0), max_rounds) / max_rounds
    return alpha * math.log(1 + (math.e - 1) * fraction)


def look_alpha(rounds: int, *, first_look: int, max_rounds: int = MAX_ROUNDS, alpha: float = ALPHA) -> float:
    """The error rate the look after ``rounds`` rounds may use: everything spent up to the first
    look (``first_look``, the planned rounds) goes to it, each later round adds its increment;
    0 past ``max_rounds`` or before the first look."""
    if rounds < first_look or rounds > max_rounds:
        return 0.0
    before = spent_alpha(rounds - 1, max_rounds=max_rounds, alpha=alpha) if rounds > first_look else 0.0
    return spent_alpha(rounds, max_rounds=max_rounds, alpha=alpha) - before


def widening(rounds: int, *, first_look: int, max_rounds: int = MAX_ROUNDS) -> float:
    """How much wider (on the log scale) the look after ``rounds`` rounds is than the fixed-n 95%
    t interval: t(1 - a/2, n-1) / t(0.975, n-1) with ``a`` = :func:`look_alpha`; infinite where
    the look has no share (before the first look, past the horizon, under two rounds)."""
    share = look_alpha(rounds, first_look=first_look, max_rounds=max_rounds)
    if rounds < 2 or share <= 0:
        return math.inf
    degrees = rounds - 1
    return t_quantile(1 - share / 2, degrees) / t_quantile(1 - ALPHA / 2, degrees)


def widen_interval(point: float, low: float, high: float, factor: float) -> tuple[float, float]:
    """A positive interval about ``point`` with its log distances to ``point`` multiplied by ``factor``."""
    if factor == 1 or point <= 0 or low <= 0 or high <= 0:
        return low, high
    if math.isinf(factor):
        return 0.0, math.inf
    return point * (low / point) ** factor, point * (high / point) ** factor


@dataclass(frozen=True)
class Coverage:
    """What :func:`simulate_coverage` measured, by experiment (every look counts)."""

    experiments: int
    max_rounds: int
    first_look: int
    sequential: float  # share of experiments whose every look's interval held the true value
    fixed_t: float  # the same with the plain 95% t interval at every look (the inflation avoided)
    stopped_covered: float  # share covering at the stop of "until decided" (excludes 1 or +-10%)
    mean_rounds_at_stop: float


def _half_widths(logs: np.ndarray, quantiles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Running means and t half-widths after each round (columns from round 2)."""
    rounds = np.arange(1, logs.shape[1] + 1)
    means = np.cumsum(logs, axis=1) / rounds
    squares = np.cumsum(logs**2, axis=1)
    variances = np.maximum(squares - rounds * means**2, 0) / np.maximum(rounds - 1, 1)
    return means[:, 1:], quantiles * np.sqrt(variances[:, 1:] / rounds[1:])


def simulate_coverage(
    *,
    experiments: int = 2000,
    max_rounds: int = MAX_ROUNDS,
    first_look: int = 2,
    true_log_ratio: float = math.log(0.8),
    spread: float = 0.15,
    precision: float = 0.10,
    random_seed: int = 0,
    heavy_tails: bool = False,
) -> Coverage:
    """Simulate ``experiments`` experiments with per-round log ratios drawn around
    ``true_log_ratio`` (normal with sd ``spread``, or Student's t with 3 degrees of freedom
    scaled to it with ``heavy_tails``), looking after each round from ``first_look`` to
    ``max_rounds``; returns how often the intervals held the true value."""
    rng = np.random.default_rng(random_seed)
    shape = (experiments, max_rounds)
    noise = rng.standard_t(3, shape) / math.sqrt(3) if heavy_tails else rng.standard_normal(shape)
    logs = true_log_ratio + spread * noise
    rounds = np.arange(2, max_rounds + 1)
    sequential_q = np.array(
        [
            t_quantile(1 - look_alpha(int(n), first_look=first_look, max_rounds=max_rounds) / 2, int(n) - 1)
            if n >= first_look
            else np.inf
            for n in rounds
        ]
    )
    fixed_q = t_quantiles(1 - ALPHA / 2, rounds - 1)
    means, sequential_half = _half_widths(logs, sequential_q)
    _, fixed_half = _half_widths(logs, fixed_q)
    looked = rounds >= first_look
    covered = np.abs(means - true_log_ratio) <= sequential_half
    fixed_covered = np.abs(means - true_log_ratio) <= fixed_half
    # "Until decided": stop at the first look whose interval excludes 1 (log 0) or is within
    # +-precision; at the horizon otherwise.
    decided = looked & ((np.abs(means) > sequential_half) | (np.expm1(sequential_half) < precision))
    stop = np.where(decided.any(axis=1), decided.argmax(axis=1), len(rounds) - 1)
    at_stop = covered[np.arange(experiments), stop]
    return Coverage(
        experiments=experiments,
        max_rounds=max_rounds,
        first_look=first_look,
        sequential=float(np.mean(np.all(covered[:, looked], axis=1))),
        fixed_t=float(np.mean(np.all(fixed_covered[:, looked], axis=1))),
        stopped_covered=float(np.mean(at_stop)),
        mean_rounds_at_stop=float(np.mean(rounds[stop])),
    )
