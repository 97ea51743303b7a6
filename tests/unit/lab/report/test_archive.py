"""The archive of earlier reproduction reports: each index line read from a report's README.md and
runs.csv, a printed point off its interval's centre found (rounding allowed for), and the generated
top line written once, replaced on a rerun, never doubled, with the body below it unchanged."""

from __future__ import annotations

from pathlib import Path

from lab.cli import archive_commands
from lab.report import archive
from lab.report.archive import (
    LINE_MARK,
    comparison_findings,
    generated_line,
    index_markdown,
    machine_text,
    off_centre,
    read_report,
    with_generated_line,
    without_generated_line,
    write_archive,
)
from lab.report.comparison import ClaimRow

OLD_NOTE = "> **Added by hand after generation (not by the report code):** compared with `../quick/`, no conflict.\n\n"


def _readme(
    *,
    ours: str = "5.00x [1.87x, 10.3x]",
    ratio: str = "7.52x [0.01x, 888.7x]",
    note: str = "",
    commit: str = "b062e68efee6",
) -> str:
    return (
        f"# Reproducing the seed's experiments\n\n{note}"
        "Generated 2026-12-01T23:28:13+00:00 by `python -m lab reproduce --repeats 3` (scale: full). 39 of 39 runs "
        f"finished.\n\nEvery run came from lab commit {commit}. Every run ran on a clean tree.\n\n"
        "Verdicts: 2 held, 1 partly, 6 inconclusive, 5 not measurable here. The seed's set-up: one RTX 4060.\n\n"
        "## Claim by claim\n\n| claim (seed) | figure | seed | ours | verdict | why |\n|---|---|---|---|---|---|\n"
        "| At 1 VU vLLM is ~5x faster. | vLLM over naive output tok/s at 1 VU | 5.15x | 0.70x [0.56x, 0.86x] | "
        "inconclusive | why |\n"
        f"| In chat vLLM is ~40x naive. | vLLM over naive req/s, multi-turn chat | 40.7x | {ours} | partly | why |\n"
        "\n## Environment\n\n| a | b |\n|---|---|\n| CPU | AMD EPYC, 2 cores |\n"
        "\n### Ratios\n\n| figure | ours | seed |\n|---|---|---|\n"
        f"| vLLM over naive req/s | {ours} | 40.7x |\n"  # the claim's figure again: counted once
        f"| vLLM over naive output tok/s at 32 VUs | {ratio} | 174.0x |\n"
    )


def _row(ours: str) -> ClaimRow:
    return ClaimRow(claim="claim", ours=ours, verdict="partly", figure="vLLM over naive req/s, multi-turn chat")


def test_a_ratio_of_means_beside_a_geometric_interval_is_found_with_its_centre() -> None:
    found = off_centre(_row("5.00x [1.87x, 10.3x]"))
    assert found is not None
    assert (found.figure, found.printed, found.centre) == ("vLLM over naive req/s, multi-turn chat", "5.00x", "4.39x")
    assert off_centre(_row("7.52x [0.50x, 9.60x]")) is not None
    thousands = off_centre(_row("1,580.5x [1,169.0x, 2,096.7x]"))
    assert thousands is not None and thousands.centre == "1,565.6x"


def test_a_point_at_its_centre_within_rounding_is_not_flagged() -> None:
    # sqrt(0.56 * 0.86) = 0.694, printed 0.70x: bounds within 0.005 of 0.56 and 0.86 reach 0.699.
    assert off_centre(_row("0.70x [0.56x, 0.86x]")) is None
    assert off_centre(_row("70.7% [64.7%, 77.4%]")) is None
    assert off_centre(_row("10.5% [1.3%, 84.0%]")) is None
    # 2.68x against sqrt(2.17 * 3.34) = 2.692: no rounding of the bounds reaches below 2.687.
    assert off_centre(_row("2.68x [2.17x, 3.34x]")) is not None
    assert off_centre(_row("0.0%")) is None
    assert off_centre(_row("not measured")) is None


def test_an_index_line_says_date_commit_machine_scale_and_verdicts() -> None:
    old = read_report("seed-2026-12-01", _readme(), [{"lab_git_commit": "b062e68efee6c291"}])
    assert (old.date, old.commit, old.machine, old.scale) == ("2026-12-01", "b062e68", "not recorded", "full")
    assert old.verdicts == "2 held, 1 partly, 6 inconclusive, 5 not measurable here"
    assert not old.hand_note
    # The claim off its centre, and a ratio of an experiment's table (sqrt(0.01 * 888.7) = 2.98).
    assert [(item.figure, item.printed, item.centre) for item in old.off_centre] == [
        ("vLLM over naive req/s, multi-turn chat", "5.00x", "4.39x"),
        ("vLLM over naive output tok/s at 32 VUs", "7.52x", "2.98x"),
    ]
    recorded = {"cpu_model_name": "AMD EPYC", "cpu_avx2": "True", "cpu_avx512": "False", "cpu_avx512_bf16": "False"}
    assert machine_text([recorded, {**recorded, "cpu_amx": "False"}]) == (
        "AMD EPYC: AVX2; no AVX-512, AVX-512 BF16 / AMD EPYC: AVX2; no AVX-512, AVX-512 BF16, AMX"
    )
    # Without runs.csv the commit comes from the report's own line.
    assert read_report("quick", _readme(commit="cd3223a00b31"), []).commit == "cd3223a"
    index = index_markdown([old], [])
    assert (
        "| [seed-2026-12-01](seed-2026-12-01/README.md) | 2026-12-01 | b062e68 | not recorded | full | "
        "2 held, 1 partly, 6 inconclusive, 5 not measurable here | 2 |" in index.splitlines()
    )


COMPARISON = (
    "# Two compared\n\n## seed-2026-12-01 against seed-2026-12-01/rules-v4\n\n- a: commit b062e68\n\n"
    "Verdicts that differ: 2 of 14 claims.\n\n| claim | ... |\n"
)


def test_a_hand_note_gets_what_the_generated_comparison_found_with_a_link() -> None:
    findings = comparison_findings(COMPARISON, "seed-rules-v4-comparison.md")
    assert [(f.first, f.second, f.differing, f.claims) for f in findings] == [
        ("seed-2026-12-01", "seed-2026-12-01/rules-v4", 2, 14)
    ]
    nested = read_report(
        "seed-2026-12-01/rules-v4",
        _readme(ours="4.39x [1.87x, 10.3x]", ratio="2.98x [0.01x, 888.7x]", note=OLD_NOTE),
        [],
    )
    line = generated_line(nested, findings)
    assert line is not None and line.startswith(LINE_MARK)
    assert "2 of 14 verdicts differ ([seed-rules-v4-comparison.md](../../seed-rules-v4-comparison.md))" in line
    assert "not the centre" not in line
    # No note and no point off centre: no line at all.
    assert (
        generated_line(
            read_report("quick-third", _readme(ours="4.39x [1.87x, 10.3x]", ratio="2.98x [0.01x, 888.7x]"), []),
            findings,
        )
        is None
    )


def _archive(tmp_path: Path, readme: str) -> Path:
    folder = tmp_path / "archive" / "seed-2026-12-01"
    folder.mkdir(parents=True)
    (folder / "README.md").write_text(readme, encoding="utf-8")
    (tmp_path / "archive" / "seed-scale-comparison.md").write_text(
        COMPARISON.replace("seed-2026-12-01/rules-v4", "block-order"), encoding="utf-8"
    )
    return tmp_path / "archive"


def test_rerunning_the_generator_replaces_its_line_and_leaves_the_body_byte_for_byte(tmp_path: Path) -> None:
    body = _readme(note=OLD_NOTE)
    folder = _archive(tmp_path, body)
    readme = folder / "seed-2026-12-01" / "README.md"
    assert write_archive(folder) == [readme, folder / "README.md"]
    written = readme.read_text(encoding="utf-8")
    assert written.count(LINE_MARK) == 1 and written.startswith(LINE_MARK)
    assert "vLLM over naive req/s, multi-turn chat: 5.00x printed, centre 4.39x" in written.splitlines()[0]
    assert "seed-2026-12-01 against block-order: 2 of 14 verdicts differ" in written.splitlines()[0]
    assert written.endswith("\n\n" + body) and without_generated_line(written) == body
    assert write_archive(folder) == []  # idempotent
    # A stale line of ours is replaced, not added to; a report that no longer needs one loses it.
    readme.write_text(with_generated_line(body, f"{LINE_MARK}: an older finding"), encoding="utf-8")
    write_archive(folder)
    assert readme.read_text(encoding="utf-8") == written
    assert with_generated_line(written, None) == body


def test_the_checkout_s_archive_is_as_the_generator_writes_it() -> None:
    # Its index and top lines are generated: a hand edit, or a report moved in without rerunning
    # `python -m lab archive-reproductions`, fails here.
    texts = archive.archive_texts(archive_commands.DEFAULT_ARCHIVE)
    assert [str(path) for path in archive.stale_files(texts)] == []
    assert len(texts) > 1
