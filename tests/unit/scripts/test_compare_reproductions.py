"""Two reproductions compared: every differing verdict with both intervals, by how much the figures
differ and whether the intervals overlap, the machines' differing features named, and the differences
attributed to them."""

from __future__ import annotations

import csv
from pathlib import Path

from lab.analysis.compare import RECORD_FIELDS
from lab.measurement.machine_record import MachineRecord, read_cpu_features
from lab.report.comparison import ClaimRow, compare, comparison_markdown, figure_change, read_reproduction
from tests.support.cpuinfo import AVX2_ONLY_FLAGS, BF16_FLAGS, fake_cpuinfo


def _report(folder: Path, verdicts: dict[str, tuple[str, str]], machine: MachineRecord | None = None) -> Path:
    folder.mkdir()
    rows = "\n".join(
        f"| {claim} | figure | 1.0x | {ours} | {verdict} | why |" for claim, (ours, verdict) in verdicts.items()
    )
    (folder / "README.md").write_text(
        "# Reproducing\n\n## Claim by claim\n\n| claim (seed) | figure | seed | ours | verdict | why |\n"
        f"|---|---|---|---|---|---|\n{rows}\n\nRules: ...\n\n## Environment\n\n| a | b |\n|---|---|\n"
        "| lab git commit | 9033924 |\n",
        encoding="utf-8",
    )
    if machine is not None:
        with (folder / "runs.csv").open("w", encoding="utf-8", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=RECORD_FIELDS)
            writer.writeheader()
            for run_id, (backend, start) in enumerate((("naive", "07:36"), ("vllm", "08:12")), start=1):
                writer.writerow(
                    {
                        **{name: None for name in RECORD_FIELDS},
                        **machine.columns(),
                        "run_id": run_id,
                        "backend": backend,
                        "lab_git_commit": "c96bac5",
                        "started_at": f"2026-12-03T{start}:00+00:00",
                        "finished_at": f"2026-12-03T{start}:30+00:00",
                        "backend_settings": "dtype=bfloat16"
                        if machine.cpu_avx512_bf16 or backend == "naive"
                        else "dtype=float32",
                    }
                )
    return folder


VERDICTS_A = {
    "At 1 VU vLLM is ~5x faster.": ("0.70x [0.54x, 0.89x]", "did not hold here (hardware)"),
    "Chat vLLM ~40x naive.": ("1.54x [0.98x, 2.34x]", "inconclusive"),
    "Prefix cache hits.": ("62.8% [50.4%, 78.1%]", "held"),
    "Cache costs nothing.": ("0.90x", "inconclusive"),
}
VERDICTS_B = {
    "At 1 VU vLLM is ~5x faster.": ("1.62x [1.37x, 1.92x]", "partly"),
    "Chat vLLM ~40x naive.": ("9.74x [7.04x, 13.4x]", "partly"),
    "Prefix cache hits.": ("73.6% [69.7%, 77.8%]", "held"),
    "Cache costs nothing.": ("1.05x [0.89x, 1.24x]", "held"),
}


def _machine(tmp_path: Path, name: str, flags: str) -> MachineRecord:
    features = read_cpu_features(fake_cpuinfo(tmp_path, f"cpuinfo-{name}", flags=flags))
    return MachineRecord.capture(features=features, reference_kernel_gflops=60.0, backend_settings={})


def test_machines_differing_in_avx512_bf16_are_named_and_the_differing_verdicts_attributed(tmp_path: Path) -> None:
    first = read_reproduction(_report(tmp_path / "a", VERDICTS_A, _machine(tmp_path, "a", AVX2_ONLY_FLAGS)), "Q3")
    second = read_reproduction(_report(tmp_path / "b", VERDICTS_B, _machine(tmp_path, "b", BF16_FLAGS)), "rerun")
    comparison = compare(first, second)
    # Every differing verdict, not only held against did not hold: three of four.
    assert [d.claim for d in comparison.differences] == [
        "At 1 VU vLLM is ~5x faster.",
        "Chat vLLM ~40x naive.",
        "Cache costs nothing.",
    ]
    assert [d.overlap for d in comparison.differences] == ["no", "no", "no interval on one side"]
    assert {d.feature for d in comparison.hardware} == {"AVX-512", "AVX-512 BF16"}
    assert "AVX-512 BF16 no against yes" in comparison.differences[0].attribution
    assert comparison.differences[0].attribution.startswith("the figures differ beyond both intervals")
    text = comparison_markdown(comparison)
    assert "Machines: they differ in AVX-512: no (Q3) against yes (rerun); AVX-512 BF16: no (Q3) against yes" in text
    assert "Resolved settings differ: vllm settings: dtype=float32 (Q3) against dtype=bfloat16 (rerun)" in text
    assert "| At 1 VU vLLM is ~5x faster. | 0.70x [0.54x, 0.89x] | did not hold here (hardware) | " in text
    assert "Verdicts that differ: 3 of 4 claims." in text
    assert "- rerun: commit c96bac5, 2026-12-03 07:36-08:12 UTC" in text


def test_the_same_machine_is_not_blamed_and_an_unrecorded_one_cannot_be(tmp_path: Path) -> None:
    machine = _machine(tmp_path, "same", AVX2_ONLY_FLAGS)
    first = read_reproduction(_report(tmp_path / "a", VERDICTS_A, machine), "one")
    second = read_reproduction(_report(tmp_path / "b", VERDICTS_B, machine), "two")
    assert compare(first, second).differences[0].attribution.startswith("not the recorded hardware")
    old = read_reproduction(_report(tmp_path / "old", VERDICTS_A), "quick")
    assert old.commits == ("9033924",)  # from the README's environment table when runs.csv is absent
    comparison = compare(old, second)
    assert comparison.differences[0].attribution == "cannot tell: the hardware of quick was not recorded"
    assert "The instruction sets of quick were not recorded" in comparison_markdown(comparison)


def test_each_differing_verdict_says_by_how_much_the_figures_differ(tmp_path: Path) -> None:
    first = read_reproduction(_report(tmp_path / "a", VERDICTS_A), "quick")
    second = read_reproduction(_report(tmp_path / "b", VERDICTS_B), "quick-second")
    comparison = compare(first, second)
    # A ratio against a ratio: the second over the first (1.62 / 0.70); 0.90x has no interval but a figure.
    assert [d.change for d in comparison.differences] == ["2.31 times", "6.32 times", "1.17 times"]
    text = comparison_markdown(comparison)
    assert "| by how much (quick-second against quick) | intervals overlap |" in text
    assert "| partly | 2.31 times | no | " in text


def test_shares_differ_in_points_and_a_missing_figure_is_said() -> None:
    def row(ours: str) -> ClaimRow:
        return ClaimRow(claim="c", ours=ours, verdict="held")

    assert figure_change(row("62.8% [50.4%, 78.1%]"), row("73.6% [69.7%, 77.8%]")) == "+10.8 points"
    assert figure_change(row("1,006.3x"), row("3.17x [2.67x, 3.75x]")) == "0.00315 times"
    assert figure_change(row("0.70x [0.56x, 0.86x]"), row("0.70x [0.56x, 0.86x]")) == "the same figure"
    assert figure_change(row("3.17x"), row("1,006.3x")) == "317 times"
    assert figure_change(row("not measured"), row("0.0%")) == "no figure on one side"
    assert figure_change(row("0.0%"), row("1.2x")) == "not comparable (% against x)"
