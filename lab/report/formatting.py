"""How a figure is written, the seed's way: seconds as '11.3 ms' / '4.73 s' / '1m21s', rates
with thousands separators, shares as percentages, ratios as '5.15x', and a mean with its 95%
confidence interval. One way to write a figure for the report and the pages alike."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

MISSING = "–"


def _is_nan(value: float) -> bool:
    return isinstance(value, float) and math.isnan(value)


def format_seconds(value: float | None) -> str:
    """Seconds as the seed wrote them: '11.3 ms', '4.73 s', '1m21s'."""
    if value is None or _is_nan(value):
        return MISSING
    if value < 1:
        return f"{value * 1000:.1f} ms"
    if value < 60:
        return f"{value:.2f} s"
    minutes, seconds = divmod(value, 60)
    return f"{int(minutes)}m{seconds:02.0f}s"


def format_rate(value: float | None, digits: int = 2) -> str:
    """A rate (or a count) with thousands separators and ``digits`` decimals."""
    if value is None or _is_nan(value):
        return MISSING
    return f"{value:,.{digits}f}"


def format_share(value: float | None) -> str:
    """A share (0.5) as a percentage ('50.0%')."""
    if value is None or _is_nan(value):
        return MISSING
    return f"{value * 100:.1f}%"


def format_ratio(value: float | None, unit: str) -> str:
    """A ratio ('5.15x', '102.6x') or, with ``unit="share"``, a share."""
    if value is None or _is_nan(value):
        return MISSING
    if unit == "share":
        return format_share(value)
    if 0 < value < 0.01:  # two significant digits: a tiny ratio never reads "0.00x"
        return f"{value:.2g}x"
    return f"{value:,.1f}x" if value >= 10 else f"{value:.2f}x"


def ratio_with_bounds(value: float | None, low: float | None, high: float | None, unit: str) -> str:
    """A ratio or share with its 95% interval: '5.15x [4.20x, 6.31x]'; the figure alone without
    an interval, or when its ends read the same as the figure."""
    text = format_ratio(value, unit)
    if value is None or _is_nan(value) or low is None or high is None:
        return text
    low_text, high_text = format_ratio(low, unit), format_ratio(high, unit)
    return text if low_text == high_text == text else f"{text} [{low_text}, {high_text}]"


def with_interval(row: dict[str, Any], figure: str, formatter: Callable[[float | None], str]) -> str:
    """A figure of an aggregated row, formatted, with its 95% CI "[low, high]" when there are repeats."""
    text = formatter(row.get(figure))
    low, high = row.get(f"{figure}_ci95_low"), row.get(f"{figure}_ci95_high")
    if low is not None and high is not None and row.get(figure) is not None:
        text += f" [{formatter(low)}, {formatter(high)}]"
    return text
