"""scipy.stats behind typed functions: the lab's one import of scipy.

scipy ships no type information, so mypy skips it (pyproject.toml) and every name from it is
``Any``. Each function here turns scipy's answer into a ``float`` (or an array of float64) where
it is made, so no other module sees ``Any`` from scipy; a new use is one more function here.
scipy.stats is imported on first use: it takes about a second, and most CLI commands never need it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray


def t_quantile(probability: float, degrees_of_freedom: float) -> float:
    """Student's t quantile: the value below which ``probability`` of the distribution lies."""
    from scipy import stats

    return float(stats.t.ppf(probability, degrees_of_freedom))


def t_quantiles(
    probability: float, degrees_of_freedom: NDArray[np.integer] | NDArray[np.floating]
) -> NDArray[np.float64]:
    """:func:`t_quantile` at each of ``degrees_of_freedom`` (one array, computed at once)."""
    from scipy import stats

    return np.asarray(stats.t.ppf(probability, degrees_of_freedom), dtype=np.float64)


def normal_quantile(probability: float) -> float:
    """The standard normal distribution's quantile at ``probability``."""
    from scipy import stats

    return float(stats.norm.ppf(probability))


def welch_p_value(first: Sequence[float], second: Sequence[float]) -> float:
    """The two-sided p-value of Welch's t-test (unequal variances) of two samples; NaN where scipy
    gives none (two constant samples)."""
    from scipy import stats

    return float(stats.ttest_ind(first, second, equal_var=False).pvalue)
