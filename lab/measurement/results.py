"""A run's results, typed: one field per figure, units in the names, None when not measured.

The field list is the store's (``db.models.RunResultColumns``, the lowest layer, which
imports nothing from here): :class:`RunResults` is derived from it, so the parser and the
metrics code fill, the store writes and the CSV exports (``lab.analysis.compare.RECORD_FIELDS``)
exactly the same figures. Adding a figure is a line in ``RunResultColumns`` and a
migration for its column; nothing here changes.

Producers hand over plain dicts named after the fields (``k6_results.parse_summary``,
``PerSecondSeries.figures``, ``server_metrics.backend_figures``...): keys that are not
result fields (raw counts for cross-checks) are left out, so no one copies keys by hand.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from db.models import RESULT_COLUMNS, Run

RESULT_FIELDS: tuple[str, ...] = RESULT_COLUMNS


class _RunResultsMethods:
    """The behaviour of :class:`RunResults` (its fields come from the store's column list)."""

    @classmethod
    def from_figures(cls, figures: Mapping[str, Any]) -> RunResults:
        """The result fields found in ``figures`` (other keys are ignored)."""
        return cls(**{name: figures[name] for name in RESULT_FIELDS if name in figures})  # type: ignore[call-arg]

    def updated(self, figures: Mapping[str, Any]) -> RunResults:
        """A copy with the result fields of ``figures`` that are known (not None) written over."""
        known = {name: value for name, value in figures.items() if name in RESULT_FIELDS and value is not None}
        return dataclasses.replace(self, **known)  # type: ignore[type-var]

    def as_columns(self) -> dict[str, Any]:
        """Every field as a run column (what the store writes)."""
        return {name: getattr(self, name) for name in RESULT_FIELDS}


def _python_type(name: str) -> type:
    return Run.__table__.c[name].type.python_type


RunResults = dataclasses.make_dataclass(
    "RunResults",
    [(name, _python_type(name) | None, dataclasses.field(default=None)) for name in RESULT_FIELDS],
    bases=(_RunResultsMethods,),
    frozen=True,
    namespace={"__module__": __name__},
)
RunResults.__doc__ = "A run's figures, one per result column of the store, units in the names; None when not measured."
