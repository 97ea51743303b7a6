"""scripts/docs_reference.py: the reference pages name every figure with its unit and producer,
every setting of a run spec, and every command of the CLI's parser."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

from lab.cli.entry import build_parser
from lab.measurement.results import RunResults

PROJECT_ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("docs_reference", PROJECT_ROOT / "scripts" / "docs_reference.py")
assert _spec is not None and _spec.loader is not None
docs_reference = importlib.util.module_from_spec(_spec)
sys.modules["docs_reference"] = docs_reference
_spec.loader.exec_module(docs_reference)


def test_every_figure_has_a_row_with_its_unit_and_producer() -> None:
    page = docs_reference.figures_page()
    rows = {line.split("|")[1].strip().strip("`"): line for line in page.splitlines() if line.startswith("| `")}
    for name in RunResults.figure_names():
        assert name in rows, name
        cells = [cell.strip() for cell in rows[name].split("|")[1:-1]]
        assert cells[1] and cells[4], rows[name]  # a unit and a producer
    assert "| `latency_p95_s` | seconds |" in page
    assert "| `lateness_p99_ms` | milliseconds |" in page
    assert "| `output_tok_per_s` | tokens per second | output tok/s |" in page
    assert "| `prefix_cache_hit_rate` | share, 0 to 1 |" in page


def test_a_figure_s_group_and_description_come_from_its_declaration() -> None:
    from db.figures import figure_by

    page = docs_reference.figures_page()
    declared = figure_by(lambda f: f.backend_rss_max_mb)
    assert f"## {declared.group.title}" in page and declared.group.description in page
    assert f"| {declared.header} | float | [`ResourceFigures`](#producers) | {declared.description} |" in page


def test_every_run_setting_and_command_is_on_its_page() -> None:
    settings = docs_reference.settings_page()
    for setting in ("`load.vus`", "`workload.stream`", "`cache.fill_first_up_to`", "`vllm.dtype`", "`order_seed`"):
        assert f"| {setting} |" in settings, setting
    cli = docs_reference.cli_page()

    def commands(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> list[tuple[str, ...]]:
        found = []
        for name, _help, sub in docs_reference._subcommands(parser):
            found += [(*words, name), *commands(sub, (*words, name))]
        return found

    names = commands(build_parser(), ())
    assert len(names) > 10
    for words in names:
        assert f"`{' '.join(words)}`" in cli, words


def test_the_spec_file_guide_s_example_is_a_valid_spec_file(tmp_path: Path) -> None:
    import re

    from lab.specs.spec_files import load_spec_file

    guide = (PROJECT_ROOT / "docs" / "guides" / "spec-files.md").read_text(encoding="utf-8")
    example = re.search(r"```toml\n(.*?)```", guide, re.DOTALL)
    assert example is not None
    (tmp_path / "bench.toml").write_text(example.group(1), encoding="utf-8")
    spec = load_spec_file(tmp_path / "bench.toml")
    assert spec.repeats == 3 and spec.grid == {"load.vus": [1, 8]}
