"""scripts/check_documents.py catches every wrong figure planted in a copy of a document: a
transposed digit, a changed bound, two rows swapped, a count off by one, a sign, a unitless
table cell, a figure that equals another row's (the seed's) number, in the rendered results
page, in hand-written lines with exact pointers, and in a record; the unplanted copies pass."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("check_documents", PROJECT_ROOT / "scripts" / "check_documents.py")
assert _spec is not None and _spec.loader is not None
check_documents = importlib.util.module_from_spec(_spec)
sys.modules["check_documents"] = check_documents  # its dataclasses look their module up
_spec.loader.exec_module(check_documents)

RESULTS = "docs/results/index.md"
IMPORTS = "docs/imports.md"
HIT_PATH_RECORD = "docs/records/2026-12-01-cache-hit-path-every-published-figure.md"
RECORDING_RECORD = "docs/records/2026-12-03-trace-recording-cost.md"
TRACES = "docs/TRACES.md"  # exact pointers into a runs export (CSV)
FIXTURE = "NOTES.md"  # a hand-written document with exact pointers into fixture.json (below)

FIXTURE_DATA = {
    "miss_path_added_ms": 1.0,
    "hit_rate": 0.707,
    "tok_per_s": 7.8,
    "kept": 0.974,
    "intervals": 10,
    "within": 9,
    "rows": [
        {"engine": "vllm", "speedup": 1.87, "p99_ms": 9.46},
        {"engine": "naive", "speedup": 0.61, "p99_ms": 33.33},
    ],
}
FIXTURE_TEXT = """# Notes

The miss path adds +1.00 ms. <!-- src: fixture.json key=miss_path_added_ms -->
The prefix cache hit 70.7% of tokens at 7.8 tok/s. <!-- src: fixture.json key=hit_rate;tok_per_s -->
Recording kept 97.4% of the rate. <!-- src: fixture.json key=kept -->
9 of 10 intervals lie within the band. <!-- src: fixture.json key=within;intervals -->

| engine | speedup | p99 ms |
|---|---|---|
| vllm | 1.87 | 9.46 | <!-- src: fixture.json key=rows[engine=vllm].speedup;rows[engine=vllm].p99_ms -->
| naive | 0.61 | 33.33 | <!-- src: fixture.json key=rows[engine=naive].speedup;rows[engine=naive].p99_ms -->
"""


def _swap_rows(first: str, second: str) -> Callable[[str], str]:
    """Swap the figures of two table rows, each row keeping its label and pointer."""

    def swap(text: str) -> str:
        lines = text.splitlines(keepends=True)
        one = next(i for i, line in enumerate(lines) if line.startswith(first))
        two = next(i for i, line in enumerate(lines) if line.startswith(second))
        cells_one, cells_two = lines[one].split("|"), lines[two].split("|")
        cells_one[4:], cells_two[4:] = cells_two[4:], cells_one[4:]
        lines[one], lines[two] = "|".join(cells_one), "|".join(cells_two)
        return "".join(lines)

    return swap


def _replace(old: str, new: str) -> Callable[[str], str]:
    def plant(text: str) -> str:
        assert text.count(old) >= 1, f"{old!r} is not in the document any more"
        return text.replace(old, new, 1)

    return plant


# (the kind of mistake, the document, how it is planted, a text the finding's line holds)
PLANTED: list[tuple[str, str, Callable[[str], str], str]] = [
    (
        "transposed digits in a ratio",
        RESULTS,
        _replace("| 1.028x [1.005, 1.051] |", "| 1.082x [1.005, 1.051] |"),
        "1.082x",
    ),
    ("a changed lower bound", RESULTS, _replace("98.3% [96.1%, 100.5%]", "98.3% [95.1%, 100.5%]"), "95.1%"),
    (
        "two rows' intervals swapped",
        RESULTS,
        _swap_rows("| GuideLLM 0.8.1 | streamed | 2 |", "| vllm bench serve 0.32 | streamed | 2 |"),
        "streamed | 2",
    ),
    ("a count off by one", RESULTS, _replace("12 of 13 peer intervals", "13 of 13 peer intervals"), "13 of 13"),
    ("a unitless table cell", RESULTS, _replace("| 1,500 | 1,000 | 1,000 |", "| 1,500 | 1,000 | 999 |"), "| 999 |"),
    ("a transposed rate", RESULTS, _replace("| 7,602 |", "| 7,620 |"), "7,620"),
    ("a p99 latency", RESULTS, _replace("| 15.71 | 0.092 |", "| 17.51 | 0.092 |"), "17.51"),
    ("a ratio in prose", IMPORTS, _replace("reads 1.028x GuideLLM's", "reads 1.082x GuideLLM's"), "1.082x"),
    (
        "a rounds count in prose",
        IMPORTS,
        _replace("over 20 rounds, the lab's TTFT", "over 10 rounds, the lab's TTFT"),
        "10 rounds",
    ),
    ("a bound in a record", RECORDING_RECORD, _replace("98.3% [96.1%, 100.5%]", "98.3% [96.1%, 101.5%]"), "101.5%"),
    (
        "the seed's row's figure",
        HIT_PATH_RECORD,
        _replace("| 2,201 [2,067, 2,344] req/s |", "| 2,811 [2,067, 2,344] req/s |"),
        "2,811",
    ),
    ("a changed bound in a table", HIT_PATH_RECORD, _replace("2,201 [2,067, 2,344]", "2,201 [2,076, 2,344]"), "2,076"),
    ("a count in a table from a CSV", TRACES, _replace("| vLLM | 568 |", "| vLLM | 586 |"), "| vLLM | 586 |"),
    ("a ceiling in prose", TRACES, _replace("(70.6% against 72.0%)", "(70.6% against 27.0%)"), "27.0%"),
    ("a sign", FIXTURE, _replace("+1.00 ms", "-1.00 ms"), "-1.00"),
    ("a share", FIXTURE, _replace("97.4%", "99.0%"), "99.0%"),
    ("a digit added", FIXTURE, _replace("at 7.8 tok/s", "at 17.8 tok/s"), "17.8"),
    ("a leading digit", FIXTURE, _replace("hit 70.7%", "hit 90.7%"), "90.7%"),
    ("a count", FIXTURE, _replace("9 of 10 intervals", "9 of 9 intervals"), "9 of 9"),
    ("a unitless cell", FIXTURE, _replace("| vllm | 1.87 |", "| vllm | 2.87 |"), "2.87"),
    ("two rows swapped", FIXTURE, _swap_rows("| vllm |", "| naive |"), "| vllm |"),
]


def _copy(tmp_path: Path, document: str) -> Path:
    """The document copied outside the checkout (a rendered page into a folder of the same
    name, as its renderer knows it); its pointers resolve against the checkout, or the fixture."""
    if document == FIXTURE:
        (tmp_path / "fixture.json").write_text(json.dumps(FIXTURE_DATA), encoding="utf-8")
        (tmp_path / FIXTURE).write_text(FIXTURE_TEXT, encoding="utf-8")
        return tmp_path / FIXTURE
    source = PROJECT_ROOT / document
    target = tmp_path / source.parent.name / source.name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
    return target


def _findings(path: Path, tmp_path: Path) -> list[tuple[str, str]]:
    root = tmp_path if path.name == FIXTURE else PROJECT_ROOT
    lines = path.read_text(encoding="utf-8").splitlines()
    return [(lines[f.line - 1], f.text) for f in check_documents.check_document(path, root)]


def test_at_least_fifteen_plants_of_every_kind() -> None:
    assert len(PLANTED) >= 15
    assert {document for _kind, document, _plant, _mark in PLANTED} == {
        RESULTS,
        IMPORTS,
        HIT_PATH_RECORD,
        RECORDING_RECORD,
        TRACES,
        FIXTURE,
    }


@pytest.mark.parametrize("document", sorted({document for _kind, document, _plant, _mark in PLANTED}))
def test_the_unplanted_copies_pass(tmp_path: Path, document: str) -> None:
    assert _findings(_copy(tmp_path, document), tmp_path) == []


@pytest.mark.parametrize(("kind", "document", "plant", "mark"), PLANTED, ids=[kind for kind, *_ in PLANTED])
def test_a_planted_wrong_figure_is_caught_on_its_line(
    tmp_path: Path, kind: str, document: str, plant: Callable[[str], str], mark: str
) -> None:
    path = _copy(tmp_path, document)
    path.write_text(plant(path.read_text(encoding="utf-8")), encoding="utf-8")
    findings = _findings(path, tmp_path)
    assert findings, f"{kind}: not caught"
    assert any(mark in line for line, _text in findings), f"{kind}: caught elsewhere: {findings}"
