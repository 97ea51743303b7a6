"""CSV that is safe to open in a spreadsheet: formula-like text cells are quoted, numbers kept."""

from __future__ import annotations

import csv
import io
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from lab.analysis.compare import RECORD_FIELDS

FORMULA_STARTS = frozenset("=+-@")
# Look-alikes NFKC leaves alone that some spreadsheets still read as a sign.
FORMULA_LOOK_ALIKES = frozenset("\u2212\u2796\u2795\u2010\u2011\u2012\u2013\u2014\u2015")


def _is_blank_or_control(char: str) -> bool:
    # Whitespace, line breaks, controls and invisible formatting (zero-width, BOM): a
    # spreadsheet skips or keeps them, and the formula after them still runs.
    return char.isspace() or unicodedata.category(char) in ("Cc", "Cf", "Zs", "Zl", "Zp")


def is_formula_like(text: str) -> bool:
    """Whether a spreadsheet could read ``text`` as a formula: it starts with = + - @ after
    any leading whitespace or control characters, counting compatibility forms (fullwidth
    ＝, small ﹫, superscript ⁺: NFKC) and minus look-alikes; or it starts with tab/CR/LF."""
    if text[:1] in ("\t", "\r", "\n"):
        return True  # a leading tab or line break is itself a known injection vector
    start = 0
    while start < len(text) and _is_blank_or_control(text[start]):
        start += 1
    if start == len(text):
        return False
    first = text[start]
    return unicodedata.normalize("NFKC", first)[:1] in FORMULA_STARTS or first in FORMULA_LOOK_ALIKES


def neutralise_cell(value: Any) -> Any:
    """Prefix formula-like text (see ``is_formula_like``) with a quote so spreadsheets do not run it.

    Numbers are left alone: a negative number is data, not a formula.
    """
    if isinstance(value, str) and is_formula_like(value):
        return "'" + value
    return value


def records_to_csv(records: Sequence[Mapping[str, Any]], fields: Sequence[str] | None = None) -> str:
    """CSV text of ``records`` with formula-like cells neutralised; the columns are ``fields``,
    else the first record's keys, else the run record's fields."""
    columns = list(fields or (records[0].keys() if records else RECORD_FIELDS))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    for record in records:
        writer.writerow({key: neutralise_cell(record.get(key)) for key in columns})
    return buffer.getvalue()


def dataframe_to_csv(frame: pd.DataFrame) -> str:
    """CSV of a shown table, formula-like text cells neutralised."""
    rows = [{str(name): value for name, value in row.items()} for row in frame.to_dict("records")]
    return records_to_csv(rows, [str(name) for name in frame.columns])
