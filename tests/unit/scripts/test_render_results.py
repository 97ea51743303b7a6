"""scripts/render_results.py: the committed results page and records index are their rendering,
the page stays short and dateless outside its "measured on" lines, and an agreement statement
is counted from the rows at the file's confidence."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("render_results", PROJECT_ROOT / "scripts" / "render_results.py")
assert _spec is not None and _spec.loader is not None
render_results = importlib.util.module_from_spec(_spec)
sys.modules["render_results"] = render_results  # its dataclasses look their module up
_spec.loader.exec_module(render_results)

DATE_OR_TIME_OR_COMMIT = re.compile(r"\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}:\d{2}\b|\b[0-9a-f]{7,40}\b")


def test_the_committed_pages_are_their_rendering() -> None:
    for path, render in render_results.PAGES.items():
        assert (PROJECT_ROOT / path).read_text(encoding="utf-8") == render(PROJECT_ROOT), f"{path}: run make results"


def test_the_results_page_is_short_and_dated_only_on_its_measured_on_lines() -> None:
    lines = render_results.render_results(PROJECT_ROOT).splitlines()
    assert len(lines) <= 300
    visible = [
        re.sub(r"\]\([^)]*\)", "]", line) for line in lines if not line.startswith("Measured on:")
    ]  # link targets
    dated = [line for line in visible if DATE_OR_TIME_OR_COMMIT.search(line)]
    assert dated == []


def test_every_area_names_an_existing_data_file_and_record() -> None:
    for area in render_results.AREAS:
        assert (PROJECT_ROOT / render_results.DATA_DIR / area.data_file).is_file(), area.data_file
        assert not area.record or (PROJECT_ROOT / render_results.RECORDS_DIR / area.record).is_file(), area.record


def _row(peer: str, figure: str, low: float, high: float) -> dict[str, object]:
    return {"peer": peer, "mode": "streamed", "concurrency": 8, "figure": figure, "ci95_low": low, "ci95_high": high}


def test_agreement_is_counted_at_the_file_s_confidence_with_one_ratio_counted_once() -> None:
    data = {
        "confidence": 0.975,
        "pooled_from": ["stage1.json", "stage2.json"],
        "settings": {"pairs": 20},
        "rows": [
            _row("GuideLLM", "req_per_s", 0.99, 1.04),
            _row("GuideLLM", "output_tok_per_s", 0.99, 1.06),  # the same ratio, outside: the pair counts as out
            _row("GuideLLM", "ttft_avg_s", 1.005, 1.051),
            _row("vllm bench serve", "tpot_avg_s", 0.97, 1.03),
            _row("the lab again (A/A)", "req_per_s", 0.96, 1.04),
        ],
    }
    statement = render_results.agreement_statement(data)
    assert statement.startswith("At 97.5% confidence, 2 of 4 peer intervals lie within [0.95, 1.05]")
    assert "(1 of 3 distinct figures" in statement
    assert "the A/A control (the lab against itself): 1 of 1" in statement
    assert "Pooled from 2 stages: `stage1.json`, `stage2.json`; 20 rounds a row." in statement


def test_every_set_up_and_test_time_is_in_its_dated_record() -> None:
    import json

    data = json.loads((PROJECT_ROOT / "docs/benchmarks/setup_and_test_times.json").read_text(encoding="utf-8"))
    records = " ".join((PROJECT_ROOT / source).read_text(encoding="utf-8") for source in data["sources"])
    for item in data["times"]:
        number = item["figure"].split()[0]
        assert re.search(rf"(?<![\d.]){re.escape(number)}(?![\d])", records), item


def test_a_data_file_written_by_a_benchmark_carries_its_machine_and_the_page_prints_it(tmp_path: Path) -> None:
    from benchmarks import data_files

    path = tmp_path / "figures.json"
    data_files.write(path, {"figure": 1.0})
    record = json.loads(path.read_text())["machine_record"]
    assert record["cpu_model"] and isinstance(record["instruction_sets"], list) and record["cpu_cores"] >= 1
    kept = {**record, "cpu_model": "Some Xeon"}
    data_files.write(path, {"figure": 2.0, "machine_record": kept})  # a derived file keeps its record
    assert json.loads(path.read_text())["machine_record"] == kept
    text = render_results.machine_text({**kept, "instruction_sets": ["AVX2", "AMX"], "gpus": []})
    assert text.startswith("Some Xeon (AVX2, AMX), ") and "no GPU" in text
    assert render_results.machine_text(None) == "" and render_results.machine_text([None, None]) == ""
