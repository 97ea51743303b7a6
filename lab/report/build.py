"""The reproduction report: say, claim by claim, whether the seed's conclusions hold on the
hardware at hand. ``write_report`` writes under ``docs/reproduction/``:

- ``README.md``: Markdown for reading on GitHub (charts as PNG copies),
- ``report.html``: one self-contained file, Plotly's JavaScript inlined once (the lab
  runs offline, so no CDN),
- ``charts/*.png``: the charts as images (plotly + kaleido driving a local Chromium),
- ``runs.csv``: every run's figures.

This module assembles the document; the parts live beside it: :mod:`.claims` (claims and
verdicts), :mod:`.tables`, :mod:`.charts` (with PNG export) and :mod:`.render` (Markdown and
HTML). Running the experiments and reading them back from the store is :mod:`.reproduction`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from lab.analysis.aggregation import done_runs
from lab.analysis.compare import RECORD_FIELDS
from lab.analysis.interval_verdicts import Verdict
from lab.analysis.safe_csv import records_to_csv
from lab.report.capacity_section import CapacitySection
from lab.report.charts import build_charts, write_pngs
from lab.report.claim_rounds import judge_claims, rounds_of
from lab.report.claims import ClaimVerdict
from lab.report.experiment_meta import ExperimentMeta
from lab.report.plotly_figures import Figure
from lab.report.publish import published_environment, scrub_paths, scrub_record
from lab.report.render import Block, render_html, render_markdown
from lab.report.seal import SEAL_NAME, write_seal
from lab.report.tables import (
    cell_scaling_table,
    environment_table,
    open_questions_table,
    our_table,
    problem_rows,
    ratio_rows,
    scale_name,
    scaling_table,
    seed_table,
)
from lab.report.trust_section import Trust, assess, header_blocks, section_blocks, speed_chart
from lab.report.verdicts import VERDICT_RULES, VERDICTS
from services.processes import PROJECT_ROOT

PRESETS: tuple[str, ...] = ("seed-exp1", "seed-exp2", "seed-exp3")
REPORT_COMMAND = "python -m lab reproduce"
REPORT_DIR = PROJECT_ROOT / "docs" / "reproduction"
# Quick reports are not the front one: under the archive, by date, where lab archive-reproductions indexes them.
QUICK_REPORT_DIR = REPORT_DIR / "archive" / f"quick-{datetime.now(UTC).date().isoformat()}"
SEED_HARDWARE = "one RTX 4060 (8 GB VRAM), 32 GB RAM, WSL2 Ubuntu; Qwen3-0.6B bf16; vLLM 0.31.0"
ADAPTED_CELLS = "The adapted scale's cells: lengthened up to the cap, or kept where no length under it measures:"
SEED_SCALE = "60 s per cell, constant VUs (1, 8, 32 in experiment 1; 32 in experiments 2 and 3), one run per cell"


EXPERIMENT_CHARTS: dict[str, list[tuple[str, str]]] = {
    "seed-exp1": [("exp1_throughput", "Experiment 1 throughput"), ("exp1_latency", "Experiment 1 latency")],
    "seed-exp2": [("exp2_req_per_s", "Experiment 2 req/s")],
    "seed-exp3": [("exp3_req_per_s", "Experiment 3 req/s")],
}
EXPERIMENT_TITLES = {
    "seed-exp1": "Experiment 1: Transformers + FastAPI vs vLLM, by VUs",
    "seed-exp2": "Experiment 2: vLLM direct vs vLLM + Redis response cache",
    "seed-exp3": "Experiment 3: multi-turn chat (ShareGPT)",
}


def build_blocks(
    *,
    records_by_preset: Mapping[str, Sequence[Mapping[str, Any]]],
    experiments_meta: dict[str, ExperimentMeta],
    environment: Mapping[str, object],
    generated_at: datetime,
    command: str,
    verdicts: list[ClaimVerdict],
    png_note: str | None,
    price_per_hour: float | None,
    capacity: CapacitySection | None = None,
    trust: Trust | None = None,
    plan_lines: Sequence[str] = (),
) -> list[Block]:
    """The report as blocks (see ``render_markdown`` and ``render_html``); ``plan_lines``: how its
    long experiment ran (state, wall time and pauses, budget, machine, commits), one paragraph each."""
    trust = trust or assess(records_by_preset)
    blocks = _head_blocks(records_by_preset, experiments_meta, generated_at, command, verdicts, trust)
    if plan_lines:
        blocks += [("h", 2, "How the experiment ran"), *(("p", line) for line in plan_lines)]
    all_records = [r for records in records_by_preset.values() for r in records]
    blocks += [("h", 2, "Environment"), ("table", environment_table(environment, all_records))]
    blocks += _scaling_blocks(experiments_meta)
    blocks += _claim_blocks(verdicts)
    blocks += section_blocks(trust)
    for preset in PRESETS:
        if preset in records_by_preset or preset in experiments_meta:
            blocks += _experiment_blocks(preset, records_by_preset.get(preset, []), experiments_meta.get(preset, {}))
    blocks += _tail_blocks(records_by_preset, price_per_hour, capacity, png_note)
    return blocks


def _head_blocks(
    records_by_preset: Mapping[str, Sequence[Mapping[str, Any]]],
    experiments_meta: dict[str, ExperimentMeta],
    generated_at: datetime,
    command: str,
    verdicts: list[ClaimVerdict],
    trust: Trust,
) -> list[Block]:
    counts = {v: sum(1 for item in verdicts if item["verdict"] == v) for v in VERDICTS}
    all_records = [r for records in records_by_preset.values() for r in records]
    scales = sorted({scale_name(meta.get("scale")) for meta in experiments_meta.values()}) or ["seed"]
    quick = "quick" in scales
    return [
        ("h", 1, "Reproducing the seed's experiments" + (": quick scale" if quick else "")),
        *(
            [
                (
                    "p",
                    "**Quick scale, not the seed's.** Each cell is shorter (and some lighter) than the seed's; the "
                    "Scaling table says how each differs. The seed-scale report is one folder up.",
                )
            ]
            if quick
            else []
        ),
        (
            "p",
            f"Generated {generated_at.isoformat(timespec='seconds')} by `{command}` "
            f"(scale: {', '.join(scales)}). {len(done_runs(all_records))} of {len(all_records)} runs finished. "
            "This is a record of one measurement: regenerate it when the lab changes.",
        ),
        *header_blocks(trust),
        (
            "p",
            "Verdicts: " + ", ".join(f"{counts[v]} {v.text}" for v in VERDICTS if counts[v]) + ". The seed's set-up: "
            f"{SEED_HARDWARE}.",
        ),
    ]


def _scaling_blocks(experiments_meta: dict[str, ExperimentMeta]) -> list[Block]:
    cells = cell_scaling_table(experiments_meta)
    return [
        ("h", 2, "Scaling"),
        ("p", f"The seed: {SEED_SCALE}. Here:"),
        ("table", scaling_table(experiments_meta)),
        *(
            [
                (
                    "p",
                    "The adapted scale's cells: lengthened up to the cap, or kept where no length under it measures:",
                ),
                ("table", cells),
            ]
            if len(cells)
            else []
        ),
        *([("p", overhead)] if (overhead := overhead_sentence(experiments_meta)) else []),
        (
            "p",
            "Figures are means over repeats with their 95% confidence interval [low, high] where there are at "
            "least two (Student's t with n-1 degrees of freedom on the log scale, so a figure that cannot be "
            "negative never gets a negative bound). Each ratio's point and interval come from one estimator: "
            "when both cells ran in the same interleaved rounds, the point is the geometric mean of the per-round "
            "ratios and the interval the t interval of their logs; otherwise the point is the ratio of the means "
            "and the interval the log of that ratio with Welch's degrees of freedom. A figure shown without an "
            "interval has under two repeats a side, or read the same in every repeat. "
            "Throughput is k6's (everything completed "
            "over the whole test, drain included, like the seed's); steady throughput counts the load window "
            "only. Failed requests are summed over repeats.",
        ),
    ]


def _claim_blocks(verdicts: list[ClaimVerdict]) -> list[Block]:
    return [
        ("h", 2, "Claim by claim"),
        (
            "table",
            pd.DataFrame(
                [
                    {
                        "claim (seed)": v["claim"],
                        "figure": v["figure"],
                        "seed": v["seed_text"],
                        "ours": v["ours_text"],
                        "verdict": Verdict(v["verdict"]).text,
                        **({"rounds": v["rounds"]} if "rounds" in v else {}),
                        "why": v["reason"],
                    }
                    for v in verdicts
                ]
            ),
        ),
        (
            "p",
            "Rules (in code: lab/report/verdicts.py VERDICT_RULES), applied to the whole 95% interval of our "
            'figure: a verdict is given only when every value in the interval gets it, "inconclusive" '
            "otherwise:",
        ),
        (
            "list",
            [
                f"{name}: {rule['text']}"
                for name, rule in VERDICT_RULES.items()
                if any(v["rule"] == name for v in verdicts)
            ],
        ),
        (
            "p",
            'Every "why" is computed from these runs\' figures and the environment. '
            f'"{Verdict.NOT_HELD_HARDWARE.text}" '
            "means the figure did not hold and a measured resource of this machine bounds it (named with its "
            'figure): other hardware, such as the seed\'s GPU, would change it. "did not hold" has no such '
            f'bound: the claim itself is in question here. "{Verdict.NOT_MEASURABLE.text}" means the figure is cut '
            "off by "
            "what the run could hold (named): it is not judged.",
        ),
    ]


def _experiment_blocks(preset: str, records: Sequence[Mapping[str, Any]], meta: ExperimentMeta) -> list[Block]:
    blocks: list[Block] = [("h", 2, EXPERIMENT_TITLES[preset])]
    if meta.get("scale_note"):
        blocks.append(("p", f"Scale: {meta['scale_note']}."))
    blocks.append(("h", 3, "Ours"))
    ours = our_table(preset, records)
    blocks.append(("table", ours) if not ours.empty else ("p", "No run of this experiment finished."))
    blocks += [
        ("h", 3, "Seed"),
        ("table", seed_table(preset)),
        ("h", 3, "Ratios"),
        ("table", pd.DataFrame(ratio_rows(preset, records), columns=["figure", "ours", "seed"])),
    ]
    blocks += [("chart", stem, title) for stem, title in EXPERIMENT_CHARTS[preset]]
    return blocks


def _tail_blocks(
    records_by_preset: Mapping[str, Sequence[Mapping[str, Any]]],
    price_per_hour: float | None,
    capacity: CapacitySection | None,
    png_note: str | None,
) -> list[Block]:
    blocks: list[Block] = [("h", 2, "What the original left open")]
    blocks.append(
        (
            "p",
            "Server-side time to first token and time per output token (from the backend's "
            "/metrics), resource use sampled while the load ran, and failures, per cell, mean [95% CI] over "
            "repeats. Client-side TTFT and time per output token need streamed requests (`workload.stream`); "
            "the seed's were not streamed, so they show only for cells that streamed. "
            "Cost per token needs a price per hour: "
            + (
                f"{price_per_hour:g} per hour was used."
                if price_per_hour is not None
                else "none was given, so it is left out."
            ),
        )
    )
    blocks.append(("table", open_questions_table(records_by_preset, price_per_hour=price_per_hour)))
    if capacity is not None:
        blocks.extend(capacity.blocks())
    blocks.append(("h", 2, "Failed runs and warnings"))
    blocks.append(("p", "Warnings are recomputed from each run's stored figures by the code that renders this report."))
    problems = problem_rows(records_by_preset)
    blocks.append(("table", pd.DataFrame(problems)) if problems else ("p", "None: every run finished done."))
    if png_note:
        blocks.append(
            ("p", f"PNG copies of the charts could not be written ({scrub_paths(png_note)}); report.html has them.")
        )
    blocks.append(("p", "Every run's figures: runs.csv. Interactive charts: report.html (self-contained)."))
    return blocks


def overhead_sentence(experiments_meta: dict[str, ExperimentMeta]) -> str | None:
    """The lab's own overhead over the whole reproduction: the seconds its runs ran (each
    experiment's on the union of its runs' intervals, so interleaved rounds count once) over the
    seconds measured."""
    wall_s = sum(meta.get("wall_s") or 0 for meta in experiments_meta.values())
    measured_s = sum(meta.get("measured_s") or 0 for meta in experiments_meta.values())
    if not wall_s or not measured_s:
        return None
    return (
        f"Runs ran {wall_s:.0f} s for {measured_s:.0f} s of measured load (k6's test durations, drain "
        f"included): a wall-time ratio of {wall_s / measured_s:.2f} (the rest is the lab starting "
        "services, warming up and parsing)."
    )


def write_report(
    *,
    records_by_preset: Mapping[str, Sequence[Mapping[str, Any]]],
    experiments_meta: dict[str, ExperimentMeta],
    environment: Mapping[str, object],
    output_dir: Path,
    generated_at: datetime,
    price_per_hour: float | None = None,
    command: str = REPORT_COMMAND,
    write_png: bool = True,
    capacity: CapacitySection | None = None,
    frozen_rules_versions: tuple[int | None, ...] = (),
    allowed_dirty: bool = False,
    plan_lines: Sequence[str] = (),
) -> dict[str, Path]:
    """Write README.md, report.html, runs.csv and charts/*.png under ``output_dir``; their paths.

    ``records_by_preset`` maps a seed preset to its runs as :class:`lab.analysis.compare.RunRecord`
    dicts; ``experiments_meta`` maps it to ``name, scale, scale_note, ids`` (and optionally
    ``duration_s, vus, repeats``).
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    # Published: no machine's folder, the model by name (see lab.report.publish).
    environment = published_environment(environment)
    records_by_preset = {preset: [scrub_record(r) for r in records] for preset, records in records_by_preset.items()}
    trust = assess(records_by_preset, frozen_rules_versions=frozen_rules_versions, allowed_dirty=allowed_dirty)
    verdicts = [
        judged.verdict
        for judged in judge_claims(
            records_by_preset, environment, drift=trust.drift, rounds=rounds_of(experiments_meta)
        )
    ]
    charts = build_charts(records_by_preset)
    if any(index is not None for index in trust.speed_by_run.values()):
        charts["machine_speed"] = speed_chart(trust)
    if capacity is not None:
        charts.update(capacity.charts())
    png_paths, png_note = write_pngs(charts, output_dir / "charts") if write_png else ({}, None)
    blocks = build_blocks(
        records_by_preset=records_by_preset,
        experiments_meta=experiments_meta,
        environment=environment,
        generated_at=generated_at,
        command=command,
        verdicts=verdicts,
        png_note=png_note,
        price_per_hour=price_per_hour,
        capacity=capacity,
        trust=trust,
        plan_lines=plan_lines,
    )
    return _write_files(blocks, charts, png_paths, records_by_preset, output_dir)


def _write_files(
    blocks: list[Block],
    charts: dict[str, Figure],
    png_paths: dict[str, Path],
    records_by_preset: Mapping[str, Sequence[Mapping[str, Any]]],
    output_dir: Path,
) -> dict[str, Path]:
    """README.md, report.html and runs.csv under ``output_dir``; every file's path, the PNGs' too."""
    written: dict[str, Path] = {}
    markdown_path = output_dir / "README.md"
    markdown_path.write_text(render_markdown(blocks, png_paths=png_paths, output_dir=output_dir), encoding="utf-8")
    written["README.md"] = markdown_path
    html_path = output_dir / "report.html"
    html_path.write_text(
        render_html(blocks, charts=charts, title="Serving Lab: reproducing the seed"), encoding="utf-8"
    )
    written["report.html"] = html_path
    csv_path = output_dir / "runs.csv"
    all_records = [r for records in records_by_preset.values() for r in records]
    csv_path.write_text(records_to_csv(all_records, RECORD_FIELDS), encoding="utf-8")
    written["runs.csv"] = csv_path
    for stem, path in png_paths.items():
        written[f"charts/{stem}.png"] = path
    # The files as written, so the documents check finds an edit by hand (lab.report.seal).
    written[SEAL_NAME] = write_seal(output_dir, list(written.values()), keep=False)
    return written
