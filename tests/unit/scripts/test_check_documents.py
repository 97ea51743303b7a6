"""scripts/check_documents.py: the checkout's documents pass; a planted wrong figure, a figure
without a pointer and a pointer to a missing file fail. The planted figures of every kind a
reader would miss are in test_check_documents_planted.py."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("check_documents", PROJECT_ROOT / "scripts" / "check_documents.py")
assert _spec is not None and _spec.loader is not None
check_documents = importlib.util.module_from_spec(_spec)
sys.modules["check_documents"] = check_documents  # its dataclasses look their module up
_spec.loader.exec_module(check_documents)

RUNS_CSV = (
    "run_id,backend,vus,output_tok_per_s,prefix_cache_hit_rate\n1,vllm,1,7.6,0.62\n2,vllm,1,8.0,0.64\n3,naive,1,11.0,\n"
)


def test_the_checkout_s_documents_pass() -> None:
    assert [str(finding) for finding in check_documents.check()] == []


def test_a_planted_wrong_figure_in_a_record_fails(tmp_path: Path) -> None:
    # The planted copy sits outside the checkout; its pointers resolve against the checkout's sources.
    record = PROJECT_ROOT / "docs" / "records" / "2026-12-01-cache-hit-path-every-published-figure.md"
    benchmarks = record.read_text(encoding="utf-8")
    assert "| 2,201 [2,067, 2,344] req/s |" in benchmarks
    (tmp_path / "records").mkdir()
    planted = tmp_path / "records" / record.name
    planted.write_text(benchmarks.replace("2,201 [2,067", "3,440 [2,067"), encoding="utf-8")
    findings = [str(f) for f in check_documents.check_document(planted, PROJECT_ROOT)]
    assert len(findings) == 1 and "figures not in order in docs/reproduction/archive/quick/README.md" in findings[0]


def test_csv_selectors_rounding_shares_and_missing_pointers(tmp_path: Path) -> None:
    # A dated record keeps the pointers it was written with (loose ones included); see below for the rest.
    (tmp_path / "records").mkdir()
    (tmp_path / "records" / "runs.csv").write_text(RUNS_CSV, encoding="utf-8")
    pointer = "<!-- src: runs.csv where=backend:vllm,vus:1 col=output_tok_per_s -->"
    document = tmp_path / "records" / "2026-12-01-notes.md"
    document.write_text(
        "# Notes\n\n"
        f"vLLM at 1 VU: 7.8 tok/s (7.6 and 8.0 a run). {pointer}\n"
        f"vLLM at 1 VU: 11.0 tok/s. {pointer}\n"  # the naive server's figure: not in the selected cells
        "The prefix cache hit 63.0% of tokens. <!-- src: runs.csv col=prefix_cache_hit_rate -->\n"
        "A figure with no source: 42 req/s.\n"
        "A lease of 6 s. <!-- not-data: a test's setting -->\n"
        "Gone: 3 s. <!-- src: old/output.json -->\n"
        "Old: 17.9 tok/s. <!-- src: commit a460864 docs/reproduction/README.md -->\n"
        "`99 req/s` in code, a 95% confidence interval.\n\n"
        "## Section\n<!-- src: runs.csv -->\n\n| figure |\n|---|\n| 11.0 tok/s |\n",
        encoding="utf-8",
    )
    findings = [f.text for f in check_documents.check_document(document, tmp_path)]
    assert findings == [
        "11.0tok/s is not in runs.csv where=backend:vllm,vus:1 col=output_tok_per_s (after rounding)",
        "figure without a source pointer: 42 req/s",
        "source old/output.json does not exist",
    ]
    # Any other document names each figure's one value (key=): a loose or a commit pointer is a finding.
    guide = tmp_path / "records" / "GUIDE.md"
    guide.write_text(document.read_text(encoding="utf-8"), encoding="utf-8")
    loose = [f.text for f in check_documents.check_document(guide, tmp_path) if "a loose pointer" in f.text]
    assert len(loose) == 6 and "commit a460864" in loose[4]


def test_a_report_and_a_comparison_are_checked_against_their_seals(tmp_path: Path) -> None:
    from lab.report.seal import seal_unsealed

    reproductions = tmp_path / "docs" / "reproduction"
    (reproductions / "archive").mkdir(parents=True)
    (reproductions / "README.md").write_text("vLLM 99 tok/s\n", encoding="utf-8")
    (reproductions / "runs.csv").write_text(RUNS_CSV, encoding="utf-8")
    comparison = reproductions / "archive" / "a-comparison.md"
    comparison.write_text(
        "<!-- generated: python -m lab compare-reproductions a b -->\n# C\n\n1.5x\n", encoding="utf-8"
    )
    unsealed = sorted(f.path for f in check_documents.check(tmp_path) if "not sealed" in f.text)
    assert unsealed == [
        "docs/reproduction/README.md",
        "docs/reproduction/archive/a-comparison.md",
        "docs/reproduction/runs.csv",
    ]
    seal_unsealed(reproductions)
    assert [str(f) for f in check_documents.check(tmp_path) if "archive-reproductions` writes" not in f.text] == []

    # An edit by hand, however small, anywhere in what the lab wrote: each is named.
    (reproductions / "README.md").write_text("vLLM 98 tok/s\n", encoding="utf-8")
    (reproductions / "runs.csv").write_text(RUNS_CSV.replace("7.6", "7.9"), encoding="utf-8")
    comparison.write_text(comparison.read_text(encoding="utf-8").replace("1.5x", "1.6x"), encoding="utf-8")
    edited = sorted(f.path for f in check_documents.check(tmp_path) if "not edited by hand" in f.text)
    assert edited == [
        "docs/reproduction/README.md",
        "docs/reproduction/archive/a-comparison.md",
        "docs/reproduction/runs.csv",
    ]
    # ...and a second run of the archive command never seals over them.
    assert seal_unsealed(reproductions) == []
    assert len([f for f in check_documents.check(tmp_path) if "not edited by hand" in f.text]) == 3


def test_a_figure_changed_in_a_dated_record_is_named_whatever_its_pointer(tmp_path: Path) -> None:
    import shutil

    records = tmp_path / "docs" / "records"
    shutil.copytree(PROJECT_ROOT / "docs" / "records", records)
    assert check_documents.check_sealed_documents(tmp_path) == []
    record = records / "2026-12-01-cache-hit-path-every-published-figure.md"
    text = record.read_text(encoding="utf-8")
    assert "2,201" in text
    record.write_text(text.replace("2,201", "2,210", 1), encoding="utf-8")  # a transposed digit
    findings = [str(f) for f in check_documents.check_sealed_documents(tmp_path)]
    assert findings == [
        f"docs/records/{record.name}:1: differs from the record as written (write a new record instead)"
        " (SHA256SUMS): it is not edited by hand"
    ]
